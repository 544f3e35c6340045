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
#include <optional>

#include <spdlog/spdlog.h>

#include "ir/graph.h"
#include "passes/pass_manager.h"
#include "passes/rewrite.h"
#include "runtime/log.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Value;

bool is_matmul(const Node &n) {
  return n.kind() == Node::Kind::Op && (n.op() == OpId::Matmul || n.op() == OpId::Bmm);
}

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

class LayoutPass : public Pass {
public:
  std::string_view name() const override { return "layout"; }
  bool run(Graph &g) override {
    bool changed = false;
    for (Node *n : g.nodes()) {
      if (!is_matmul(*n) || n->results().size() != 1) continue;
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
};

} // namespace

KILN_REGISTER_PASS(LayoutPass, "layout");

} // namespace kiln::passes
