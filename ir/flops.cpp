#include "ir/flops.h"

#include "ir/graph.h"

namespace kiln::ir {

namespace {

// Dim `d` of operand `i` counted from the back (1: the last), 0 when absent.
int64_t dim_from_back(const Node &n, size_t i, size_t d) {
  if (i >= n.operands().size() || !n.operand(i)) return 0;
  const Dims &s = n.operand(i)->type().shape;
  return s.size() < d ? 0 : s[s.size() - d];
}

int64_t op_flops(const Node &n) {
  if (n.kind() != Node::Kind::Op || n.results().size() != 1) return 0;
  const int64_t out = n.result()->type().numel();
  const OpId op = n.op();
  // [.., K] @ [K, ..] (a 1-D left operand is [K] too); linear's weight is [N, K].
  if (op == OpId::Mm || op == OpId::Bmm || op == OpId::Matmul || op == OpId::Linear)
    return 2 * out * dim_from_back(n, 0, 1);
  if (op == OpId::Addmm) return 2 * out * dim_from_back(n, 1, 1); // addmm(input, mat1 [M, K], mat2 [K, N])
  if (op == OpId::Sdpa) {
    // q [.., L, E], k [.., S, E], v [.., S, Ev], out [.., L, Ev]: q k^T (2 L S E)
    // and p v (2 L S Ev) per batch.
    int64_t e = dim_from_back(n, 0, 1), s = dim_from_back(n, 1, 2), ev = dim_from_back(n, 2, 1);
    return ev > 0 ? 2 * (out / ev) * s * (e + ev) : 0;
  }
  if (op != OpId::Conv2d) return 0;
  const Dims &w = n.operand(1)->type().shape; // [Cout, Cin / groups, kh, kw]
  if (w.size() < 2) return 0;
  int64_t k = 1;
  for (size_t d = 1; d < w.size(); ++d) k *= w[d];
  return 2 * out * k;
}

} // namespace

int64_t contraction_flops(const Node &n) { return (n.body() ? contraction_flops(*n.body()) : 0) + op_flops(n); }

int64_t contraction_flops(const Graph &g) {
  int64_t flops = 0;
  for (const Node *n : g.nodes()) flops += contraction_flops(*n);
  return flops;
}

} // namespace kiln::ir
