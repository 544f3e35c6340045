// The verifier. Structural checks first (they make the graph safe to walk),
// then each op's shape/dtype rule: the op's uniform adapter run on META
// tensors of the operand types, compared with the recorded result types.
#include "ir/verifier.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/op_signature.h"
#include "ir/sym_infer.h"
#include "ir/text.h"
#include "runtime/trace_hook.h"

namespace kiln::ir {

namespace {

// Appends rather than `"%" + s`: GCC 12 warns (-Wrestrict) on the latter.
std::string ref(const Value *v) {
  if (!v) return "none";
  std::string s = "%";
  s += text::name(v->name());
  return s;
}

// "%3 = add(%1, %2)": how a node is named in messages.
std::string node_str(const Node &n) {
  std::string s;
  for (size_t i = 0; i < n.results().size(); ++i) s += (i ? ", " : "") + ref(n.results()[i]);
  if (!s.empty()) s += " = ";
  s += std::string(n.mnemonic()) + "(";
  for (size_t i = 0; i < n.operands().size(); ++i) s += (i ? ", " : "") + ref(n.operands()[i]);
  return s + ")";
}

bool same_shape_and_dtype(const TensorType &a, const TensorType &b) {
  return a.dtype == b.dtype && IntArrayRef(a.shape) == IntArrayRef(b.shape);
}

class Verifier {
public:
  Verifier(const Graph &g, std::string path, const std::vector<int64_t> &hints)
      : g_(g), path_(std::move(path)), hints_(hints) {}

  void run() {
    check_graph_values();
    for (const Node *n : g_.nodes()) check_node(*n);
    check_outputs();
    check_write_backs();
  }

private:
  [[noreturn]] void fail(const std::string &msg, const Node *n = nullptr) const {
    throw VerifyError("verify: @" + path_ + ": " + msg, n);
  }
  [[noreturn]] void fail(const Node &n, const std::string &msg) const { fail(node_str(n) + ": " + msg, &n); }

  void add_defined(const Value *v) {
    if (!names_.insert(v->name()).second) fail("value name " + ref(v) + " is defined twice");
    defined_.insert(v);
    if (v->type().symbolic()) check_symbolic(v);
  }

  // A symbolic type: one expression per dim, each naming only the graph's
  // symbols and giving `shape` at their traced values; no strides yet.
  void check_symbolic(const Value *v) const {
    const TensorType &t = v->type();
    const std::string what = ref(v) + ": " + t.str();
    if (t.sym.size() != t.shape.size())
      fail(what + " has " + std::to_string(t.sym.size()) + " symbolic dims for " + std::to_string(t.shape.size()) +
           " sizes");
    if (t.strides) fail(what + " has strides, which a symbolic type cannot have yet");
    if (v->kind() == Value::Kind::Param || v->kind() == Value::Kind::Const)
      fail(what + ": a parameter or constant cannot have symbolic dims");
    for (size_t i = 0; i < t.sym.size(); ++i) {
      if (t.sym[i].max_symbol() >= int(hints_.size()))
        fail(what + ": s" + std::to_string(t.sym[i].max_symbol()) + " is not among the graph's " +
             std::to_string(hints_.size()) + " symbols");
      int64_t size = 0;
      try {
        size = t.sym[i].evaluate(hints_);
      } catch (const Error &e) {
        fail(what + ": " + e.what());
      }
      if (size != t.shape[int64_t(i)])
        fail(what + ": dim " + std::to_string(i) + " is " + std::to_string(size) + " at the symbols' values, but " +
             std::to_string(t.shape[int64_t(i)]) + " in the shape");
    }
  }

  void check_list(const std::vector<Value *> &vs, Value::Kind kind, const char *what) {
    for (const Value *v : vs) {
      if (!v) fail(std::string("null ") + what);
      if (v->graph() != &g_) fail(std::string(what) + " " + ref(v) + " belongs to another graph");
      if (v->kind() != kind) fail(std::string(what) + " " + ref(v) + " has the wrong value kind");
      add_defined(v);
    }
  }

  void check_graph_values() {
    check_list(g_.inputs(), Value::Kind::Input, "input");
    check_list(g_.params(), Value::Kind::Param, "parameter");
    check_list(g_.consts(), Value::Kind::Const, "constant");
    for (const Value *v : g_.params()) check_tensor_matches(v, "parameter");
    for (const Value *v : g_.consts()) check_tensor_matches(v, "constant");
  }

  void check_tensor_matches(const Value *v, const char *what) const {
    const Tensor &t = v->tensor();
    if (!t.defined()) fail(std::string(what) + " " + ref(v) + " has no tensor");
    if (!same_shape_and_dtype(TensorType::of(t), v->type()))
      fail(std::string(what) + " " + ref(v) + " has type " + v->type().str() + " but its tensor is " +
           TensorType::of(t).str());
  }

  // Why `v` may not be read here, or "" when it may.
  std::string operand_problem(const Value *v) const {
    if (defined_.count(v)) return "";
    if (v->graph() != &g_) {
      return is_body_ ? "fusion body is not closed: reads " + ref(v) + " from another graph"
                      : "operand " + ref(v) + " belongs to another graph";
    }
    return "use of " + ref(v) + " before its definition";
  }

  void check_node(const Node &n) {
    if (n.graph() != &g_) fail(n, "node belongs to another graph");
    for (const Value *v : n.operands()) {
      if (!v) continue;
      if (std::string p = operand_problem(v); !p.empty()) fail(n, p);
    }
    for (size_t i = 0; i < n.results().size(); ++i) {
      const Value *r = n.results()[i];
      if (!r || r->graph() != &g_ || r->producer() != &n || r->result_index() != i || r->kind() != Value::Kind::Result)
        fail(n, "result " + std::to_string(i) + " is not linked to its node");
    }
    if (n.kind() == Node::Kind::FusionGroup) check_group(n);
    else check_op(n);
    for (const Value *r : n.results()) add_defined(r);
  }

  void check_op(const Node &n) {
    const OpInfo &info = n.info();
    if (n.attrs().size() != info.attr_names.size())
      fail(n, std::to_string(info.attr_names.size()) + " attributes expected, got " + std::to_string(n.attrs().size()));
    Arity a = op_arity(n.op());
    if (n.operands().size() < a.min || n.operands().size() > a.max)
      fail(n, "wrong operand count " + std::to_string(n.operands().size()));
    if (n.results().empty()) fail(n, "an op node needs at least one result");
    check_inferred_types(n, a);
  }

  // Whether `v` is a wrapped number: a wrapped constant, or a body input that
  // receives one (the executors pass the constant itself into the body).
  bool is_wrapped(const Value *v) const {
    if (v->kind() == Value::Kind::Const && v->tensor().defined()) return v->tensor().impl().wrapped_number;
    return wrapped_inputs_.count(v) > 0;
  }

  // A META tensor standing for `v` with `sizes` (keeping the wrapped-number
  // flag, which changes type promotion).
  Tensor meta_of(const Value *v, IntArrayRef sizes) const {
    Tensor t = detail::make_tensor(sizes, v->type().dtype, /*meta=*/true);
    t.impl().wrapped_number = is_wrapped(v);
    return t;
  }

  // The sizes of `v`'s type with the symbols at `values`; nullopt when a dim
  // comes out negative there.
  static std::optional<Dims> sizes_at(const Value *v, const std::vector<int64_t> &values) {
    const TensorType &t = v->type();
    if (!t.symbolic()) return t.shape;
    std::vector<int64_t> sizes = evaluate_dims(t.sym, values);
    if (std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s < 0; })) return std::nullopt;
    return Dims(sizes);
  }

  void check_inferred_types(const Node &n, Arity a) {
    // Factories have no tensor operand to make the run META: they would allocate.
    if (n.info().kind == OpKind::Factory) return;
    check_types_at(n, a, hints_);
    // A symbolic type claims its dims for every value of the symbols: the rule
    // again with each symbol moved by a different amount (never to 0 or 1,
    // which broadcasting treats apart). A rule that refuses those sizes holds
    // only where the symbols are related (s0 == s1 for an add): a guard's
    // business, not checked here.
    bool symbolic = false;
    for (const Value *v : n.operands()) symbolic |= v && v->type().symbolic();
    for (const Value *v : n.results()) symbolic |= v->type().symbolic();
    if (!symbolic) return;
    std::vector<int64_t> moved = hints_;
    for (size_t k = 0; k < moved.size(); ++k) moved[k] += 3 + 2 * int64_t(k);
    check_types_at(n, a, moved);
  }

  // The op's rule run on META tensors with the operands' sizes at `values`,
  // against the results' types there.
  void check_types_at(const Node &n, Arity a, const std::vector<int64_t> &values) {
    const bool traced = &values == &hints_;
    std::vector<Tensor> out;
    try {
      std::vector<Tensor> in;
      for (const Value *v : n.operands()) {
        if (!v) {
          in.emplace_back();
          continue;
        }
        std::optional<Dims> sizes = traced ? std::optional<Dims>(v->type().shape) : sizes_at(v, values);
        if (!sizes) return;
        in.push_back(meta_of(v, *sizes));
      }
      // Absent trailing optionals (linear without bias) read as undefined tensors.
      if (a.max != kVariadic)
        while (in.size() < a.max) in.emplace_back();
      detail::TracingOff off;
      out = run_op(n.op(), in, traced ? n.attrs() : attrs_at(n, values));
    } catch (const TraceError &) {
      return; // the rule reads data: nothing to check without values
    } catch (const Error &e) {
      // See check_inferred_types. A view, reshape or expand reads its sizes from
      // its own result type: if they do not hold away from the traced call,
      // the type is wrong.
      if (!traced && !(sizes_in_attrs(n.op()) && n.result()->type().symbolic())) return;
      fail(n, e.what());
    } catch (const std::exception &e) {
      if (!traced) return;
      fail(n, std::string("the op's shape rule failed: ") + e.what());
    }
    if (out.size() != n.results().size())
      fail(n, std::to_string(n.results().size()) + " results, but the op gives " + std::to_string(out.size()));
    for (size_t i = 0; i < out.size(); ++i) {
      const TensorType &got = n.results()[i]->type();
      std::optional<Dims> sizes = traced ? std::optional<Dims>(got.shape) : sizes_at(n.results()[i], values);
      if (out[i].dtype() == got.dtype && sizes && IntArrayRef(*sizes) == out[i].sizes()) continue;
      std::string where;
      for (size_t k = 0; !traced && k < values.size(); ++k) {
        where += k ? ", s" : " at s"; // appended: a temporary string + here trips GCC 12's -Wrestrict
        where += std::to_string(k);
        where += " = ";
        where += std::to_string(values[k]);
      }
      fail(n, (out.size() > 1 ? "result " + std::to_string(i) + " type " : "result type ") + got.str() +
                  " does not match the inferred " + TensorType::of(out[i]).str() + where);
    }
  }

  void check_group(const Node &n) {
    const Graph *body = n.body();
    if (!body) fail(n, "fusion group without a body");
    if (body->inputs().size() != n.operands().size())
      fail(n, "body has " + std::to_string(body->inputs().size()) + " inputs for " +
                  std::to_string(n.operands().size()) + " operands");
    for (size_t i = 0; i < n.operands().size(); ++i) {
      const Value *op = n.operands()[i];
      if (!op) fail(n, "fusion group operand " + std::to_string(i) + " is none");
      if (!(body->inputs()[i]->type() == op->type()))
        fail(n, "body input " + ref(body->inputs()[i]) + " has type " + body->inputs()[i]->type().str() +
                    " but operand " + ref(op) + " is " + op->type().str());
    }
    if (!body->symbol_hints().empty()) fail(n, "a fusion body has symbols of its own; it uses its graph's");
    Verifier inner(*body, path_ + "/" + body->name(), hints_);
    inner.is_body_ = true;
    for (size_t i = 0; i < n.operands().size(); ++i)
      if (is_wrapped(n.operands()[i])) inner.wrapped_inputs_.insert(body->inputs()[i]);
    try {
      inner.run();
    } catch (const VerifyError &e) {
      if (e.node()) throw;
      throw VerifyError(e.what(), &n); // a body-level problem: point at the group
    }
    if (body->outputs().size() != n.results().size())
      fail(n, "body returns " + std::to_string(body->outputs().size()) + " values for " +
                  std::to_string(n.results().size()) + " results");
    for (size_t i = 0; i < n.results().size(); ++i)
      if (!(body->outputs()[i]->type() == n.results()[i]->type()))
        fail(n, "result " + ref(n.results()[i]) + " has type " + n.results()[i]->type().str() +
                    " but the body returns " + body->outputs()[i]->type().str());
  }

  void check_outputs() const {
    for (const Value *v : g_.outputs()) {
      if (!v) fail("returns none");
      if (!defined_.count(v)) fail("dangling output " + ref(v) + ": not defined in this graph");
    }
  }

  void check_write_backs() const {
    for (const WriteBack &w : g_.write_backs()) {
      if (!w.target || !w.value) fail("write-back with a null value");
      if (!defined_.count(w.target) || (w.target->kind() != Value::Kind::Input && w.target->kind() != Value::Kind::Param))
        fail("write-back target " + ref(w.target) + " is not an input or parameter of this graph");
      if (!defined_.count(w.value)) fail("dangling write-back value " + ref(w.value));
      if (!same_shape_and_dtype(w.target->type(), w.value->type()))
        fail("write-back " + ref(w.target) + " <- " + ref(w.value) + ": type " + w.value->type().str() +
             " does not match " + w.target->type().str());
    }
  }

  const Graph &g_;
  std::string path_;
  bool is_body_ = false;
  std::unordered_set<const Value *> defined_;
  std::unordered_set<const Value *> wrapped_inputs_; // body inputs that receive wrapped numbers
  const std::vector<int64_t> &hints_;
  std::unordered_set<std::string> names_;
};

} // namespace

void verify(const Graph &g) {
  Verifier(g, g.name(), g.symbol_hints()).run();
  try {
    verify_memory_plan(g);
  } catch (const VerifyError &) {
    throw;
  } catch (const Error &e) {
    throw VerifyError(e.what(), nullptr);
  }
}

} // namespace kiln::ir
