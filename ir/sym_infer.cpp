#include "ir/sym_infer.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <optional>
#include <string>
#include <unordered_map>

#include "runtime/error.h"

namespace kiln::ir {

namespace {

std::string binding(std::span<const int> symbols, std::span<const int64_t> values) {
  std::string s;
  for (int k : symbols) {
    s += s.empty() ? "s" : ", s"; // appended: GCC 12's -Wrestrict
    s += std::to_string(k);
    s += " = ";
    s += std::to_string(values[size_t(k)]);
  }
  return s;
}

// The rule at `values`, its error reworded: a refusal away from the traced
// sizes means the op's shapes hold only where the symbols are related.
std::vector<Dims> run_at(const SizesAt &rule, std::span<const int> symbols, std::span<const int64_t> values,
                         bool traced) {
  try {
    return rule(values);
  } catch (const Error &e) {
    if (traced) throw;
    throw Error("no symbolic shape: the sizes hold only for some values of the symbols (at " +
                binding(symbols, values) + ": " + e.what() + ")");
  }
}

void check_structure(const std::vector<Dims> &base, const std::vector<Dims> &at, std::span<const int> symbols,
                     std::span<const int64_t> values) {
  bool same = base.size() == at.size();
  for (size_t r = 0; same && r < base.size(); ++r) same = base[r].size() == at[r].size();
  if (!same)
    throw Error("no symbolic shape: the result ranks change with the symbols (at " + binding(symbols, values) +
                ")");
}

// Dims that are a floor division of one symbol s (a strided conv or pool over
// a symbolic height: (s + 2p - k) // stride + 1): (a * s + b) // den for den
// up to kMaxFitDen. The rule runs along each symbol alone (the others at their
// hints), as far as the denominators tried need: 2 * den + 1 points fix a, b
// and den, and fit_symbolic_dims checks the result away from them.
class FloorFit {
public:
  static constexpr int64_t kMaxDen = 32;

  FloorFit(const SizesAt &rule, std::span<const int> symbols, const std::vector<int64_t> &base)
      : rule_(rule), symbols_(symbols), base_(base), series_(symbols.size()) {}

  std::optional<SymExpr> dim(size_t r, size_t d) {
    for (int64_t den = 2; den <= kMaxDen; ++den) {
      const int64_t points = 2 * den + 1;
      int varies = -1; // the one symbol the dim changes with so far
      for (size_t j = 0; j < symbols_.size(); ++j) {
        if (!extend(j, points)) return std::nullopt;
        const std::vector<std::vector<Dims>> &sj = series_[j];
        for (int64_t t = 1; t < points; ++t)
          if (sj[size_t(t)][r][int64_t(d)] != sj[0][r][int64_t(d)]) {
            if (varies >= 0 && varies != int(j)) return std::nullopt; // two symbols: not this form
            varies = int(j);
            break;
          }
      }
      if (varies < 0) continue; // constant so far: a larger denominator may show it
      if (std::optional<SymExpr> e = fit(size_t(varies), r, d, den, points)) return e;
    }
    return std::nullopt;
  }

private:
  // The rule along symbol j at its hint + t for t < points; false where it refuses.
  bool extend(size_t j, int64_t points) {
    std::vector<std::vector<Dims>> &sj = series_[j];
    while (int64_t(sj.size()) < points) {
      std::vector<int64_t> values = base_;
      values[size_t(symbols_[j])] += int64_t(sj.size());
      try {
        sj.push_back(rule_(values));
      } catch (const Error &) {
        return false;
      }
      if (sj.back().size() != sj[0].size()) return false;
      for (size_t q = 0; q < sj[0].size(); ++q)
        if (sj.back()[q].size() != sj[0][q].size()) return false;
    }
    return true;
  }

  // (a * s + b) // den through the points, or nothing: a is the step over den
  // points, the same from every start; b any value that floors to each point.
  std::optional<SymExpr> fit(size_t j, size_t r, size_t d, int64_t den, int64_t points) const {
    const std::vector<std::vector<Dims>> &sj = series_[j];
    auto y = [&](int64_t t) { return sj[size_t(t)][r][int64_t(d)]; };
    const int64_t a = y(den) - y(0);
    for (int64_t t = 0; t + den < points; ++t)
      if (y(t + den) - y(t) != a) return std::nullopt;
    const int64_t h = base_[size_t(symbols_[j])];
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    for (int64_t t = 0; t < points; ++t) { // den * y <= a * x + b < den * (y + 1)
      const int64_t x = h + t;
      lo = std::max(lo, den * y(t) - a * x);
      hi = std::min(hi, den * y(t) + den - 1 - a * x);
    }
    if (lo > hi) return std::nullopt;
    return SymExpr::floordiv(SymExpr(a) * SymExpr::symbol(symbols_[j]) + SymExpr(lo), SymExpr(den));
  }

  const SizesAt &rule_;
  std::span<const int> symbols_;
  const std::vector<int64_t> &base_;
  std::vector<std::vector<std::vector<Dims>>> series_; // per symbol, per point: the rule's sizes
};

} // namespace

std::vector<std::vector<SymExpr>> fit_symbolic_dims(const SizesAt &rule, std::span<const int64_t> hints,
                                                    std::span<const int> symbols) {
  const int m = int(symbols.size());
  if (m > kMaxFitSymbols)
    throw Error("no symbolic shape: " + std::to_string(m) + " symbols; at most " +
                std::to_string(kMaxFitSymbols) + " are supported");
  for (int k : symbols)
    KILN_CHECK(k >= 0 && size_t(k) < hints.size(), "fit_symbolic_dims: symbol s", k, " has no traced value");
  const std::vector<int64_t> base_values(hints.begin(), hints.end());

  // sizes[U]: the rule with the symbols of subset U moved up by one.
  std::vector<std::vector<Dims>> sizes(size_t(1) << m);
  for (size_t u = 0; u < sizes.size(); ++u) {
    std::vector<int64_t> values = base_values;
    for (int j = 0; j < m; ++j)
      if (u >> j & 1) ++values[size_t(symbols[size_t(j)])];
    sizes[u] = run_at(rule, symbols, values, u == 0);
    check_structure(sizes[0], sizes[u], symbols, values);
  }

  // Newton's form on the unit cube: the coefficient of prod_{j in T} (s_j - h_j)
  // is the alternating sum of the sizes over the subsets of T.
  std::vector<SymExpr> shifted; // s_j - h_j
  for (int k : symbols) shifted.push_back(SymExpr::symbol(k) - SymExpr(hints[size_t(k)]));
  std::vector<std::vector<SymExpr>> out(sizes[0].size());
  for (size_t r = 0; r < sizes[0].size(); ++r)
    for (size_t d = 0; d < sizes[0][r].size(); ++d) {
      SymExpr e;
      for (size_t t = 0; t < sizes.size(); ++t) {
        int64_t coeff = 0;
        for (size_t u = t;; u = (u - 1) & t) { // the subsets u of t
          const int64_t v = sizes[u][r][int64_t(d)];
          coeff += (std::popcount(t ^ u) & 1) ? -v : v;
          if (u == 0) break;
        }
        if (coeff == 0) continue;
        SymExpr term(coeff);
        for (int j = 0; j < m; ++j)
          if (t >> j & 1) term = term * shifted[size_t(j)];
        e = e + term;
      }
      out[r].push_back(e);
    }

  // Two checks away from the unit cube, each symbol moved by a different amount
  // (a floor division can look linear on the cube). A dim that fails them may
  // be a floor division of one symbol (floor_fit); both checks run again.
  auto check_point = [&](int pass) {
    std::vector<int64_t> values = base_values;
    for (int j = 0; j < m; ++j) {
      int64_t &v = values[size_t(symbols[size_t(j)])];
      v = pass == 0 ? v + 5 + 2 * j : 2 * v + 17 + 3 * j;
    }
    return values;
  };
  std::vector<std::pair<size_t, size_t>> misfits; // (result, dim)
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<int64_t> values = check_point(pass);
    const std::vector<Dims> got = run_at(rule, symbols, values, false);
    check_structure(sizes[0], got, symbols, values);
    for (size_t r = 0; r < out.size(); ++r) {
      const std::vector<int64_t> want = evaluate_dims(out[r], values);
      for (size_t d = 0; d < want.size(); ++d)
        if (want[d] != got[r][int64_t(d)] && std::find(misfits.begin(), misfits.end(), std::pair{r, d}) == misfits.end())
          misfits.emplace_back(r, d);
    }
  }
  if (!misfits.empty()) {
    FloorFit fit(rule, symbols, base_values);
    for (auto [r, d] : misfits)
      if (std::optional<SymExpr> e = fit.dim(r, d)) out[r][d] = *e;
  }
  for (int pass = 0; pass < 2 && !misfits.empty(); ++pass) {
    const std::vector<int64_t> values = check_point(pass);
    std::vector<Dims> got = run_at(rule, symbols, values, false);
    for (size_t r = 0; r < out.size(); ++r) {
      const std::vector<int64_t> want = evaluate_dims(out[r], values);
      if (IntArrayRef(want) == IntArrayRef(got[r])) continue;
      std::string dims = "[";
      for (size_t d = 0; d < out[r].size(); ++d) {
        if (d) dims += ", ";
        dims += out[r][d].str();
      }
      dims += "]";
      bool symbolic = false;
      for (const SymExpr &e : out[r]) symbolic |= !e.is_constant();
      if (symbolic) dims += " = " + shape_str(want);
      throw Error("no symbolic shape: result " + std::to_string(r) + " is " + shape_str(got[r]) + " at " +
                  binding(symbols, values) + ", not " + dims +
                  " (a size that is neither multilinear in the symbols nor a floor division of one)");
    }
  }
  return out;
}

bool sizes_in_attrs(OpId op) { return has_trait(op, OpTrait::SizesInAttrs); }

Attrs attrs_with_sizes(OpId op, const Attrs &attrs, IntArrayRef sizes) {
  KILN_CHECK(sizes_in_attrs(op), "attrs_with_sizes: ", op_info(op).mnemonic, " keeps no sizes in its attributes");
  const auto &names = op_info(op).attr_names;
  auto it = std::find(names.begin(), names.end(), "shape");
  if (it == names.end()) it = std::find(names.begin(), names.end(), "size"); // full
  KILN_CHECK(it != names.end() && size_t(it - names.begin()) < attrs.size(), "attrs_with_sizes: ",
             op_info(op).mnemonic, " has no shape attribute");
  Attrs out = attrs;
  out[size_t(it - names.begin())] = AttrValue(sizes);
  return out;
}

Attrs attrs_at(const Node &n, std::span<const int64_t> values) {
  const TensorType &t = n.result()->type();
  if (!sizes_in_attrs(n.op()) || !t.symbolic()) return n.attrs();
  return attrs_with_sizes(n.op(), n.attrs(), evaluate_dims(t.sym, values));
}

std::vector<int64_t> evaluate_dims(std::span<const SymExpr> dims, std::span<const int64_t> values) {
  std::vector<int64_t> sizes;
  for (const SymExpr &e : dims) sizes.push_back(e.evaluate(values));
  return sizes;
}

std::vector<int64_t> bind_symbols(const Graph &g, const std::vector<IntArrayRef> &sizes) {
  const size_t n = g.symbol_hints().size();
  if (n == 0) return {};
  KILN_CHECK(sizes.size() == g.inputs().size(), "@", g.name(), ": ", g.inputs().size(), " inputs expected, got ",
             sizes.size());
  std::vector<int64_t> values(n, -1);
  auto input_name = [&](size_t i) { return "input " + std::to_string(i) + " (%" + g.inputs()[i]->name() + ")"; };
  for (size_t i = 0; i < sizes.size(); ++i) {
    const TensorType &t = g.inputs()[i]->type();
    KILN_CHECK(sizes[i].size() == t.shape.size(), "@", g.name(), ": ", input_name(i), " must have ", t.shape.size(),
               " dims (", t.str(), "), got ", shape_str(sizes[i]));
    for (size_t d = 0; d < t.sym.size(); ++d) {
      const std::optional<int> id = t.sym[d].as_symbol();
      if (!id || values[size_t(*id)] >= 0) continue;
      values[size_t(*id)] = sizes[i][int64_t(d)];
    }
  }
  for (size_t k = 0; k < n; ++k)
    KILN_CHECK(values[k] >= 0, "@", g.name(), ": no input dim is s", k, " alone, so a call cannot bind it");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const TensorType &t = g.inputs()[i]->type();
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const int64_t want = t.symbolic() ? t.sym[d].evaluate(values) : t.shape[int64_t(d)];
      if (want == sizes[i][int64_t(d)]) continue;
      std::string why = t.symbolic() && !t.sym[d].is_constant()
                            ? t.sym[d].str() + " = " + std::to_string(want) + " at " +
                                  binding(t.sym[d].symbols(), values)
                            : std::to_string(want);
      throw Error("@" + g.name() + ": " + input_name(i) + " of type " + t.str() + " has size " +
                  std::to_string(sizes[i][int64_t(d)]) + " in dim " + std::to_string(d) + ", where the graph needs " +
                  why);
    }
  }
  return values;
}

namespace {

TensorType type_at(const TensorType &t, std::span<const int64_t> values) {
  if (!t.symbolic()) return t;
  std::vector<int64_t> d = evaluate_dims(t.sym, values);
  return TensorType(t.dtype, Dims(IntArrayRef(d)));
}

using ValueMap = std::unordered_map<const Value *, Value *>;

// Nodes of `from` appended to `to` at `values`, under their names; `map` has
// `from`'s inputs, params and consts already.
void copy_nodes_at(const Graph &from, Graph &to, ValueMap &map, std::span<const int64_t> values) {
  for (const Node *n : from.nodes()) {
    std::vector<Value *> ops;
    for (const Value *v : n->operands()) ops.push_back(v ? map.at(v) : nullptr);
    std::vector<TensorType> types;
    for (const Value *r : n->results()) types.push_back(type_at(r->type(), values));
    Node *copy = n->kind() == Node::Kind::FusionGroup ? to.create_group(ops, types)
                                                       : to.create(n->op(), ops, attrs_at(*n, values), types);
    for (size_t k = 0; k < n->results().size(); ++k) {
      copy->result(k)->set_name(n->result(k)->name());
      map[n->result(k)] = copy->result(k);
    }
    if (n->kind() != Node::Kind::FusionGroup) continue;
    const Graph &body = *n->body();
    Graph &into = *copy->body();
    ValueMap inner;
    for (size_t i = 0; i < body.inputs().size(); ++i) {
      into.inputs()[i]->set_name(body.inputs()[i]->name());
      inner[body.inputs()[i]] = into.inputs()[i];
    }
    for (const Value *p : body.params()) inner[p] = into.add_param(p->tensor(), p->name());
    for (const Value *c : body.consts()) inner[c] = into.add_const(c->tensor(), c->name());
    copy_nodes_at(body, into, inner, values);
    std::vector<Value *> outs;
    for (const Value *o : body.outputs()) outs.push_back(inner.at(o));
    into.set_outputs(outs);
  }
}

} // namespace

std::unique_ptr<Graph> instantiate(const Graph &g, std::span<const int64_t> values) {
  const size_t n = g.symbol_hints().size();
  KILN_CHECK(values.size() == n, "instantiate: @", g.name(), " has ", n, n == 1 ? " symbol" : " symbols", ", given ",
             values.size(), values.size() == 1 ? " value" : " values");
  auto out = std::make_unique<Graph>(g.name());
  ValueMap map;
  for (const Value *v : g.inputs()) map[v] = out->add_input(type_at(v->type(), values), v->name());
  for (const Value *p : g.params()) map[p] = out->add_param(p->tensor(), p->name());
  for (const Value *c : g.consts()) map[c] = out->add_const(c->tensor(), c->name());
  copy_nodes_at(g, *out, map, values);
  std::vector<Value *> outs;
  for (const Value *o : g.outputs()) outs.push_back(map.at(o));
  out->set_outputs(outs);
  for (const WriteBack &w : g.write_backs()) out->add_write_back(map.at(w.target), map.at(w.value));
  return out;
}

} // namespace kiln::ir
