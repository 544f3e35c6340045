// Named, typed accessors of every op's attributes, generated from ops.def:
//
//   double eps = attrs::BatchNorm{node}.eps();          // node: anything with attrs()
//   Scalar alpha = attrs::Add{attr_vector}.alpha();     // or the Attrs themselves
//
// and built by name, with designated initializers in ops.def's order:
//
//   Attrs a = attrs::SumArgs{.dims = d, .keepdim = true, .dtype = std::nullopt}.to_attrs();
//   KILN_TRACE(Sum, {x}, .dims = d, .keepdim = keepdim, .dtype = dtype);   // runtime/trace_hook.h
//   b.op<OpId::Sum>({x}, {.dims = d, .keepdim = true, .dtype = std::nullopt}); // passes/rewrite.h
//
// The only code that knows an attribute's position is this header: reordering
// an attribute in ops.def changes no reader, and every builder that names them in
// the old order, or leaves one out, stops compiling (C++20 designated initializers
// follow declaration order; a field has no default). A view holds a
// reference to the attributes: use it within the expression (or while the node
// lives). Constructing one checks the attribute count (kiln::Error naming the op).
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

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


namespace detail {
// A builder field: it must be given (no default constructor), with a value its
// attribute type holds.
template <class V> struct Required {
  V value;
  Required() = delete;
  template <class U>
    requires(!std::same_as<std::remove_cvref_t<U>, Required> && std::constructible_from<V, U>)
  Required(U &&u) : value(std::forward<U>(u)) {}
  // Shapes and dims arrive as IntArrayRef too (sizes(), the view ops).
  Required(IntArrayRef r)
    requires std::same_as<V, std::vector<int64_t>>
      : value(r.vec()) {}
};
template <class T> using Field = Required<std::remove_cvref_t<typename T::type>>;
} // namespace detail

// Per op, its attributes by name: IdArgs{.name = value, ...}.to_attrs().
#define ATTR(Type, Name) detail::Field<attr_type::Type> Name;
#define KILN_OP(Id, mnemonic, kind, operands, traits, attr_list)                                               \
  struct Id##Args {                                                                                        \
    static constexpr OpId op = OpId::Id;                                                                   \
    attr_list Attrs to_attrs() const;                                                                      \
  };
#include "runtime/ops.def"
#undef ATTR
// Appended one by one, not as Attrs{...}: GCC 12 reports -Wmaybe-uninitialized,
// a false positive, for the variant copies out of an initializer_list (as_strided, sum).
#define ATTR(Type, Name) out.emplace_back(Name.value);
#define KILN_OP(Id, mnemonic, kind, operands, traits, attr_list)                                               \
  inline Attrs Id##Args::to_attrs() const {                                                                \
    Attrs out;                                                                                             \
    attr_list return out;                                                                                  \
  }
#include "runtime/ops.def"
#undef ATTR

// attrs::Args<OpId::Sum> is SumArgs (for builders templated on the op).
template <OpId> struct ArgsOf;
#define KILN_OP(Id, mnemonic, kind, operands, traits, attr_list)                                               \
  template <> struct ArgsOf<OpId::Id> {                                                                    \
    using type = Id##Args;                                                                                 \
  };
#include "runtime/ops.def"
template <OpId Id> using Args = typename ArgsOf<Id>::type;

} // namespace kiln::attrs
