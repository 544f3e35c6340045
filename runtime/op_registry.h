// The op table as data: ids, mnemonics, kinds, attribute names and the uniform
// adapter each op is run through by the interpreter, the tracer and shape inference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

enum class OpId : uint16_t {
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs) Id,
#include "runtime/ops.def"
};
inline constexpr int kNumOps = 0
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs) +1
#include "runtime/ops.def"
    ;

enum class OpKind : uint8_t { Elementwise, Reduction, View, Contraction, Composite, Opaque, Factory };
std::string_view kind_name(OpKind k);

// The facts an op declares in its ops.def entry (see the comment there). Passes
// and codegen derive their decisions from these instead of listing ops.
enum class OpTrait : uint32_t {
  NoTraits = 0,
  Pointwise = 1u << 0,
  Cheap = 1u << 1,
  Costly = 1u << 2,
  Transcendental = 1u << 3,
  Lowers = 1u << 4,
  Eager = 1u << 5,
  Fuses = 1u << 6,
  NoGrad = 1u << 7,
  EpilogueHead = 1u << 8,
  BatchStrided = 1u << 9,
  SizesInAttrs = 1u << 10,
  Random = 1u << 11,
};
constexpr OpTrait operator|(OpTrait a, OpTrait b) { return OpTrait(uint32_t(a) | uint32_t(b)); }
constexpr bool has(OpTrait set, OpTrait t) { return (uint32_t(set) & uint32_t(t)) != 0; }
// Names of the traits, in bit order (docs and test messages).
inline constexpr const char *kOpTraitNames[] = {"Pointwise", "Cheap", "Costly", "Transcendental", "Lowers",
                                                "Eager",     "Fuses", "NoGrad", "EpilogueHead",
                                                "BatchStrided", "SizesInAttrs", "Random"};

// How many tensor operands an op takes (ops.def's In(n) / In(min, max)).
struct OpOperands {
  size_t min;
  size_t max; // kVariadicOperands for tensor lists (cat, stack)
};
inline constexpr size_t kVariadicOperands = 1 << 16;

namespace detail {
namespace op_def {
inline constexpr size_t Variadic = kVariadicOperands;
constexpr OpOperands In(size_t n) { return {n, n}; }
constexpr OpOperands In(size_t min, size_t max) { return {min, max}; }
} // namespace op_def

struct OpFacts {
  OpKind kind;
  OpOperands operands;
  OpTrait traits;
};
inline constexpr OpFacts kOpFacts[] = {
#define KILN_OP(Id, mnemonic, kind_, operands_, traits_, attrs)                                             \
  OpFacts{OpKind::kind_, [] { using namespace op_def; return operands_; }(),                              \
          [] { using enum OpTrait; return OpTrait(traits_); }()},
#include "runtime/ops.def"
};
} // namespace detail

constexpr OpKind op_kind(OpId id) { return detail::kOpFacts[size_t(id)].kind; }
constexpr OpOperands op_operands(OpId id) { return detail::kOpFacts[size_t(id)].operands; }
constexpr OpTrait op_traits(OpId id) { return detail::kOpFacts[size_t(id)].traits; }
constexpr bool has_trait(OpId id, OpTrait t) { return has(op_traits(id), t); }

// Derived facts (one place each; see ops.def for what the traits mean).
// Cheap to recompute in every group that uses it (passes/fuse_duplicate.cpp).
constexpr bool is_cheap(OpId id) { return has_trait(id, OpTrait::Cheap); }
// May join a fusion group (passes/fuse.cpp).
constexpr bool is_fusible(OpId id) { return has_trait(id, OpTrait::Fuses); }
// Its kernel is a vector-math function.
constexpr bool is_transcendental(OpId id) { return has_trait(id, OpTrait::Transcendental); }
// Codegen is expected to have a lowering rule (checked by test/unit/op_table_test.cpp).
constexpr bool lowering_expected(OpId id) { return has_trait(id, OpTrait::Lowers); }
// A contraction that may head a fusion group whose elementwise epilogue runs on its
// output tiles (passes/fuse.cpp; codegen/epilogue.cpp runs them).
constexpr bool heads_epilogue(OpId id) { return has_trait(id, OpTrait::EpilogueHead); }
// A batched GEMM whose result the layout pass may give permuted batch strides
// (passes/layout.cpp): its kernel writes each [M, N] block at any ldc.
constexpr bool writes_strided_batches(OpId id) { return has_trait(id, OpTrait::BatchStrided); }
// Draws new random numbers in every call: never folded, never merged (param_fold, cse).
constexpr bool is_random(OpId id) { return has_trait(id, OpTrait::Random); }

// One attribute value. none (an absent optional), int, float, bool, int list,
// string or dtype; Scalars map to int, float or bool.
class AttrValue {
public:
  using Variant = std::variant<std::monostate, int64_t, double, bool, std::vector<int64_t>, std::string, DType>;
  AttrValue() = default;
  AttrValue(std::monostate) {}
  AttrValue(int v) : v_(int64_t(v)) {}
  AttrValue(long v) : v_(int64_t(v)) {}
  AttrValue(long long v) : v_(int64_t(v)) {}
  AttrValue(double v) : v_(v) {}
  AttrValue(bool v) : v_(v) {}
  AttrValue(IntArrayRef v) : v_(v.vec()) {}
  AttrValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  AttrValue(std::initializer_list<int64_t> v) : v_(std::vector<int64_t>(v)) {}
  AttrValue(std::string v) : v_(std::move(v)) {}
  AttrValue(const char *v) : v_(std::string(v)) {}
  AttrValue(DType v) : v_(v) {}
  AttrValue(const Scalar &s);
  template <class T> AttrValue(const std::optional<T> &o) {
    if (o) *this = AttrValue(*o);
  }

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_ints() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_dtype() const { return std::holds_alternative<DType>(v_); }
  // Accessors throw kiln::Error when the value has another type.
  int64_t as_int() const;
  double as_float() const; // ints convert
  bool as_bool() const;
  const std::vector<int64_t> &as_ints() const;
  const std::string &as_string() const;
  DType as_dtype() const;
  Scalar as_scalar() const; // int, float or bool
  std::optional<Scalar> as_opt_scalar() const { return is_none() ? std::nullopt : std::optional(as_scalar()); }
  std::optional<int64_t> as_opt_int() const { return is_none() ? std::nullopt : std::optional(as_int()); }
  std::optional<double> as_opt_float() const { return is_none() ? std::nullopt : std::optional(as_float()); }
  std::optional<DType> as_opt_dtype() const { return is_none() ? std::nullopt : std::optional(as_dtype()); }
  std::optional<std::string> as_opt_string() const {
    return is_none() ? std::nullopt : std::optional(as_string());
  }
  const Variant &variant() const { return v_; }
  bool operator==(const AttrValue &o) const { return v_ == o.v_; }

private:
  Variant v_;
};

// Positional attributes, in the order the op's entry in ops.def names them. Read
// them through the named accessors of runtime/op_attrs.h (attrs::Add{node}.alpha()).
using Attrs = std::vector<AttrValue>;

// The attribute types of ops.def (ATTR(Type, name)): how an accessor reads the
// value, its name in the op reference (torch's schema spelling), and which values
// the IR parser accepts for it: `accepts` has bit i set for AttrValue::Variant
// alternative i (the ones its accessor reads), `what` names them in errors.
namespace attr_kind {
inline constexpr unsigned None = 1u << 0, Int = 1u << 1, Float = 1u << 2, Bool = 1u << 3, Ints = 1u << 4,
                          String = 1u << 5, DType = 1u << 6;
} // namespace attr_kind
namespace attr_type {
#define KILN_ATTR_TYPE(T, R, doc, read, kinds, description)                                                \
  struct T {                                                                                               \
    using type = R;                                                                                        \
    static constexpr const char *spelling = doc;                                                           \
    static constexpr unsigned accepts = kinds;                                                             \
    static constexpr const char *what = description;                                                       \
    static type get(const AttrValue &v) { return v.read(); }                                               \
  };
namespace k = attr_kind;
KILN_ATTR_TYPE(Int, int64_t, "int", as_int, k::Int, "an int")
KILN_ATTR_TYPE(OptInt, std::optional<int64_t>, "int?", as_opt_int, k::Int | k::None, "an int or none")
KILN_ATTR_TYPE(Float, double, "float", as_float, k::Float | k::Int, "a number")
KILN_ATTR_TYPE(OptFloat, std::optional<double>, "float?", as_opt_float, k::Float | k::Int | k::None, "a number or none")
KILN_ATTR_TYPE(Bool, bool, "bool", as_bool, k::Bool, "a bool")
KILN_ATTR_TYPE(IntList, const std::vector<int64_t> &, "int[]", as_ints, k::Ints, "an int list")
KILN_ATTR_TYPE(Str, const std::string &, "str", as_string, k::String, "a string")
KILN_ATTR_TYPE(OptStr, std::optional<std::string>, "str?", as_opt_string, k::String | k::None, "a string or none")
KILN_ATTR_TYPE(Number, Scalar, "Scalar", as_scalar, k::Int | k::Float | k::Bool, "a number")
KILN_ATTR_TYPE(OptNumber, std::optional<Scalar>, "Scalar?", as_opt_scalar, k::Int | k::Float | k::Bool | k::None,
               "a number or none")
KILN_ATTR_TYPE(ScalarType, DType, "ScalarType", as_dtype, k::DType, "a dtype")
KILN_ATTR_TYPE(OptScalarType, std::optional<DType>, "ScalarType?", as_opt_dtype, k::DType | k::None, "a dtype or none")
#undef KILN_ATTR_TYPE
} // namespace attr_type

// Runs one op on `inputs` (an undefined Tensor stands for an absent optional
// input) and returns all of its results.
using OpFn = std::vector<Tensor> (*)(const std::vector<Tensor> &inputs, const Attrs &attrs);

struct OpInfo {
  OpId id;
  std::string_view mnemonic;
  OpKind kind;
  std::vector<std::string_view> attr_names;
  std::vector<std::string_view> attr_types; // attr_type::T::spelling per attribute
  std::vector<unsigned> attr_accepts;       // attr_type::T::accepts per attribute (the IR parser's check)
  std::vector<std::string_view> attr_what;  // attr_type::T::what per attribute
  OpFn run;
};

const OpInfo &op_info(OpId id);
// nullptr when no op has that mnemonic.
const OpInfo *find_op(std::string_view mnemonic);
// op_info(id).run(inputs, attrs) with arity/attribute-count checks.
std::vector<Tensor> run_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);

} // namespace kiln
