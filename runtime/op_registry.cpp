#include "runtime/op_registry.h"

#include <string_view>
#include <unordered_map>

#include "runtime/op_adapters.h"
#include "runtime/op_lists.h"
#include "runtime/op_attrs.h"

namespace kiln {

std::string_view kind_name(OpKind k) {
  switch (k) {
  case OpKind::Elementwise: return "elementwise";
  case OpKind::Reduction: return "reduction";
  case OpKind::View: return "view";
  case OpKind::Contraction: return "contraction";
  case OpKind::Composite: return "composite";
  case OpKind::Opaque: return "opaque";
  case OpKind::Factory: return "factory";
  }
  return "?";
}

AttrValue::AttrValue(const Scalar &s) {
  if (s.is_floating_point()) v_ = s.toDouble();
  else if (s.is_bool()) v_ = s.to<bool>();
  else v_ = s.toLong();
}

namespace {
const char *type_name(const AttrValue::Variant &v) {
  static const char *names[] = {"none", "int", "float", "bool", "int list", "string", "dtype"};
  return names[v.index()];
}
template <class T> const T &get_as(const AttrValue::Variant &v, const char *want) {
  const T *p = std::get_if<T>(&v);
  KILN_CHECK(p, "attribute: expected ", want, ", got ", type_name(v));
  return *p;
}
} // namespace

int64_t AttrValue::as_int() const {
  if (auto *b = std::get_if<bool>(&v_)) return *b;
  return get_as<int64_t>(v_, "an int");
}
double AttrValue::as_float() const {
  if (auto *i = std::get_if<int64_t>(&v_)) return double(*i);
  return get_as<double>(v_, "a float");
}
bool AttrValue::as_bool() const { return get_as<bool>(v_, "a bool"); }
const std::vector<int64_t> &AttrValue::as_ints() const { return get_as<std::vector<int64_t>>(v_, "an int list"); }
const std::string &AttrValue::as_string() const { return get_as<std::string>(v_, "a string"); }
DType AttrValue::as_dtype() const { return get_as<DType>(v_, "a dtype"); }
Scalar AttrValue::as_scalar() const {
  if (auto *i = std::get_if<int64_t>(&v_)) return Scalar(*i);
  if (auto *b = std::get_if<bool>(&v_)) return Scalar(*b);
  return Scalar(get_as<double>(v_, "a number"));
}

// Every entry states the decisions its kind requires: a build error names the
// entry (the decisions themselves are checked against codegen by op_table_test).
namespace {
constexpr bool one_of(OpTrait set, OpTrait a, OpTrait b) { return has(set, a) != has(set, b); }
constexpr bool needs_cost(OpKind k) { return k == OpKind::Elementwise; }
constexpr bool needs_lowering_decision(OpKind k) { return k == OpKind::Elementwise || k == OpKind::Reduction; }
constexpr bool in_vecmath_list(OpId id) {
#define X(Id, fn, f64)                                                                                      \
  if (id == OpId::Id) return true;
  KILN_VECMATH_OPS(X)
#undef X
  return false;
}
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs)                                                \
  static_assert(!needs_cost(op_kind(OpId::Id)) || one_of(op_traits(OpId::Id), OpTrait::Cheap, OpTrait::Costly), \
                "ops.def: " #Id " is elementwise: state exactly one of Cheap, Costly");                       \
  static_assert(!needs_lowering_decision(op_kind(OpId::Id)) ||                                              \
                    one_of(op_traits(OpId::Id), OpTrait::Lowers, OpTrait::Eager),                            \
                "ops.def: " #Id " is elementwise or a reduction: state exactly one of Lowers, Eager");       \
  static_assert(!has_trait(OpId::Id, OpTrait::Transcendental) || has_trait(OpId::Id, OpTrait::Costly),       \
                "ops.def: " #Id " is Transcendental, hence Costly");                                          \
  static_assert(!has_trait(OpId::Id, OpTrait::Fuses) || needs_lowering_decision(op_kind(OpId::Id)),        \
                "ops.def: " #Id ": only elementwise ops and reductions fuse");                          \
  static_assert(!has_trait(OpId::Id, OpTrait::Fuses) || has_trait(OpId::Id, OpTrait::Lowers),             \
                "ops.def: " #Id ": Fuses needs Lowers (fuse asks codegen; an op it cannot lower stays out)");    \
  static_assert(!heads_epilogue(OpId::Id) || op_kind(OpId::Id) == OpKind::Contraction,                      \
                "ops.def: " #Id ": only a contraction heads an epilogue");                                    \
  static_assert(!writes_strided_batches(OpId::Id) || heads_epilogue(OpId::Id),                              \
                "ops.def: " #Id ": BatchStrided needs EpilogueHead (the epilogue step writes the strided result)"); \
  static_assert(!(is_transcendental(OpId::Id) && lowering_expected(OpId::Id)) || in_vecmath_list(OpId::Id),  \
                "ops.def: " #Id " is a lowered Transcendental: give it a line in the vector-math list (runtime/ops.def)");
#include "runtime/ops.def"
// ... and each line of the vector-math list is such an op. Each line's name is its op's
// mnemonic: runtime/ops.h declares kiln::fn from the line, the op reference looks it up by
// mnemonic, and the IR, the public function and the generated kernels share one name.
constexpr std::string_view kMnemonics[] = {
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs) mnemonic,
#include "runtime/ops.def"
};
constexpr bool named_as(OpId id, std::string_view fn) { return kMnemonics[size_t(id)] == fn; }
#define X(Id, fn, f64)                                                                                      \
  static_assert(is_transcendental(OpId::Id) && lowering_expected(OpId::Id) &&                              \
                    op_kind(OpId::Id) == OpKind::Elementwise,                                               \
                "the vector-math list: " #Id " must be an elementwise op with the traits Transcendental | Lowers in ops.def"); \
  static_assert(named_as(OpId::Id, #fn), "the vector-math list: " #fn " must be the mnemonic of " #Id);
KILN_VECMATH_OPS(X)
#undef X
// Each line of the composed-op list is a lowered pointwise unary op (Elementwise, or
// Composite when decompose rewrites it first) whose math is the line, not a kernel op.
#define X(Id, fn, def)                                                                                      \
  static_assert(has_trait(OpId::Id, OpTrait::Pointwise) && lowering_expected(OpId::Id) &&                  \
                    !is_transcendental(OpId::Id) && op_operands(OpId::Id).max == 1 &&                       \
                    (op_kind(OpId::Id) == OpKind::Elementwise || op_kind(OpId::Id) == OpKind::Composite),   \
                "the composed-op list: " #Id " must be a unary Pointwise | Lowers op, not Transcendental, in ops.def"); \
  static_assert(named_as(OpId::Id, #fn), "the composed-op list: " #fn " must be the mnemonic of " #Id);
KILN_COMPOSED_OPS(X)
#undef X
// Each line of the libm list is a lowered elementwise unary op whose kernel is a C
// library call (kiln_lm_<fn>_f32 / _f64), not a vector-math function.
#define X(Id, fn, def)                                                                                      \
  static_assert(has_trait(OpId::Id, OpTrait::Pointwise) && has_trait(OpId::Id, OpTrait::Costly) &&         \
                    lowering_expected(OpId::Id) && !is_transcendental(OpId::Id) &&                          \
                    op_operands(OpId::Id).max == 1 && op_kind(OpId::Id) == OpKind::Elementwise,             \
                "the libm list: " #Id " must be an elementwise unary Pointwise | Costly | Lowers op, not Transcendental, in ops.def"); \
  static_assert(named_as(OpId::Id, #fn), "the libm list: " #fn " must be the mnemonic of " #Id);
KILN_LIBM_OPS(X)
#undef X
// Each line of the binary libm list is a lowered elementwise binary op whose kernel is a
// C library call (kiln_lm2_<fn>_f32 / _f64).
#define X(Id, fn, def)                                                                                      \
  static_assert(has_trait(OpId::Id, OpTrait::Pointwise) && has_trait(OpId::Id, OpTrait::Costly) &&         \
                    lowering_expected(OpId::Id) && !is_transcendental(OpId::Id) &&                          \
                    op_operands(OpId::Id).min == 2 && op_operands(OpId::Id).max == 2 &&                     \
                    op_kind(OpId::Id) == OpKind::Elementwise,                                               \
                "the binary libm list: " #Id " must be an elementwise binary Pointwise | Costly | Lowers op in ops.def"); \
  static_assert(named_as(OpId::Id, #fn), "the binary libm list: " #fn " must be the mnemonic of " #Id);
KILN_LIBM2_OPS(X)
#undef X
} // namespace

namespace {
struct Table {
  std::vector<OpInfo> ops;
  std::unordered_map<std::string_view, const OpInfo *> by_name;
  Table() {
#define ATTR(Type, Name) #Name,
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs)                                                \
  ops.push_back(OpInfo{OpId::Id, mnemonic, OpKind::kind, {attrs}, {}, {}, {}, &adapters::Id});
#include "runtime/ops.def"
#undef ATTR
#define ATTR(Type, Name) attr_type::Type::spelling,
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs) ops[size_t(OpId::Id)].attr_types = {attrs};
#include "runtime/ops.def"
#undef ATTR
#define ATTR(Type, Name) attr_type::Type::accepts,
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs) ops[size_t(OpId::Id)].attr_accepts = {attrs};
#include "runtime/ops.def"
#undef ATTR
#define ATTR(Type, Name) attr_type::Type::what,
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs) ops[size_t(OpId::Id)].attr_what = {attrs};
#include "runtime/ops.def"
#undef ATTR
    for (const OpInfo &op : ops) by_name.emplace(op.mnemonic, &op);
  }
};
const Table &table() {
  static const Table t;
  return t;
}
} // namespace

const OpInfo &op_info(OpId id) { return table().ops.at(size_t(id)); }

const OpInfo *find_op(std::string_view mnemonic) {
  auto it = table().by_name.find(mnemonic);
  return it == table().by_name.end() ? nullptr : it->second;
}

std::vector<Tensor> run_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  const OpInfo &op = op_info(id);
  KILN_CHECK(attrs.size() == op.attr_names.size(), op.mnemonic, ": expected ", op.attr_names.size(),
             " attributes, got ", attrs.size());
  return op.run(inputs, attrs);
}

} // namespace kiln

namespace kiln::attrs::detail {
const Attrs &checked(const Attrs &a, OpId id, size_t count) {
  KILN_CHECK(a.size() == count, op_info(id).mnemonic, ": expected ", count, " attributes, got ", a.size());
  return a;
}
} // namespace kiln::attrs::detail
