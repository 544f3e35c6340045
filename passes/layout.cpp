// layout: chooses the output layout of contractions so that the views after
// them cost no copy.
//
// W5's head merge is `y = matmul(p, v) : [B, H, T, D]; transpose(y, 1, 2) :
// [B, T, H, D]; reshape [B, T, H*D]`. With y contiguous the transpose is a
// strided view and the reshape of it has to copy. If y is instead written with
// the strides of the contiguous [B, T, H, D] buffer, permuted back
// ({T*H*D, D, H*D, 1}), the transpose is contiguous and the reshape is a view:
// the batched GEMM writes each head's [T, D] block with ldc = H*D straight into
// the merged layout. The decision is recorded as explicit strides on the
// contraction's result type (printed `f32[1, 12, 128, 64]{98304, 64, 768, 1}`);
// fuse then gives that contraction a group, and the epilogue executor
// (codegen/epilogue.cpp) allocates its output with these strides.
//
// Head split (view + transpose of a slice of the qkv projection) and k^T need
// no decision: they are strided operands that reach BLAS as leading dimensions
// and transpose flags (runtime/kernels/linalg.cpp, blas_layout).
//
// Refused (logged at debug): graph outputs (they keep the user's layout),
// results with other uses, transposes that would move the last dim (GEMM rows
// must stay contiguous), and chains where the reshape would not copy anyway.
//
// Conv chains (W7): conv2d -> elementwise ops (bn, relu) -> conv2d ... may run
// channels-last inside the graph: each conv but the last, and the values from
// it to the next conv, get channels-last strides (the NHWC conv in
// runtime/kernels/conv.cpp, epilogue tiles [pixels, channels] in
// codegen/epilogue.cpp); the first conv converts the chain's input once; the
// last conv reads channels-last and writes NCHW, so graph inputs and outputs
// keep the user's layout. Whether a chain does is decided by a measured cost
// model (chain_cost), logged at debug either way; at W7's size the answer is
// NCHW; and a chain stays NCHW when codegen's compiled conv takes one of its
// convs in NCHW only (passes/lowering_check.h, conv_layout_misfit).
// `layout-channels-last` forces it for tests and benchmarks.
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "ir/graph.h"
#include "passes/lowering_check.h"
#include "passes/pass_manager.h"
#include "passes/rewrite.h"
#include "runtime/log.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Value;

// A contraction whose result may take permuted batch strides (the BatchStrided
// trait of ops.def: matmul, bmm).
bool is_batched_gemm(const Node &n) { return n.kind() == Node::Kind::Op && writes_strided_batches(n.op()); }

Dims contiguous(IntArrayRef shape) {
  Dims s;
  s.resize(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * std::max<int64_t>(shape[d], 1);
  return s;
}

// The single node reading `v`, or nullptr (several uses, or a graph output).
Node *only_user(const Graph &g, const Value *v) {
  std::vector<ir::Use> uses = g.uses(v);
  if (uses.size() != 1 || !uses[0].user) return nullptr;
  return uses[0].user;
}

bool is_output(const Graph &g, const Value *v) {
  for (const Value *o : g.outputs())
    if (o == v) return true;
  for (const ir::WriteBack &w : g.write_backs())
    if (w.value == v) return true;
  return false;
}

void refuse(const Node &n, const std::string &why) {
  log()->debug("layout: keeping %{} ({}) contiguous: {}", n.result()->name(), n.mnemonic(), why);
}

// Strides for the matmul result that make transpose(dim0, dim1) of it
// contiguous, or nothing (with the reason logged).
std::optional<Dims> merged_strides(const Graph &g, const Node &mm) {
  const Value *y = mm.result();
  if (y->type().strides) return std::nullopt; // decided already
  if (is_output(g, y)) return refuse(mm, "a graph output keeps the user's layout"), std::nullopt;
  Node *t = only_user(g, y);
  if (!t || t->kind() != Node::Kind::Op || t->op() != OpId::Transpose) return std::nullopt; // not a candidate
  Node *r = only_user(g, t->result());
  if (!r || r->kind() != Node::Kind::Op || (r->op() != OpId::Reshape && r->op() != OpId::View))
    return refuse(mm, "its transpose is not reshaped"), std::nullopt;
  const Dims &shape = y->type().shape;
  int64_t rank = int64_t(shape.size());
  auto dim = [&](const char *name) {
    int64_t d = t->attr(name)->as_int();
    return d < 0 ? d + rank : d;
  };
  int64_t a = dim("dim0"), b = dim("dim1");
  if (a == b) return refuse(mm, "the transpose is the identity"), std::nullopt;
  if (a == rank - 1 || b == rank - 1) return refuse(mm, "the transpose moves the row dim (GEMM rows must stay contiguous)"), std::nullopt;
  Dims ts = shape;
  std::swap(ts[size_t(a)], ts[size_t(b)]);
  Dims st = contiguous(ts);
  std::swap(st[size_t(a)], st[size_t(b)]);
  Dims plain = contiguous(shape);
  bool same = true;
  for (size_t d = 0; d < shape.size(); ++d) same &= shape[d] == 1 || st[d] == plain[d];
  if (same) return refuse(mm, "its transpose is contiguous already"), std::nullopt;
  return st;
}

// ---- conv chains: channels-last inside the graph

bool is_conv4d(const Node &n) {
  if (n.kind() != Node::Kind::Op || n.op() != OpId::Conv2d || n.results().size() != 1) return false;
  const ir::TensorType &t = n.result()->type();
  return n.operand(0)->type().shape.size() == 4 && t.shape.size() == 4 && !t.strides &&
         (t.dtype == kFloat32 || t.dtype == kFloat64);
}

// A conv, the values from its result to the next conv's input (its result and
// the single-use elementwise ops after it), and that next conv.
struct ChainLink {
  Node *conv = nullptr;
  std::vector<Value *> path; // path[0] is conv's result; the last one is next's input
  Node *next = nullptr;
};

// The link from `conv` to a conv reading its (elementwise-transformed) result, if any.
ChainLink follow(const Graph &g, Node &conv) {
  ChainLink link{&conv, {conv.result()}, nullptr};
  for (;;) {
    Value *v = link.path.back();
    if (is_output(g, v)) return link;
    Node *u = only_user(g, v);
    if (!u) return link;
    if (is_conv4d(*u) && u->operand(0) == v) {
      link.next = u;
      return link;
    }
    if (u->kind() != Node::Kind::Op || u->info().kind != OpKind::Elementwise || u->results().size() != 1 ||
        !(IntArrayRef(u->result()->type().shape) == IntArrayRef(v->type().shape)))
      return link;
    link.path.push_back(u->result());
  }
}

// The cost model, measured with build/bench/kiln_bench_conv_layout on this
// 2-core machine at W7's shapes (3x3 conv 64 -> 64, pad 1, on [8, 64, 56, 56]:
// 924.8 M multiply-adds; x has 1.61 M elements). The machine was shared and
// loaded, so these are one-thread CPU times (all of the work; medians of 7,
// interleaved):
//   Conv_NCHWBlocked                22.97 ms  NCHW, row blocks (what the conv epilogue runs)
//   Conv_ChannelsLast               21.64 ms  channels-last in and out
//   Conv_ChannelsLastIntoNCHW       23.09 ms  channels-last in, NCHW out (a chain's last conv)
//   ToChannelsLast                   1.97 ms  the chain input's conversion
//   W7Compiled/NCHW                 47.98 ms  the whole block, compiled, convs NCHW
//   W7Compiled/ChannelsLast         48.81 ms  the same with layout-channels-last
// The GEMM is most of a conv either way; channels-last saves only the
// per-element im2col gathers, 6% of the conv, and the last conv gives that
// back by reading its im2col transposed.
constexpr double kNsPerMacNchw = 22.97e6 / 924.8e6;               // 0.0248
constexpr double kNsPerMacChannelsLast = 21.64e6 / 924.8e6;       // 0.0234
constexpr double kNsPerMacChannelsLastToNchw = 23.09e6 / 924.8e6; // 0.0250
constexpr double kNsPerConvertedElement = 1.97e6 / 1.606e6;       // 1.23

struct ChainCost {
  double nchw_us = 0, channels_last_us = 0;
};

int64_t numel_of(const Value &v) {
  int64_t n = 1;
  for (int64_t s : v.type().shape) n *= s;
  return n;
}

// Multiply-adds of a conv: output elements x (C/groups * kH * kW).
double macs(const Node &conv) {
  const Dims &w = conv.operand(1)->type().shape;
  return double(numel_of(*conv.result())) * double(w.size() == 4 ? w[1] * w[2] * w[3] : 0);
}

// The rule: channels-last when, at the measured cost per multiply-add of each
// conv kind, the chain is cheaper that way including the one conversion of the
// chain's input to channels-last. Every conv but the last writes
// channels-last; the last reads channels-last and writes NCHW for its epilogue
// and the user, so there is no output conversion. W7 (2 convs): NCHW 45.9 ms
// vs channels-last 46.7 ms, so NCHW; 3 such convs: 68.9 vs 68.3 ms.
ChainCost chain_cost(const std::vector<Node *> &convs) {
  ChainCost c;
  for (size_t i = 0; i < convs.size(); ++i) {
    const double m = macs(*convs[i]);
    c.nchw_us += m * kNsPerMacNchw / 1e3;
    c.channels_last_us += m * (i + 1 < convs.size() ? kNsPerMacChannelsLast : kNsPerMacChannelsLastToNchw) / 1e3;
  }
  c.channels_last_us += double(numel_of(*convs.front()->operand(0))) * kNsPerConvertedElement / 1e3;
  return c;
}

void set_channels_last(Value &v) {
  ir::TensorType t = v.type();
  t.strides = kiln::detail::channels_last_strides(t.shape);
  v.set_type(std::move(t));
}

// Decides one chain (convs[i]'s result reaches convs[i + 1] through links[i].path).
// `force`: channels-last whatever the estimate (the layout-channels-last pass).
bool decide_conv_chain(const std::vector<Node *> &convs, const std::vector<ChainLink> &links, bool force) {
  const ChainCost c = chain_cost(convs);
  std::string names;
  for (const Node *n : convs) names += (names.empty() ? "%" : " -> %") + n->result()->name();
  if (!force && c.channels_last_us >= c.nchw_us) {
    log()->debug("layout: conv chain {} stays NCHW: channels-last estimated {:.1f} ms (conversions included) vs "
                 "NCHW {:.1f} ms",
                 names, c.channels_last_us / 1e3, c.nchw_us / 1e3);
    return false;
  }
  // The cost model measured eager's convs; a conv that kiln's compiled conv
  // runs NCHW only would leave it for eager's kernel (~2x slower) channels-last.
  for (const Node *n : convs) {
    const std::string why = force ? std::string() : conv_layout_misfit(*n);
    if (why.empty()) continue;
    log()->debug("layout: conv chain {} stays NCHW: %{}: {}", names, n->result()->name(), why);
    return false;
  }
  for (const ChainLink &l : links)
    for (Value *v : l.path) set_channels_last(*v);
  log()->debug("layout: conv chain {} runs channels-last{}: estimated {:.1f} ms (conversions included) vs NCHW "
               "{:.1f} ms",
               names, force ? " (forced)" : "", c.channels_last_us / 1e3, c.nchw_us / 1e3);
  return true;
}

// Chains of >= 2 convs, each decided once.
bool layout_conv_chains(Graph &g, bool force) {
  std::vector<ChainLink> links;
  std::vector<Node *> heads;
  for (Node *n : g.nodes())
    if (is_conv4d(*n)) links.push_back(follow(g, *n));
  auto link_of = [&](const Node *n) -> const ChainLink * {
    for (const ChainLink &l : links)
      if (l.conv == n) return &l;
    return nullptr;
  };
  auto is_next = [&](const Node *n) {
    for (const ChainLink &l : links)
      if (l.next == n) return true;
    return false;
  };
  bool changed = false;
  for (const ChainLink &head : links) {
    if (is_next(head.conv) || !head.next) continue;
    std::vector<Node *> convs{head.conv};
    std::vector<ChainLink> chain;
    for (const ChainLink *l = &head; l && l->next; l = link_of(l->next)) {
      chain.push_back(*l);
      convs.push_back(l->next);
    }
    if (is_output(g, convs.back()->result())) {
      log()->debug("layout: conv chain ending at %{} stays NCHW: its last conv's result is a graph output",
                   convs.back()->result()->name());
      continue;
    }
    changed |= decide_conv_chain(convs, chain, force);
  }
  return changed;
}

// `layout-channels-last` is `layout` with every conv chain forced to
// channels-last: the other side of the measured decision, for tests and benches.
class LayoutPass : public Pass {
public:
  explicit LayoutPass(bool force_channels_last = false) : force_(force_channels_last) {}
  std::string_view name() const override { return force_ ? "layout-channels-last" : "layout"; }
  bool run(Graph &g) override {
    bool changed = layout_conv_chains(g, force_);
    for (Node *n : g.nodes()) {
      if (!is_batched_gemm(*n) || n->results().size() != 1) continue;
      std::optional<Dims> st = merged_strides(g, *n);
      if (!st) continue;
      ir::TensorType t = n->result()->type();
      t.strides = *st;
      log()->debug("layout: %{} ({}) written as {}: the transpose after it is contiguous, its reshape a view",
                   n->result()->name(), n->mnemonic(), t.str());
      n->result()->set_type(std::move(t));
      changed = true;
    }
    return changed;
  }

private:
  bool force_;
};

class LayoutChannelsLastPass : public LayoutPass {
public:
  LayoutChannelsLastPass() : LayoutPass(true) {}
};

} // namespace

KILN_REGISTER_PASS(LayoutPass, "layout");
KILN_REGISTER_PASS(LayoutChannelsLastPass, "layout-channels-last");

} // namespace kiln::passes
