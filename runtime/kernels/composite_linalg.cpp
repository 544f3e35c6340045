// torch.einsum as a composite (runtime/ops.h, "composites"): the equation is parsed on
// the host, each operand is brought to one common dim order (its diagonals taken, its
// dims permuted, absent ones as size 1), and the operands are contracted left to right.
// Each pair goes through permute/reshape and one bmm, as torch's sumproduct_pair does,
// so that a contraction never materializes the broadcast product of its operands; a
// traced call records those ops.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

constexpr int kLabels = 52; // 'A'-'Z' then 'a'-'z', torch's order for the implicit output

int label_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}
char char_of(int l) { return l < 26 ? char('A' + l) : char('a' + l - 26); }

// One side of the equation: its labels in order, kEllipsis where "..." stands.
constexpr int kEllipsis = -1;
struct Term {
  std::vector<int> labels;
  bool ellipsis = false;
};

Term parse_term(const std::string &s, const std::string &where) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      KILN_CHECK(s.compare(i, 3, "...") == 0, "einsum: found '.' in ", where,
                 " that is not part of an ellipsis (...) in \"", s, "\"");
      KILN_CHECK(!t.ellipsis, "einsum: more than one ellipsis (...) in ", where, " \"", s, "\"");
      t.ellipsis = true;
      t.labels.push_back(kEllipsis);
      i += 2;
      continue;
    }
    const int l = label_of(c);
    KILN_CHECK(l >= 0, "einsum: invalid subscript '", c, "' in ", where, " \"", s,
               "\" (subscripts are letters a-z, A-Z)");
    t.labels.push_back(l);
  }
  return t;
}

std::string strip_spaces(const std::string &s) {
  std::string r;
  for (char c : s)
    if (c != ' ') r.push_back(c);
  return r;
}

// The contraction plan: every operand aligned to the dims [ellipsis dims..., labels...]
// (`order`: global dim -> label, kEllipsis for the ellipsis dims).
struct Plan {
  int64_t ell_dims = 0;
  std::vector<int> order;
  std::vector<int> out; // output dims, as global dims
};

// Operand k's label terms validated against its shape: returns it with its diagonals
// taken, permuted to the global order, size 1 where it lacks a dim.
Tensor align(const Tensor &x, const Term &term, size_t k, const Plan &plan, const std::array<int, kLabels> &pos) {
  const int64_t named = int64_t(term.labels.size()) - (term.ellipsis ? 1 : 0);
  const int64_t ell = x.dim() - named;
  KILN_CHECK(term.ellipsis ? ell >= 0 : ell == 0, "einsum: the subscripts of operand ", k, " (",
             named, " subscript(s)", term.ellipsis ? " and ..." : "", ") do not match its ", x.dim(),
             " dims (shape ", shape_str(x.sizes()), ")");
  // Each of x's dims: its global dim.
  std::vector<int64_t> gdim;
  for (int l : term.labels) {
    if (l != kEllipsis) {
      gdim.push_back(plan.ell_dims + pos[size_t(l)]);
      continue;
    }
    for (int64_t e = 0; e < ell; ++e) gdim.push_back(plan.ell_dims - ell + e); // right-aligned
  }
  Tensor r = x;
  // A label repeated in this operand: its diagonal (the two dims moved last, merged, every
  // (n+1)-th element), repeated until each global dim appears once.
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < gdim.size() && !again; ++i)
      for (size_t j = i + 1; j < gdim.size() && !again; ++j) {
        if (gdim[i] != gdim[j]) continue;
        const int64_t n = r.size(int64_t(i));
        KILN_CHECK(r.size(int64_t(j)) == n, "einsum: subscript '", char_of(plan.order[size_t(gdim[i])]),
                   "' is repeated for operand ", k, " but the sizes don't match, ", n, " != ", r.size(int64_t(j)),
                   " (shape ", shape_str(x.sizes()), ")");
        std::vector<int64_t> perm, shape, rest;
        for (size_t d = 0; d < gdim.size(); ++d) {
          if (d == i || d == j) continue;
          perm.push_back(int64_t(d));
          shape.push_back(r.size(int64_t(d)));
          rest.push_back(gdim[d]);
        }
        perm.insert(perm.end(), {int64_t(i), int64_t(j)});
        shape.push_back(n * n);
        r = slice(reshape(permute(r, perm), shape), -1, 0, std::nullopt, n + 1);
        rest.push_back(gdim[i]);
        gdim = rest;
        again = true;
      }
  }
  // Permute to the global order, then a size-1 dim for each global dim it lacks.
  std::vector<int64_t> perm(gdim.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return gdim[size_t(a)] < gdim[size_t(b)]; });
  r = permute(r, perm);
  std::vector<int64_t> have;
  for (int64_t p : perm) have.push_back(gdim[size_t(p)]);
  for (int64_t g = 0; g < int64_t(plan.order.size()); ++g)
    if (std::find(have.begin(), have.end(), g) == have.end()) r = unsqueeze(r, g);
  return r;
}

// Sums x over `dims` keeping them as size 1 (no-op for none: sum over {} would reduce all).
Tensor sum_keep(const Tensor &x, const std::vector<int64_t> &dims) {
  return dims.empty() ? x : sum(x, dims, true);
}

// a and b, aligned to the same global dims, multiplied and summed over `summed` (each
// true marks a global dim no later operand and the output need): one bmm of
// [batch, a-only, contracted] by [batch, contracted, b-only].
Tensor contract_pair(const Tensor &a_in, const Tensor &b_in, const std::vector<bool> &summed) {
  const int64_t nd = a_in.dim();
  // A summed dim only one side has is summed on that side first.
  std::vector<int64_t> sa, sb;
  for (int64_t d = 0; d < nd; ++d) {
    if (!summed[size_t(d)]) continue;
    const bool in_a = a_in.size(d) != 1, in_b = b_in.size(d) != 1;
    if (in_a && !in_b) sa.push_back(d);
    if (in_b && !in_a) sb.push_back(d);
  }
  Tensor a = sum_keep(a_in, sa), b = sum_keep(b_in, sb);
  std::vector<int64_t> batch, lo, hi, red;
  int64_t nb = 1, nm = 1, nn = 1, nk = 1;
  for (int64_t d = 0; d < nd; ++d) {
    const bool in_a = a.size(d) != 1, in_b = b.size(d) != 1;
    if (summed[size_t(d)]) {
      if (in_a && in_b) {
        red.push_back(d);
        nk *= a.size(d);
      }
      continue;
    }
    if (in_a && in_b) {
      batch.push_back(d);
      nb *= a.size(d);
    } else if (in_a) {
      lo.push_back(d);
      nm *= a.size(d);
    } else if (in_b) {
      hi.push_back(d);
      nn *= b.size(d);
    }
  }
  std::vector<int64_t> pa = batch, pb = batch;
  pa.insert(pa.end(), lo.begin(), lo.end());
  pa.insert(pa.end(), red.begin(), red.end());
  pb.insert(pb.end(), red.begin(), red.end());
  pb.insert(pb.end(), hi.begin(), hi.end());
  // The dims a or b lack (size 1 on both sides) go last in the permutation and vanish in the reshape.
  auto complete = [&](std::vector<int64_t> p) {
    for (int64_t d = 0; d < nd; ++d)
      if (std::find(p.begin(), p.end(), d) == p.end()) p.push_back(d);
    return p;
  };
  Tensor ma = reshape(permute(a, complete(pa)), {nb, nm, nk});
  Tensor mb = reshape(permute(b, complete(pb)), {nb, nk, nn});
  Tensor prod = bmm(ma, mb);
  // Back to the global dims: [batch, lo, hi] sizes, permuted to global order, size 1 elsewhere.
  std::vector<int64_t> dims = batch, shape;
  dims.insert(dims.end(), lo.begin(), lo.end());
  dims.insert(dims.end(), hi.begin(), hi.end());
  for (int64_t d : dims) shape.push_back(a.size(d) != 1 ? a.size(d) : b.size(d));
  Tensor r = reshape(prod, shape);
  std::vector<int64_t> perm(dims.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
  std::sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return dims[size_t(x)] < dims[size_t(y)]; });
  r = permute(r, perm);
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < nd; ++d)
    if (!std::binary_search(sorted.begin(), sorted.end(), d)) r = unsqueeze(r, d);
  return r;
}

// The contraction order: torch's `path` (opt_einsum's format), pairs (i, j) of positions
// in the list of remaining operands, the two taken out and their product appended; or
// without a path left to right, each product taking the place of the pair. A dim is
// summed at the step after which neither a remaining operand nor the output needs it.
Tensor contract_all(std::vector<Tensor> ops, const std::vector<bool> &in_out,
                    const std::optional<std::vector<int64_t>> &path) {
  const size_t n = ops.size();
  if (path) {
    KILN_CHECK(path->size() == 2 * (n - 1), "einsum: path must hold 2 * (number of operands - 1) = ", 2 * (n - 1),
               " positions (a pair per contraction) for ", n, " operand(s), got ", path->size());
  }
  for (size_t step = 0; ops.size() > 1; ++step) {
    int64_t i = 0, j = 1;
    if (path) {
      i = (*path)[2 * step];
      j = (*path)[2 * step + 1];
      if (j < i) std::swap(i, j);
      KILN_CHECK(i != j && i >= 0 && j < int64_t(ops.size()), "einsum: invalid contraction (", (*path)[2 * step], ", ",
                 (*path)[2 * step + 1], ") at path step ", step, ": ",
                 i == j ? "cannot contract an operand with itself"
                        : "operand position is out of bounds for " + std::to_string(ops.size()) + " remaining operands");
    }
    Tensor a = ops[size_t(i)], b = ops[size_t(j)];
    ops.erase(ops.begin() + j);
    ops.erase(ops.begin() + i);
    const int64_t nd = a.dim();
    std::vector<bool> summed(size_t(nd), false);
    for (int64_t d = 0; d < nd; ++d) {
      bool needed = in_out[size_t(d)];
      for (size_t k = 0; k < ops.size() && !needed; ++k) needed = ops[k].size(d) != 1;
      summed[size_t(d)] = !needed;
    }
    Tensor ab = contract_pair(a, b, summed);
    if (path) ops.push_back(ab);
    else ops.insert(ops.begin(), ab);
  }
  return ops.front();
}

} // namespace

Tensor einsum(const std::string &equation, const std::vector<Tensor> &operands,
              const std::optional<std::vector<int64_t>> &path) {
  const std::string eq = strip_spaces(equation);
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  KILN_CHECK(!operands.empty(), "einsum: must provide at least one operand (equation \"", equation, "\")");
  for (size_t k = 0; k < operands.size(); ++k) {
    const std::string arg = "operand " + std::to_string(k);
    detail::check_defined(operands[k], "einsum", arg.c_str());
    KILN_CHECK(operands[k].dtype() == operands[0].dtype(), "einsum: operand ", k, " has dtype ", operands[k].dtype(),
               " but operand 0 has dtype ", operands[0].dtype(), " (expected the same dtype)");
    // Its products are bmm's, which has no bool form: refused here, under einsum's name.
    KILN_CHECK(operands[k].dtype() != kBool, "einsum: operand ", k, " is a bool tensor (shape ",
               shape_str(operands[k].sizes()), "); expected a numeric dtype");
  }
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    const std::string part = lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    terms.push_back(parse_term(part, "the subscripts of operand " + std::to_string(terms.size())));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(terms.size() == operands.size(), "einsum: the equation \"", equation, "\" has subscripts for ",
             terms.size(), " operand(s), but ", operands.size(), " operand(s) were given");

  // Global dims: the ellipsis dims (the most any operand has), then the labels in
  // alphabetical order; count[l] = occurrences of label l over all operands.
  Plan plan;
  std::array<int, kLabels> count{}, pos{};
  for (size_t k = 0; k < terms.size(); ++k) {
    int64_t named = 0;
    for (int l : terms[k].labels)
      if (l != kEllipsis) ++count[size_t(l)], ++named;
    if (terms[k].ellipsis) plan.ell_dims = std::max(plan.ell_dims, operands[k].dim() - named);
  }
  for (int64_t e = 0; e < plan.ell_dims; ++e) plan.order.push_back(kEllipsis);
  for (int l = 0; l < kLabels; ++l) {
    if (count[size_t(l)] == 0) continue;
    pos[size_t(l)] = int(plan.order.size() - size_t(plan.ell_dims));
    plan.order.push_back(l);
  }

  // Output dims: explicit after "->", else the ellipsis dims then the labels seen once.
  std::vector<bool> in_out(plan.order.size(), false);
  auto add_ellipsis = [&] {
    for (int64_t e = 0; e < plan.ell_dims; ++e) {
      plan.out.push_back(e);
      in_out[size_t(e)] = true;
    }
  };
  if (arrow == std::string::npos) {
    bool any_ellipsis = false;
    for (const Term &t : terms) any_ellipsis = any_ellipsis || t.ellipsis;
    if (any_ellipsis) add_ellipsis();
    for (int l = 0; l < kLabels; ++l) {
      if (count[size_t(l)] != 1) continue;
      plan.out.push_back(plan.ell_dims + pos[size_t(l)]);
      in_out[size_t(plan.out.back())] = true;
    }
  } else {
    const Term out = parse_term(eq.substr(arrow + 2), "the output");
    for (int l : out.labels) {
      if (l == kEllipsis) {
        add_ellipsis();
        continue;
      }
      KILN_CHECK(count[size_t(l)] > 0, "einsum: output subscript '", char_of(l),
                 "' does not appear in the subscripts of any operand (equation \"", equation, "\")");
      const int64_t g = plan.ell_dims + pos[size_t(l)];
      KILN_CHECK(!in_out[size_t(g)], "einsum: output subscript '", char_of(l), "' appears more than once in the output (equation \"",
                 equation, "\")");
      plan.out.push_back(g);
      in_out[size_t(g)] = true;
    }
  }

  std::vector<Tensor> aligned;
  for (size_t k = 0; k < operands.size(); ++k) aligned.push_back(align(operands[k], terms[k], k, plan, pos));
  // Every global dim's size: equal over the operands that have it, size 1 broadcasting.
  const int64_t nd = int64_t(plan.order.size());
  std::vector<int64_t> size(size_t(nd), 1);
  for (int64_t d = 0; d < nd; ++d)
    for (size_t k = 0; k < aligned.size(); ++k) {
      const int64_t s = aligned[k].size(d);
      if (s == 1 || s == size[size_t(d)]) continue;
      const std::string what = plan.order[size_t(d)] == kEllipsis
                                   ? std::string("the ellipsis (...) dims")
                                   : "subscript '" + std::string(1, char_of(plan.order[size_t(d)])) + "'";
      KILN_CHECK(size[size_t(d)] == 1, "einsum: operand ", k, " has size ", s, " for ", what, ", where another operand has size ",
                 size[size_t(d)], " (shape ", shape_str(operands[k].sizes()), ")");
      size[size_t(d)] = s;
    }

  Tensor r = contract_all(std::move(aligned), in_out, path);
  std::vector<int64_t> rest;
  for (int64_t d = 0; d < nd; ++d)
    if (!in_out[size_t(d)] && r.size(d) != 1) rest.push_back(d);
  r = sum_keep(r, rest);
  // The output dims in the output's order; the others are size 1 now and go.
  std::vector<int64_t> perm(plan.out.begin(), plan.out.end()), shape;
  for (int64_t d = 0; d < nd; ++d)
    if (!in_out[size_t(d)]) perm.push_back(d);
  for (int64_t g : plan.out) shape.push_back(size[size_t(g)]);
  return reshape(permute(r, perm), shape);
}

} // namespace kiln
