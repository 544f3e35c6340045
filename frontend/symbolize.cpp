#include "frontend/symbolize.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "ir/printer.h"
#include "ir/sym_infer.h"
#include "ir/verifier.h"
#include <spdlog/spdlog.h>

#include "runtime/log.h"

namespace kiln {

namespace {

std::string dim_name(const InputDim &d) { return "input " + std::to_string(d.input) + " dim " + std::to_string(d.dim); }

// A graph's values in a fixed order: the inputs, then each node's results.
std::vector<ir::Value *> values_of(const ir::Graph &g) {
  std::vector<ir::Value *> vals(g.inputs().begin(), g.inputs().end());
  for (const ir::Node *n : g.nodes())
    for (ir::Value *r : n->results()) vals.push_back(r);
  return vals;
}

std::vector<Dims> shapes_of(const ir::Graph &g) {
  std::vector<Dims> shapes;
  for (const ir::Value *v : values_of(g)) shapes.push_back(v->type().shape);
  return shapes;
}

bool same_constant(const Tensor &a, const Tensor &b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes() || a.impl().wrapped_number != b.impl().wrapped_number)
    return false;
  if (!a.is_contiguous() || !b.is_contiguous()) return a.equal(b);
  return std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * itemsize(a.dtype())) == 0;
}

// How g differs from base other than in sizes, or "" when it does not: the same
// ops on the same operands with the same attributes (a view's, reshape's or
// expand's sizes aside), parameters, constants, outputs and write-backs.
std::string structure_difference(const ir::Graph &base, const ir::Graph &g) {
  if (base.inputs().size() != g.inputs().size() || base.nodes().size() != g.nodes().size())
    return "another number of ops";
  if (base.params().size() != g.params().size()) return "other captured tensors";
  // A tensor the function makes afresh on each call (a constant built inside
  // it) is captured anew by each trace: the same capture when its values are.
  for (size_t i = 0; i < base.params().size(); ++i) {
    const Tensor &a = base.params()[i]->tensor(), &b = g.params()[i]->tensor();
    if (!a.is_same(b) && !same_constant(a, b))
      return "captured tensor %" + base.params()[i]->name() + " is another tensor";
  }
  if (base.consts().size() != g.consts().size()) return "another number of constants";
  for (size_t i = 0; i < base.consts().size(); ++i)
    if (!same_constant(base.consts()[i]->tensor(), g.consts()[i]->tensor()))
      return "constant %" + base.consts()[i]->name() + " is computed from the size";
  std::unordered_map<const ir::Value *, size_t> at_base, at_g;
  for (const ir::Value *v : values_of(base)) at_base.emplace(v, at_base.size());
  for (const ir::Value *v : values_of(g)) at_g.emplace(v, at_g.size());
  auto same_value = [&](const ir::Value *a, const ir::Value *b) {
    if (!a || !b) return a == b;
    auto ia = at_base.find(a), ib = at_g.find(b);
    if (ia != at_base.end() || ib != at_g.end())
      return ia != at_base.end() && ib != at_g.end() && ia->second == ib->second;
    // Parameters and constants: the same position in their lists.
    for (const auto &[lb, lg] : {std::pair{&base.params(), &g.params()}, {&base.consts(), &g.consts()}}) {
      auto pa = std::find(lb->begin(), lb->end(), a), pb = std::find(lg->begin(), lg->end(), b);
      if (pa != lb->end() || pb != lg->end()) return pa - lb->begin() == pb - lg->begin();
    }
    return false;
  };
  const std::vector<ir::Node *> nb = base.nodes(), ng = g.nodes();
  for (size_t i = 0; i < nb.size(); ++i) {
    const ir::Node &a = *nb[i], &b = *ng[i];
    const std::string where = "op " + std::to_string(i) + " (" + std::string(a.mnemonic()) + ")";
    if (a.kind() != b.kind() || a.op() != b.op() || a.results().size() != b.results().size())
      return where + " is another op";
    if (a.operands().size() != b.operands().size()) return where + " has other operands";
    for (size_t k = 0; k < a.operands().size(); ++k)
      if (!same_value(a.operand(k), b.operand(k))) return where + " has other operands";
    if (!ir::sizes_in_attrs(a.op()) && !(a.attrs() == b.attrs()))
      return where + " has attributes computed from the size";
  }
  if (base.outputs().size() != g.outputs().size()) return "another number of outputs";
  for (size_t i = 0; i < base.outputs().size(); ++i)
    if (!same_value(base.outputs()[i], g.outputs()[i])) return "output " + std::to_string(i) + " is another value";
  if (base.write_backs().size() != g.write_backs().size()) return "other write-backs";
  for (size_t i = 0; i < base.write_backs().size(); ++i)
    if (!same_value(base.write_backs()[i].target, g.write_backs()[i].target) ||
        !same_value(base.write_backs()[i].value, g.write_backs()[i].value))
      return "other write-backs";
  return "";
}

// Requested dims of one size: one symbol (duck sizing).
struct Group {
  int64_t size;
  std::vector<InputDim> dims;
};

class Symbolizer {
public:
  Symbolizer(const TracedFunction &fn, const std::vector<Tensor> &examples, const std::string &name,
             const ir::Graph &base, int &traces)
      : fn_(fn), examples_(examples), name_(name), base_(base), traces_(traces) {}

  // Each value's dims over the symbols of `groups` (s<k> for groups[k]).
  std::vector<std::vector<ir::SymExpr>> fit(const std::vector<Group> &groups) {
    std::vector<int64_t> hints;
    std::vector<int> symbols;
    for (const Group &gr : groups) {
      symbols.push_back(int(hints.size()));
      hints.push_back(gr.size);
    }
    auto rule = [&](std::span<const int64_t> values) {
      auto g = trace_at(groups, values);
      std::string diff = structure_difference(base_, *g);
      KILN_CHECK(diff.empty(), "the graph changes with the size: ", diff);
      return shapes_of(*g);
    };
    std::vector<std::vector<ir::SymExpr>> dims = ir::fit_symbolic_dims(rule, hints, symbols);
    const std::vector<ir::Value *> vals = values_of(base_);
    for (size_t i = 0; i < vals.size(); ++i) {
      const bool symbolic =
          std::any_of(dims[i].begin(), dims[i].end(), [](const ir::SymExpr &e) { return !e.is_constant(); });
      KILN_CHECK(!symbolic || !vals[i]->type().strides, "%", vals[i]->name(), " has the strided layout ",
                 vals[i]->type().str(), ", which a symbolic type cannot hold yet");
    }
    return dims;
  }

  // Whether the function traced with any of the symbols of `groups` at 1 (the
  // others at their sizes) is the same graph, its values of the sizes `dims`
  // give there: then no size-dependent branch, broadcast or squeeze turns on at 1.
  std::string differs_at_one(const std::vector<Group> &groups, const std::vector<std::vector<ir::SymExpr>> &dims) {
    for (uint32_t mask = 1; mask < (1u << groups.size()); ++mask) {
      std::vector<int64_t> values;
      for (size_t k = 0; k < groups.size(); ++k) values.push_back(mask >> k & 1 ? 1 : groups[k].size);
      std::unique_ptr<ir::Graph> g;
      try {
        g = trace_at(groups, values);
      } catch (const Error &e) {
        return e.what();
      }
      if (std::string diff = structure_difference(base_, *g); !diff.empty()) return diff;
      const std::vector<Dims> shapes = shapes_of(*g);
      for (size_t i = 0; i < shapes.size(); ++i)
        if (IntArrayRef(shapes[i]) != IntArrayRef(ir::evaluate_dims(dims[i], values)))
          return "value " + std::to_string(i) + " is " + shape_str(shapes[i]);
    }
    return "";
  }

private:
  std::unique_ptr<ir::Graph> trace_at(const std::vector<Group> &groups, std::span<const int64_t> values) {
    std::vector<Tensor> metas;
    for (size_t i = 0; i < examples_.size(); ++i) {
      std::vector<int64_t> sizes = examples_[i].sizes().vec();
      for (size_t k = 0; k < groups.size(); ++k)
        for (const InputDim &d : groups[k].dims)
          if (d.input == i) sizes[size_t(d.dim)] = values[k];
      metas.push_back(detail::make_tensor(sizes, examples_[i].dtype(), /*meta=*/true));
    }
    ++traces_;
    return trace(fn_, metas, name_);
  }

  const TracedFunction &fn_;
  const std::vector<Tensor> &examples_;
  const std::string &name_;
  const ir::Graph &base_;
  int &traces_;
};


} // namespace

std::vector<InputDim> every_input_dim(const std::vector<Tensor> &examples) {
  std::vector<InputDim> dims;
  for (size_t i = 0; i < examples.size(); ++i)
    for (int64_t d = 0; d < examples[i].dim(); ++d) dims.push_back({i, d});
  return dims;
}

std::vector<InputDim> checked_dims(const std::vector<Tensor> &examples, const std::vector<InputDim> &dims) {
  std::vector<InputDim> out;
  for (InputDim d : dims) {
    KILN_CHECK(d.input < examples.size(), "dynamic dims: input ", d.input, " does not exist (the function takes ",
               examples.size(), " inputs)");
    const int64_t rank = examples[d.input].dim();
    KILN_CHECK(d.dim >= -rank && d.dim < rank, "dynamic dims: input ", d.input, " of shape ",
               examples[d.input].sizes(), " has no dim ", d.dim);
    if (d.dim < 0) d.dim += rank;
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const InputDim &o) { return o.input == d.input && o.dim == d.dim; });
    if (!seen) out.push_back(d);
  }
  return out;
}

SymbolicTrace trace_symbolic(const TracedFunction &fn, const std::vector<Tensor> &examples,
                             const std::vector<InputDim> &dims, std::string name,
                             std::vector<TracedOutput> *outputs) {
  const std::vector<InputDim> wanted = checked_dims(examples, dims);
  SymbolicTrace out;
  out.graph = trace(fn, examples, name, outputs);
  out.traces = 1;
  auto stay_static = [&](const InputDim &d, const std::string &why) {
    out.static_reasons.push_back(dim_name(d) + " (size " + std::to_string(examples[d.input].size(d.dim)) + "): " + why);
    log()->debug("dynamic shapes: {}", out.static_reasons.back());
  };
  std::vector<Group> groups;
  for (const InputDim &d : wanted) {
    const int64_t size = examples[d.input].size(d.dim);
    if (size <= 1) {
      stay_static(d, "sizes 0 and 1 stay static (broadcasting depends on them)");
      continue;
    }
    if (!examples[d.input].is_contiguous()) {
      stay_static(d, "the input is not contiguous, and a symbolic type has no strides yet");
      continue;
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group &g) { return g.size == size; });
    if (it == groups.end()) groups.push_back({size, {d}});
    else it->dims.push_back(d);
  }

  // One symbol at a time, kept when the graph holds for it with the ones kept before.
  Symbolizer symbolizer(fn, examples, name, *out.graph, out.traces);
  std::vector<Group> kept;
  std::vector<std::vector<ir::SymExpr>> fitted;
  for (const Group &gr : groups) {
    if (kept.size() == size_t(ir::kMaxFitSymbols)) {
      for (const InputDim &d : gr.dims)
        stay_static(d, "more than " + std::to_string(ir::kMaxFitSymbols) + " symbols in one graph");
      continue;
    }
    std::vector<Group> trial = kept;
    trial.push_back(gr);
    try {
      fitted = symbolizer.fit(trial);
      kept = std::move(trial);
    } catch (const Error &e) {
      for (const InputDim &d : gr.dims) stay_static(d, e.what());
    }
  }
  if (kept.empty()) return out;

  std::vector<ir::Value *> vals = values_of(*out.graph);
  for (size_t i = 0; i < vals.size(); ++i) {
    if (std::all_of(fitted[i].begin(), fitted[i].end(), [](const ir::SymExpr &e) { return e.is_constant(); })) continue;
    ir::TensorType t = vals[i]->type();
    t.sym = fitted[i];
    vals[i]->set_type(t);
  }
  std::vector<int64_t> hints;
  for (const Group &gr : kept) {
    hints.push_back(gr.size);
    out.symbols.push_back(gr.dims);
  }
  out.graph->set_symbol_hints(hints);
  ir::verify(*out.graph); // the node rules once more, at sizes the fit never used
  const std::string at_one = symbolizer.differs_at_one(kept, fitted);
  out.holds_at_one = at_one.empty();
  if (!out.holds_at_one) log()->debug("dynamic shapes: a symbol at 1 changes the graph: {}", at_one);
  log()->debug("dynamic shapes: @{} traced {} times, {} symbols", out.graph->name(), out.traces, hints.size());
  return out;
}

} // namespace kiln
