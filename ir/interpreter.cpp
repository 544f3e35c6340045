#include "ir/interpreter.h"

#include <unordered_map>

#include "ir/sym_infer.h"
#include "runtime/autograd.h"
#include "runtime/ops.h"

namespace kiln::ir {

namespace {

// The symbols' values bound from the inputs (a top-level graph), or the
// caller's (a fusion body, which uses its graph's symbols); the inputs checked
// against the graph's input types at those values.
std::vector<int64_t> check_inputs(const Graph &g, const std::vector<Tensor> &inputs,
                                  const std::vector<int64_t> *outer) {
  const auto &decl = g.inputs();
  KILN_CHECK(inputs.size() == decl.size(), "interpret: graph @", g.name(), " takes ", decl.size(),
             " inputs, got ", inputs.size());
  std::vector<IntArrayRef> sizes;
  for (size_t i = 0; i < decl.size(); ++i) {
    const Tensor &t = inputs[i];
    const TensorType &want = decl[i]->type();
    KILN_CHECK(t.defined(), "interpret: input ", i, " (%", decl[i]->name(), ") of @", g.name(),
               " is an undefined tensor");
    const bool sizes_ok = want.symbolic() || t.sizes() == IntArrayRef(want.shape);
    KILN_CHECK(t.dtype() == want.dtype && sizes_ok, "interpret: input ", i, " (%", decl[i]->name(), ") of @",
               g.name(), " must be ", want.str(), ", got ", TensorType::of(t).str());
    sizes.push_back(t.sizes());
  }
  std::vector<int64_t> values = outer ? *outer : bind_symbols(g, sizes);
  for (size_t i = 0; i < decl.size(); ++i) {
    const TensorType &want = decl[i]->type();
    if (!want.symbolic()) continue;
    for (size_t d = 0; d < want.sym.size(); ++d)
      KILN_CHECK(want.sym[d].evaluate(values) == sizes[i][int64_t(d)], "interpret: input ", i, " (%",
                 decl[i]->name(), ") of @", g.name(), " must be ", want.str(), ", got ",
                 TensorType::of(inputs[i]).str());
  }
  return values;
}

class Interpreter {
public:
  explicit Interpreter(const Graph &g) : g_(g) {}

  std::vector<Tensor> run(const std::vector<Tensor> &inputs, const std::vector<int64_t> *outer) {
    // A graph records no backward (a traced training step holds its own), and
    // its write-backs may update parameters that require grad.
    NoGradGuard no_grad;
    values_ = check_inputs(g_, inputs, outer);
    for (size_t i = 0; i < inputs.size(); ++i) env_[g_.inputs()[i]] = inputs[i];
    for (const Value *p : g_.params()) env_[p] = p->tensor();
    for (const Value *c : g_.consts()) env_[c] = c->tensor();
    for (const Node *n : g_.nodes()) run_node(*n);
    std::vector<Tensor> outs;
    for (const Value *v : g_.outputs()) outs.push_back(owned(get(v)));
    write_back();
    return outs;
  }

private:
  // Constants belong to the graph and are shared by every run; an output the
  // caller may write to (eager's results are its own) must not be one.
  Tensor owned(const Tensor &t) const {
    for (const Value *c : g_.consts())
      if (t.is_alias_of(c->tensor())) return t.clone();
    return t;
  }

  const Tensor &get(const Value *v) const {
    auto it = env_.find(v);
    KILN_CHECK(it != env_.end(), "interpret: @", g_.name(), ": %", v->name(), " is used before it is defined");
    return it->second;
  }

  void run_node(const Node &n) {
    std::vector<Tensor> args;
    for (const Value *v : n.operands()) args.push_back(v ? get(v) : Tensor());
    std::vector<Tensor> results = n.kind() == Node::Kind::FusionGroup ? Interpreter(*n.body()).run(args, &values_)
                                                                      : run_op(n.op(), args, attrs_at(n, values_));
    KILN_CHECK(results.size() == n.results().size(), "interpret: @", g_.name(), ": ", n.mnemonic(), " returned ",
               results.size(), " results, the graph expects ", n.results().size());
    for (size_t i = 0; i < results.size(); ++i) env_[n.result(i)] = results[i];
  }

  // All values are read before any target is written: a write-back value may
  // be a view of another target.
  void write_back() {
    std::vector<std::pair<Tensor, Tensor>> todo;
    for (const WriteBack &w : g_.write_backs()) {
      Tensor value = get(w.value);
      if (value.is_same(get(w.target))) continue;
      todo.emplace_back(get(w.target), value.is_alias_of(get(w.target)) ? value.clone() : value);
    }
    for (auto &[target, value] : todo) target.copy_(value);
  }

  const Graph &g_;
  std::unordered_map<const Value *, Tensor> env_;
  std::vector<int64_t> values_; // the symbols' values in this call
};

} // namespace

std::vector<Tensor> interpret(const Graph &g, const std::vector<Tensor> &inputs) {
  return Interpreter(g).run(inputs, nullptr);
}

std::vector<Tensor> interpret_body(const Graph &body, const std::vector<Tensor> &inputs,
                                   const std::vector<int64_t> &values) {
  return Interpreter(body).run(inputs, &values);
}

} // namespace kiln::ir
