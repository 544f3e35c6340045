// Named, typed accessors of every op's attributes, generated from ops.def:
//
//   double eps = attrs::BatchNorm{node}.eps();          // node: anything with attrs()
//   Scalar alpha = attrs::Add{attr_vector}.alpha();     // or the Attrs themselves
//
// The only code that knows an attribute's position is this header: reordering
// or inserting an attribute in ops.def changes no reader. A view holds a
// reference to the attributes: use it within the expression (or while the node
// lives). Constructing one checks the attribute count (kiln::Error naming the op).
#pragma once

#include <concepts>

#include "runtime/op_registry.h"

namespace kiln::attrs {

namespace detail {
const Attrs &checked(const Attrs &a, OpId id, size_t count);

// Per op, its attributes' positions: enumerators name_.
#define ATTR(Type, Name) Name##_,
#define KILN_OP(Id, mnemonic, kind, operands, traits, attr_list)                                               \
  struct Id##Index {                                                                                       \
    enum : size_t { attr_list kCount };                                                                    \
  };
#include "runtime/ops.def"
#undef ATTR
} // namespace detail

template <class N>
concept HasAttrs = requires(const N &n) {
  { n.attrs() } -> std::convertible_to<const Attrs &>;
};

#define ATTR(Type, Name)                                                                                   \
  attr_type::Type::type Name() const { return attr_type::Type::get(a_[Name##_]); }
#define KILN_OP(Id, mnemonic, kind, operands, traits, attr_list)                                               \
  class Id : detail::Id##Index {                                                                           \
  public:                                                                                                  \
    explicit Id(const Attrs &a) : a_(detail::checked(a, OpId::Id, kCount)) {}                              \
    template <HasAttrs N> explicit Id(const N &n) : Id(n.attrs()) {}                                       \
    attr_list                                                                                              \
                                                                                                           \
  private:                                                                                                 \
    [[maybe_unused]] const Attrs &a_;                                                                                     \
  };
#include "runtime/ops.def"
#undef ATTR

} // namespace kiln::attrs
