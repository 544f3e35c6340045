// The graph IR: an ordered list of nodes in SSA form.
//
//   graph @w1(%x: f32[4096, 1024]) params(%a: f32[1024], %b: f32[1024]) {
//     %0 = mul(%x, %a) : f32[4096, 1024]
//     %1 = add(%0, %b) {alpha = 1} : f32[4096, 1024]
//     %2 = gelu(%1) {approximate = "tanh"} : f32[4096, 1024]
//     return %2
//   }
//
// Values are produced once: by the graph (inputs, parameters, constants) or by
// a node. Parameters are tensors the traced function captured; they are bound
// by reference to live storage, never copied. Constants are small owned tensors.
// A FusionGroup node owns a body graph whose inputs are the group's operands.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "ir/memory_plan.h"
#include "ir/sym.h"
#include "runtime/op_registry.h"
#include "runtime/step_phase.h"
#include "runtime/tensor.h"

namespace kiln::ir {

// dtype + shape, and strides once the layout pass has decided them.
struct TensorType {
  DType dtype = kFloat32;
  Dims shape; // for a symbolic dim: its size in the traced call (the graph's symbol_hints)
  std::optional<Dims> strides;
  // Symbolic dims (issue 17): empty when every dim is the constant in `shape`;
  // else one expression per dim (a constant for a static one), printed in its
  // place: f32[s0, 768]. Such a type has no strides (yet).
  std::vector<SymExpr> sym;

  TensorType() = default;
  TensorType(DType d, Dims s, std::optional<Dims> st = std::nullopt, std::vector<SymExpr> symbolic_dims = {})
      : dtype(d), shape(std::move(s)), strides(std::move(st)), sym(std::move(symbolic_dims)) {}

  bool symbolic() const { return !sym.empty(); }

  static TensorType of(const Tensor &t) { return TensorType{t.dtype(), Dims(t.sizes()), std::nullopt}; }
  int64_t numel() const;
  bool operator==(const TensorType &o) const;
  std::string str() const; // "f32[4, 8]", "f32[4, 8]{8, 1}" with strides, "f32[s0, 2*s1]" symbolic
};

class Node;
class Graph;

class Value {
public:
  enum class Kind { Input, Param, Const, Result };

  Kind kind() const { return kind_; }
  const TensorType &type() const { return type_; }
  void set_type(TensorType t) { type_ = std::move(t); }
  // Printed as %name. Unique within its graph.
  const std::string &name() const { return name_; }
  // Takes the name in its graph (and frees the old one), so that unique_name
  // does not hand it out while the value is in the graph.
  void set_name(std::string n);
  // The producing node for Result values; nullptr otherwise.
  Node *producer() const { return producer_; }
  unsigned result_index() const { return result_index_; }
  // Param: the live captured tensor. Const: the owned value. Undefined otherwise.
  const Tensor &tensor() const { return tensor_; }
  Graph *graph() const { return graph_; }

private:
  friend class Graph;
  friend class Node;
  Kind kind_ = Kind::Input;
  TensorType type_;
  std::string name_;
  Node *producer_ = nullptr;
  unsigned result_index_ = 0;
  Tensor tensor_;
  Graph *graph_ = nullptr;
};

class Node {
public:
  enum class Kind { Op, FusionGroup };

  Kind kind() const { return kind_; }
  // For Op nodes; FusionGroup nodes have no OpId.
  OpId op() const { return op_; }
  const OpInfo &info() const { return op_info(op_); }
  // "add", or "fusion_group" for groups.
  std::string_view mnemonic() const;
  // nullptr marks an absent optional operand (e.g. linear without bias).
  const std::vector<Value *> &operands() const { return operands_; }
  Value *operand(size_t i) const { return operands_.at(i); }
  // Drops the graph's memory plan (it described the old operands).
  void set_operand(size_t i, Value *v);
  const Attrs &attrs() const { return attrs_; }
  Attrs &attrs() { return attrs_; }
  // The attribute named `name` (per ops.def), or nullptr.
  const AttrValue *attr(std::string_view name) const;
  const std::vector<Value *> &results() const { return results_; }
  Value *result(size_t i = 0) const { return results_.at(i); }
  Graph *body() const { return body_.get(); }
  Graph *graph() const { return graph_; }
  // The part of a training step it came from (the printer marks the changes).
  StepPhase phase() const { return phase_; }
  void set_phase(StepPhase p) { phase_ = p; }

private:
  friend class Graph;
  Kind kind_ = Kind::Op;
  StepPhase phase_ = StepPhase::Forward;
  OpId op_{};
  std::vector<Value *> operands_;
  Attrs attrs_;
  std::vector<Value *> results_;
  std::unique_ptr<Graph> body_;
  Graph *graph_ = nullptr;
};

// Where a value is read: node `user` at operand `index`, or a graph output.
struct Use {
  Node *user; // nullptr for a graph output
  size_t index;
};

// A mutated graph input or parameter: after the graph runs, `value` is written
// back into `target` (functionalized in-place ops on inputs and weights).
struct WriteBack {
  Value *target;
  Value *value;
};

class Graph {
public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  const std::string &name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // The values of the symbols s0, s1, ... in the traced call, which symbolic
  // types' `shape` holds: printed `symbols(s0 = 4, ...)` in a top-level graph's
  // header. Empty when no type is symbolic; fusion bodies use their graph's.
  const std::vector<int64_t> &symbol_hints() const { return symbol_hints_; }
  void set_symbol_hints(std::vector<int64_t> hints) { symbol_hints_ = std::move(hints); }

  // ---- values owned by the graph
  Value *add_input(TensorType type, std::string name = "");
  Value *add_param(const Tensor &live, std::string name = "");
  Value *add_const(const Tensor &value, std::string name = "");
  const std::vector<Value *> &inputs() const { return inputs_; }
  const std::vector<Value *> &params() const { return params_; }
  const std::vector<Value *> &consts() const { return consts_; }
  // Binds a parameter to live storage (a parsed graph's params hold META tensors
  // of their printed type). `live` must have the parameter's dtype and shape.
  void bind_param(Value *param, const Tensor &live);
  // The parameter named `name`, or nullptr.
  Value *find_param(std::string_view name) const;

  // ---- nodes, in execution order
  // Appends (or inserts before `before`) an op node with results of `result_types`.
  // Its phase: `before`'s, or (appended) the graph's append phase.
  Node *create(OpId op, std::vector<Value *> operands, Attrs attrs, const std::vector<TensorType> &result_types,
               Node *before = nullptr);
  // A fusion group reading `operands`; its body gets one input per operand.
  Node *create_group(std::vector<Value *> operands, const std::vector<TensorType> &result_types,
                     Node *before = nullptr);
  // The phase of appended nodes from now on (the tracer's and the parser's).
  void set_append_phase(StepPhase p) { append_phase_ = p; }
  // Removes a node whose results are unused (throws kiln::Error otherwise).
  void erase(Node *n);
  // Moves `n` to just before `before` (or to the end).
  void move_before(Node *n, Node *before);
  std::vector<Node *> nodes() const;
  size_t num_nodes() const { return nodes_.size(); }

  // ---- outputs and effects
  void set_outputs(std::vector<Value *> outs) {
    outputs_ = std::move(outs);
    memory_plan_.reset();
  }
  const std::vector<Value *> &outputs() const { return outputs_; }
  std::vector<Value *> &outputs() { return outputs_; }
  void add_write_back(Value *target, Value *value) {
    write_backs_.push_back({target, value});
    memory_plan_.reset();
  }
  const std::vector<WriteBack> &write_backs() const { return write_backs_; }
  std::vector<WriteBack> &write_backs() { return write_backs_; }

  // ---- the memory plan (plan-memory); printed after `return`. Creating,
  // erasing or moving nodes, replacing uses, setting operands or outputs and
  // adding write-backs drop it (it described the graph before); so does the
  // pass manager after any other pass that reports a change.
  const std::optional<MemoryPlan> &memory_plan() const { return memory_plan_; }
  void set_memory_plan(std::optional<MemoryPlan> plan) { memory_plan_ = std::move(plan); }

  // ---- use-def
  std::vector<Use> uses(const Value *v) const;
  bool has_uses(const Value *v) const;
  // Replaces every use of `from` (node operands, outputs, write-backs) by `to`.
  void replace_all_uses(Value *from, Value *to);

  // A fresh unique value name: for results unless given, one past the highest
  // numeric name the graph holds, so that fresh names depend only on the graph
  // (a printed and re-parsed copy names new values alike; see graph.cpp).
  std::string unique_name(const std::string &hint);

private:
  friend class Value;
  friend class Node;
  Value *new_value(Value::Kind kind, TensorType type, std::string name);
  std::vector<std::unique_ptr<Node>>::iterator find(const Node *n);

  std::string name_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<Value *> inputs_, params_, consts_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value *> outputs_;
  std::vector<WriteBack> write_backs_;
  std::unordered_set<std::string> used_names_;
  std::optional<MemoryPlan> memory_plan_;
  StepPhase append_phase_ = StepPhase::Forward;
  std::vector<int64_t> symbol_hints_;
  int64_t next_id_ = 0;
};

} // namespace kiln::ir
