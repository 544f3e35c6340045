// The op table (runtime/ops.def) as the one source of op facts:
// - every op's declared lowering decision (Lowers / Eager) is what codegen's
//   rule table has (a new op must say which, and say it truthfully);
// - attributes read by name through the generated accessors;
// - every Pointwise op that Lowers and Fuses, taken from the table alone (no
//   per-op code here), is traced, fused into a group, lowered to a JIT kernel,
//   and equal to eager, NaN and inf included. Adding an elementwise op per
//   docs/ops.md puts it in this sweep without touching this file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <kiln/kiln.h>

#include "codegen/interpret.h"
#include "codegen/jit.h"
#include "codegen/kernel.h"
#include "codegen/op_lowering.h"
#include "frontend/trace.h"
#include "ir/graph.h"
#include "runtime/op_attrs.h"
#include "runtime/op_registry.h"

using namespace kiln;

namespace {

std::string names(const std::vector<OpId> &ops) {
  std::string s;
  for (OpId id : ops) s += std::string(op_info(id).mnemonic) + " ";
  return s;
}

std::vector<OpId> all_ops() {
  std::vector<OpId> ops;
  for (int i = 0; i < kNumOps; ++i) ops.push_back(OpId(i));
  return ops;
}

} // namespace

TEST(OpTable, LoweringDecisionMatchesCodegen) {
  std::vector<OpId> claimed_without_rule, rule_without_claim;
  for (OpId id : all_ops()) {
    if (lowering_expected(id) && !codegen::has_lowering(id)) claimed_without_rule.push_back(id);
    if (!lowering_expected(id) && codegen::has_lowering(id)) rule_without_claim.push_back(id);
  }
  EXPECT_TRUE(claimed_without_rule.empty())
      << "ops.def says Lowers, codegen/op_lowering.cpp has no rule: " << names(claimed_without_rule);
  EXPECT_TRUE(rule_without_claim.empty())
      << "codegen/op_lowering.cpp has a rule, ops.def does not say Lowers: " << names(rule_without_claim);
}

// The decisions each kind requires (also static_asserts in op_registry.cpp;
// here with every offender named at once).
TEST(OpTable, EveryOpStatesTheDecisionsItsKindRequires) {
  std::vector<OpId> bad;
  for (OpId id : all_ops()) {
    OpKind k = op_kind(id);
    bool cost = has_trait(id, OpTrait::Cheap) != has_trait(id, OpTrait::Costly);
    bool lower = has_trait(id, OpTrait::Lowers) != has_trait(id, OpTrait::Eager);
    if (k == OpKind::Elementwise && !(cost && lower)) bad.push_back(id);
    if (k == OpKind::Reduction && !lower) bad.push_back(id);
    if (is_transcendental(id) && !has_trait(id, OpTrait::Costly)) bad.push_back(id);
    if (is_fusible(id) && k != OpKind::Elementwise && k != OpKind::Reduction) bad.push_back(id);
  }
  EXPECT_TRUE(bad.empty()) << "ops.def entries missing a required decision: " << names(bad);
}

TEST(OpTable, RegistryAgreesWithTheConstexprFacts) {
  for (OpId id : all_ops()) {
    const OpInfo &info = op_info(id);
    SCOPED_TRACE(std::string(info.mnemonic));
    EXPECT_EQ(info.id, id);
    EXPECT_EQ(info.kind, op_kind(id));
    EXPECT_EQ(info.attr_names.size(), info.attr_types.size());
    EXPECT_EQ(find_op(info.mnemonic), &info);
    EXPECT_LE(op_operands(id).min, op_operands(id).max);
  }
}

// The vector-math list (runtime/ops.def) and the op table agree:
// each list entry is the kernel op of the ops.def entry of the same name, which is
// Transcendental and Lowers; every Transcendental kernel op comes from the list.
TEST(OpTable, VecmathListIsTheTranscendentalOps) {
  std::vector<codegen::KOp> listed;
  std::vector<OpId> listed_ops;
#define X(Id, fn, f64)                                                                                     \
  listed.push_back(codegen::KOp::Id);                                                                      \
  listed_ops.push_back(OpId::Id);                                                                          \
  EXPECT_EQ(op_info(OpId::Id).mnemonic, #fn);                                                              \
  EXPECT_TRUE(is_transcendental(OpId::Id) && lowering_expected(OpId::Id)) << #Id;                          \
  EXPECT_EQ(codegen::op_arity(codegen::KOp::Id), 1) << #Id;
  KILN_VECMATH_OPS(X)
#undef X
  // The libm list's kernel ops are compute-bound like them (is_transcendental) but calls (is_libm).
  std::vector<codegen::KOp> libm;
#define X(Id, fn, def)                                                                                     \
  libm.push_back(codegen::KOp::Id);                                                                        \
  EXPECT_EQ(op_info(OpId::Id).mnemonic, #fn);                                                              \
  EXPECT_TRUE(!is_transcendental(OpId::Id) && lowering_expected(OpId::Id)) << #Id;                         \
  EXPECT_EQ(codegen::op_arity(codegen::KOp::Id), 1) << #Id;
  KILN_LIBM_OPS(X)
#undef X
  // So are the binary libm list's, with two operands.
#define X(Id, fn, def)                                                                                     \
  libm.push_back(codegen::KOp::Id);                                                                        \
  EXPECT_EQ(op_info(OpId::Id).mnemonic, #fn);                                                              \
  EXPECT_TRUE(!is_transcendental(OpId::Id) && lowering_expected(OpId::Id)) << #Id;                         \
  EXPECT_EQ(op_operands(OpId::Id).max, 2u) << #Id;                                                         \
  EXPECT_EQ(codegen::op_arity(codegen::KOp::Id), 2) << #Id;
  KILN_LIBM2_OPS(X)
#undef X
  for (size_t i = 0; i < codegen::kNumKOps; ++i) {
    auto op = codegen::KOp(i);
    bool in_list = std::find(listed.begin(), listed.end(), op) != listed.end();
    bool in_libm = std::find(libm.begin(), libm.end(), op) != libm.end();
    EXPECT_EQ(codegen::is_transcendental(op), in_list || in_libm) << codegen::op_name(op);
    EXPECT_EQ(codegen::is_libm(op), in_libm) << codegen::op_name(op);
  }
  for (OpId id : all_ops()) {
    if (!is_transcendental(id) || !lowering_expected(id)) continue;
    EXPECT_NE(std::find(listed_ops.begin(), listed_ops.end(), id), listed_ops.end())
        << op_info(id).mnemonic << " is a lowered transcendental missing from the vector-math list";
  }
}

namespace {

// One kernel of a single `op` node over float32 inputs in [0.05, 2.5] (int32 for the
// bitwise ops, a bool condition for Select, a row sum for Reduce).
codegen::KernelDesc one_op_kernel(codegen::KOp op) {
  using namespace codegen;
  const std::string name = op_name(op);
  const bool bits = op == KOp::Not || op == KOp::And || op == KOp::Or || op == KOp::Xor;
  KernelBuilder k({3, 37});
  const DType t = bits ? DType::Int32 : DType::Float32;
  Expr a = k.input(t), b = k.input(t), c = k.input(t);
  if (op == KOp::Reduce) {
    k.output_per_row(reduce_sum(a));
    return k.build();
  }
  if (op == KOp::Select) {
    k.output(k.select(k.binary(KOp::Lt, a, b), b, c));
    return k.build();
  }
  if (op == KOp::Cast) {
    k.output(k.cast(a, DType::Float64));
    return k.build();
  }
  if (op == KOp::Const) {
    k.output(a + k.constant(0.5, t));
    return k.build();
  }
  switch (op == KOp::Load ? 1 : op_arity(op)) {
  case 1: k.output(op == KOp::Load ? a : k.unary(op, a)); break;
  case 2: k.output(k.binary(op, a, b)); break;
  default: k.output(k.fma(a, b, c)); break;
  }
  return k.build();
}

} // namespace

// Every kernel op (the core list and each vector-math entry) has a JIT lowering
// and an interpreter case, and the two agree: a new KOp without either fails here
// (by name), not inside some fused kernel later.
TEST(OpTable, EveryKernelOpLowersAndInterprets) {
  using namespace codegen;
  for (size_t i = 0; i < kNumKOps; ++i) {
    const KOp op = KOp(i);
    SCOPED_TRACE(op_name(op));
    KernelDesc d = one_op_kernel(op);
    const int64_t n = d.numel();
    std::vector<std::vector<char>> in(3, std::vector<char>(size_t(n) * 4));
    for (int j = 0; j < 3; ++j)
      for (int64_t e = 0; e < n; ++e) {
        if (d.inputs[0].dtype == DType::Int32) reinterpret_cast<int32_t *>(in[j].data())[e] = int32_t(e * 7 + j * 3 - 50);
        else reinterpret_cast<float *>(in[j].data())[e] = 0.05f + 2.45f * float((e * 13 + j * 5) % 97) / 96.0f;
      }
    const size_t out_bytes = size_t(n) * 8;
    std::vector<char> jit_out(out_bytes, 0), ref_out(out_bytes, 0);
    void *jit_buf[] = {in[0].data(), in[1].data(), in[2].data(), jit_out.data()};
    void *ref_buf[] = {in[0].data(), in[1].data(), in[2].data(), ref_out.data()};
    std::shared_ptr<const CompiledKernel> kernel;
    try {
      kernel = Jit::global().compile(d);
    } catch (const Error &e) {
      ADD_FAILURE() << "no JIT lowering: " << e.what();
      continue;
    }
    kernel->run(jit_buf);
    try {
      interpret(d, ref_buf);
    } catch (const Error &e) {
      ADD_FAILURE() << "no interpreter case: " << e.what();
      continue;
    }
    const DType ot = d.outputs[0].buffer.dtype;
    const int64_t count = op == KOp::Reduce ? 3 : n;
    for (int64_t e = 0; e < count; ++e) {
      double x = 0, y = 0;
      switch (ot) {
      case DType::Float32: x = reinterpret_cast<float *>(jit_out.data())[e], y = reinterpret_cast<float *>(ref_out.data())[e]; break;
      case DType::Float64: x = reinterpret_cast<double *>(jit_out.data())[e], y = reinterpret_cast<double *>(ref_out.data())[e]; break;
      case DType::Int32: x = reinterpret_cast<int32_t *>(jit_out.data())[e], y = reinterpret_cast<int32_t *>(ref_out.data())[e]; break;
      case DType::Bool: x = jit_out[size_t(e)], y = ref_out[size_t(e)]; break;
      case DType::Int64: x = double(reinterpret_cast<int64_t *>(jit_out.data())[e]), y = double(reinterpret_cast<int64_t *>(ref_out.data())[e]); break;
      case DType::UInt8:
      case DType::Int8:
      case DType::Int16:
      case DType::Float16:
      case DType::BFloat16: FAIL() << "codegen lowers no kernel of dtype " << ot;
      }
      if (std::isnan(x) && std::isnan(y)) continue; // asin(2), acosh(0.5): both NaN
      ASSERT_NEAR(x, y, 1e-5 * std::max(1.0, std::fabs(y))) << "element " << e;
    }
  }
}

TEST(OpAttrs, ReadByName) {
  Attrs bn = {true, 0.25, 1e-3};
  EXPECT_EQ(attrs::BatchNorm{bn}.training(), true);
  EXPECT_EQ(attrs::BatchNorm{bn}.momentum(), 0.25);
  EXPECT_EQ(attrs::BatchNorm{bn}.eps(), 1e-3);
  Attrs sum = {std::vector<int64_t>{1, 2}, false, AttrValue()};
  EXPECT_EQ(attrs::Sum{sum}.dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(attrs::Sum{sum}.dtype().has_value());
  Attrs div = {std::string("floor")};
  EXPECT_EQ(attrs::Div{div}.rounding_mode(), std::optional<std::string>("floor"));
  // Names agree with the registry's (the parser and printer use those).
  EXPECT_EQ(op_info(OpId::BatchNorm).attr_names, (std::vector<std::string_view>{"training", "momentum", "eps"}));
  EXPECT_EQ(op_info(OpId::BatchNorm).attr_types, (std::vector<std::string_view>{"bool", "float", "float"}));
}

// Built by name, read by name: the builders (attrs::BatchNormArgs, KILN_TRACE's
// designated initializers) and the accessors agree, whatever the order in ops.def.
TEST(OpAttrs, BuiltByNameReadByName) {
  Attrs bn = attrs::BatchNormArgs{.training = true, .momentum = 0.25, .eps = 1e-3}.to_attrs();
  EXPECT_EQ(attrs::BatchNorm{bn}.training(), true);
  EXPECT_EQ(attrs::BatchNorm{bn}.momentum(), 0.25);
  EXPECT_EQ(attrs::BatchNorm{bn}.eps(), 1e-3);
  Attrs sl = attrs::Args<OpId::Slice>{.dim = 1, .start = std::nullopt, .end = 7, .step = 2}.to_attrs();
  attrs::Slice s{sl};
  EXPECT_EQ(s.dim(), 1);
  EXPECT_FALSE(s.start().has_value());
  EXPECT_EQ(s.end(), std::optional<int64_t>(7));
  EXPECT_EQ(s.step(), 2);
  Attrs none = attrs::ReluArgs{}.to_attrs();
  EXPECT_TRUE(none.empty());
}

// Every op's generated position of each attribute is its position in the
// registry (parser, printer), and its type's parser check is what its accessor
// reads: the three views of ops.def's ATTR columns agree, for every op.
TEST(OpAttrs, PositionsAndTypesAgreeWithTheRegistryForEveryOp) {
  size_t checked = 0;
#define ATTR(Type, Name)                                                                                   \
  EXPECT_EQ(info.attr_names.at(Index::Name##_), #Name) << info.mnemonic;                                   \
  EXPECT_EQ(info.attr_types.at(Index::Name##_), attr_type::Type::spelling) << info.mnemonic;               \
  EXPECT_EQ(info.attr_accepts.at(Index::Name##_), attr_type::Type::accepts) << info.mnemonic;              \
  ++checked;
#define KILN_OP(Id, mnemonic, kind, operands, traits, attr_list)                                               \
  {                                                                                                        \
    using Index = attrs::detail::Id##Index;                                                                \
    const OpInfo &info = op_info(OpId::Id);                                                                \
    EXPECT_EQ(info.attr_names.size(), size_t(Index::kCount));                                              \
    attr_list                                                                                              \
  }
#include "runtime/ops.def"
#undef ATTR
  EXPECT_GT(checked, 50u);
  // accepts is a mask over AttrValue's alternatives, in variant order.
  EXPECT_EQ(1u << AttrValue(int64_t(3)).variant().index(), attr_kind::Int);
  EXPECT_EQ(1u << AttrValue(2.5).variant().index(), attr_kind::Float);
  EXPECT_EQ(1u << AttrValue(true).variant().index(), attr_kind::Bool);
  EXPECT_EQ(1u << AttrValue().variant().index(), attr_kind::None);
  EXPECT_EQ(1u << AttrValue(std::vector<int64_t>{1}).variant().index(), attr_kind::Ints);
  EXPECT_EQ(1u << AttrValue("s").variant().index(), attr_kind::String);
  EXPECT_EQ(1u << AttrValue(kFloat32).variant().index(), attr_kind::DType);
}

TEST(OpAttrs, WrongCountOrTypeIsAnErrorNamingTheOp) {
  Attrs two = {true, 0.25};
  try {
    (void)attrs::BatchNorm{two}.eps();
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("batch_norm: expected 3 attributes, got 2"), std::string::npos) << e.what();
  }
  Attrs wrong = {std::string("x"), 0.25, 1e-3};
  EXPECT_THROW((void)attrs::BatchNorm{wrong}.training(), Error);
}

// ---- the pointwise sweep

namespace {

// A sample value per attribute type, by name where one type has several uses.
AttrValue sample_attr(std::string_view type, std::string_view name) {
  if (name == "min") return -0.5;
  if (name == "max") return 0.5;
  if (type == "Scalar") return 1.5;
  if (type == "ScalarType") return kFloat64;
  if (type == "str") return "none";
  if (type == "bool") return false;
  if (type == "int") return int64_t(0);
  return AttrValue(); // optionals: none
}

Attrs sample_attrs(OpId id) {
  const OpInfo &info = op_info(id);
  Attrs a;
  for (size_t i = 0; i < info.attr_names.size(); ++i) a.push_back(sample_attr(info.attr_types[i], info.attr_names[i]));
  return a;
}

// [3, 37] float32: ordinary values and the special ones (NaN, +-inf, +-0, huge, tiny).
Tensor float_operand(int seed) {
  manual_seed(uint64_t(100 + seed));
  Tensor t = randn({3, 37}) * 3.0;
  const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 1e-30f, 88.5f, -104.0f, 0.5f, 2.0f};
  float *p = t.data_ptr<float>();
  for (size_t i = 0; i < std::size(special); ++i) p[(size_t(seed) * 5 + i * 3) % 111] = special[i];
  return t;
}

Tensor bool_operand(int seed) { return gt(float_operand(seed), 0.0); }

struct Variant {
  std::vector<Tensor> inputs;    // graph inputs
  std::vector<Tensor> constants; // trailing operands as wrapped-number constants
};

// Operand sets to try, in order: all float; one operand bool (where's
// condition, masked_fill's mask); trailing operands as scalar constants
// (pow's exponent).
std::vector<Variant> variants(OpId id) {
  size_t n = op_operands(id).min;
  std::vector<Variant> out;
  Variant all;
  for (size_t i = 0; i < n; ++i) all.inputs.push_back(float_operand(int(i)));
  out.push_back(all);
  for (size_t b = 0; b < n; ++b) {
    Variant v = all;
    v.inputs[b] = bool_operand(int(b));
    out.push_back(v);
  }
  if (n >= 2) {
    Variant v;
    v.inputs.push_back(float_operand(0));
    for (size_t i = 1; i < n; ++i) v.constants.push_back(detail::wrap_scalar(Scalar(2.0)));
    out.push_back(v);
  }
  return out;
}

ModelFn op_fn(OpId id, const Attrs &a, const std::vector<Tensor> &constants) {
  return [id, a, constants](const std::vector<Tensor> &in) {
    std::vector<Tensor> operands = in;
    operands.insert(operands.end(), constants.begin(), constants.end());
    return run_op(id, operands, a);
  };
}

bool node_in(const ir::Graph &g, OpId id, bool in_group) {
  for (const ir::Node *n : g.nodes()) {
    if (n->kind() == ir::Node::Kind::FusionGroup && node_in(*n->body(), id, false)) return true;
    if (!in_group && n->kind() == ir::Node::Kind::Op && n->op() == id) return true;
  }
  return false;
}

// Eager's values within rtol 1e-4, atol 1e-6; NaN where eager has NaN, the same inf.
std::string mismatch(const Tensor &got, const Tensor &want) {
  if (got.sizes().vec() != want.sizes().vec() || got.dtype() != want.dtype()) return "shape or dtype differs";
  Tensor g = got.to(kFloat64).contiguous(), w = want.to(kFloat64).contiguous();
  const double *gp = g.data_ptr<double>(), *wp = w.data_ptr<double>();
  for (int64_t i = 0; i < g.numel(); ++i) {
    double a = gp[i], b = wp[i];
    bool same = std::isnan(b) ? std::isnan(a) : std::isinf(b) ? a == b : std::fabs(a - b) <= 1e-6 + 1e-4 * std::fabs(b);
    if (!same) return "element " + std::to_string(i) + ": compiled " + std::to_string(a) + ", eager " + std::to_string(b);
  }
  return "";
}

// Why op `id` with variant v is not traced, fused, lowered and equal to eager; "" when it is.
std::string check_variant(OpId id, const Variant &v) {
  Attrs a = sample_attrs(id);
  ModelFn fn = op_fn(id, a, v.constants);
  std::vector<Tensor> want;
  try {
    want = fn(v.inputs);
  } catch (const Error &e) {
    return std::string("eager refuses these operands: ") + e.what();
  }
  std::unique_ptr<ir::Graph> traced = trace(fn, v.inputs);
  if (!node_in(*traced, id, false)) return "not traced";
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  std::vector<Tensor> got = f(v.inputs);
  if (f.stats().eager_calls != 0) return "ran eagerly: " + f.stats().last_fallback_reason;
  std::shared_ptr<const ir::Graph> g = f.graph_for(v.inputs);
  if (!g || !node_in(*g, id, true)) return "not in a fusion group";
  if (f.kernels_per_call(v.inputs) != 1) return "not lowered to a JIT kernel (its group is interpreted)";
  if (got.size() != want.size()) return "result count differs";
  for (size_t i = 0; i < got.size(); ++i)
    if (std::string m = mismatch(got[i], want[i]); !m.empty()) return "result " + std::to_string(i) + ": " + m;
  return "";
}

} // namespace

TEST(PointwiseSweep, EveryLoweredPointwiseOpIsTracedFusedLoweredAndEqualToEager) {
  int checked = 0;
  for (OpId id : all_ops()) {
    if (!has_trait(id, OpTrait::Pointwise) || !lowering_expected(id) || !is_fusible(id)) continue;
    SCOPED_TRACE(std::string(op_info(id).mnemonic));
    std::string why;
    for (const Variant &v : variants(id)) {
      std::string w = check_variant(id, v);
      if (w.empty()) {
        why.clear();
        break;
      }
      why += (why.empty() ? "" : "; ") + w;
    }
    EXPECT_TRUE(why.empty()) << op_info(id).mnemonic << ": " << why;
    ++checked;
  }
  EXPECT_GE(checked, 40); // the table's elementwise ops, not an empty sweep
}

namespace {

// Operands and attributes for each op with the EpilogueHead trait.
std::optional<std::pair<std::vector<Tensor>, Attrs>> contraction_sample(OpId id) {
  manual_seed(7);
  switch (id) {
  case OpId::Mm:
  case OpId::Matmul: return std::pair{std::vector<Tensor>{randn({8, 16}), randn({16, 12})}, Attrs{}};
  case OpId::Bmm: return std::pair{std::vector<Tensor>{randn({2, 8, 16}), randn({2, 16, 12})}, Attrs{}};
  case OpId::Conv2d:
    return std::pair{std::vector<Tensor>{randn({1, 3, 8, 8}), randn({4, 3, 3, 3})},
                     attrs::Conv2dArgs{.stride = std::vector<int64_t>{1, 1}, .padding = std::vector<int64_t>{1, 1},
                                       .dilation = std::vector<int64_t>{1, 1}, .groups = 1}
                         .to_attrs()};
  case OpId::Addmm:
    return std::pair{std::vector<Tensor>{randn({12}), randn({8, 16}), randn({16, 12})},
                     attrs::AddmmArgs{.beta = 1, .alpha = 1}.to_attrs()};
  default: return std::nullopt;
  }
}

} // namespace

// The EpilogueHead trait is what fuse asks (passes/fuse.cpp): each op that has it
// heads a fusion group with the relu after it (codegen/epilogue.cpp runs it) and
// equals eager; a contraction without it (addmm) stays outside any group.
TEST(OpTable, EpilogueHeadsAreTheContractionsThatHeadGroups) {
  int heads = 0;
  for (OpId id : all_ops()) {
    if (op_kind(id) != OpKind::Contraction) continue;
    SCOPED_TRACE(std::string(op_info(id).mnemonic));
    auto sample = contraction_sample(id);
    if (!sample) {
      EXPECT_FALSE(heads_epilogue(id)) << "an EpilogueHead without a sample here: add one";
      continue;
    }
    const Attrs a = sample->second;
    ModelFn fn = [id, a](const std::vector<Tensor> &in) {
      std::vector<Tensor> operands = in;
      operands.resize(op_operands(id).max); // absent optional operands (conv2d's bias)
      return std::vector<Tensor>{relu(run_op(id, operands, a).at(0))};
    };
    CompiledFunction f = compile(fn);
    std::vector<Tensor> got = f(sample->first);
    std::shared_ptr<const ir::Graph> g = f.graph_for(sample->first);
    ASSERT_TRUE(g);
    EXPECT_EQ(node_in(*g, id, true), heads_epilogue(id)) << (heads_epilogue(id) ? "not heading a group" : "in a group");
    EXPECT_EQ(mismatch(got.at(0), fn(sample->first).at(0)), "");
    heads += heads_epilogue(id);
  }
  EXPECT_EQ(heads, 4); // mm, bmm, matmul, conv2d
}

namespace {

// The contraction node of `id` (inside a group or not), or null.
const ir::Node *find_op(const ir::Graph &g, OpId id) {
  for (const ir::Node *n : g.nodes()) {
    if (n->kind() == ir::Node::Kind::FusionGroup)
      if (const ir::Node *in = find_op(*n->body(), id)) return in;
    if (n->kind() == ir::Node::Kind::Op && n->op() == id) return n;
  }
  return nullptr;
}

} // namespace

// The BatchStrided trait is what the layout pass asks (passes/layout.cpp): a
// batched contraction followed by the head merge (transpose of a batch dim and
// the row dim's neighbour, then reshape) is written in the merged layout, so the
// reshape is a view; the other contractions keep their contiguous result. Each
// equals eager either way.
TEST(OpTable, BatchStridedContractionsTakeTheMergedLayout) {
  manual_seed(3);
  int strided = 0;
  for (OpId id : all_ops()) {
    if (op_kind(id) != OpKind::Contraction || !heads_epilogue(id) || id == OpId::Conv2d) continue;
    SCOPED_TRACE(std::string(op_info(id).mnemonic));
    // [2, 3, 8, 4] (matmul) or [6, 8, 4] (bmm, mm on its 2-D sample): transpose(-3, -2), merge the last two.
    const bool batched = id != OpId::Mm;
    std::vector<Tensor> in = id == OpId::Matmul ? std::vector<Tensor>{randn({2, 3, 8, 16}), randn({2, 3, 16, 4})}
                             : batched          ? std::vector<Tensor>{randn({6, 8, 16}), randn({6, 16, 4})}
                                                : std::vector<Tensor>{randn({8, 16}), randn({16, 4})};
    ModelFn fn = [id](const std::vector<Tensor> &x) {
      Tensor y = run_op(id, x, Attrs{}).at(0);
      Tensor t = y.dim() == 2 ? y.transpose(0, 1) : y.transpose(-3, -2);
      std::vector<int64_t> merged(t.sizes().begin(), t.sizes().end() - 2);
      merged.push_back(t.size(-2) * t.size(-1));
      return std::vector<Tensor>{t.reshape(merged).relu()};
    };
    CompiledFunction f = compile(fn);
    std::vector<Tensor> got = f(in);
    std::shared_ptr<const ir::Graph> g = f.graph_for(in);
    ASSERT_TRUE(g);
    const ir::Node *n = find_op(*g, id);
    ASSERT_TRUE(n) << "the contraction is gone";
    EXPECT_EQ(n->result()->type().strides.has_value(), writes_strided_batches(id)) << n->result()->type().str();
    EXPECT_EQ(mismatch(got.at(0), fn(in).at(0)), "");
    strided += writes_strided_batches(id);
  }
  EXPECT_EQ(strided, 2); // bmm, matmul
}
