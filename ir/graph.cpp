#include "ir/graph.h"

#include <algorithm>
#include <unordered_set>

namespace kiln::ir {

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool TensorType::operator==(const TensorType &o) const {
  if (dtype != o.dtype || IntArrayRef(shape) != IntArrayRef(o.shape) || sym != o.sym) return false;
  if (strides.has_value() != o.strides.has_value()) return false;
  return !strides || IntArrayRef(*strides) == IntArrayRef(*o.strides);
}

std::string TensorType::str() const {
  std::string s(short_name(dtype));
  if (sym.empty()) {
    s += shape_str(shape);
  } else {
    s += '[';
    for (size_t i = 0; i < sym.size(); ++i) s += (i ? ", " : "") + sym[i].str();
    s += ']';
  }
  if (strides) {
    s += '{';
    for (size_t i = 0; i < strides->size(); ++i) {
      if (i) s += ", ";
      s += std::to_string((*strides)[i]);
    }
    s += '}';
  }
  return s;
}

std::string_view Node::mnemonic() const {
  return kind_ == Kind::FusionGroup ? std::string_view("fusion_group") : info().mnemonic;
}

const AttrValue *Node::attr(std::string_view name) const {
  if (kind_ != Kind::Op) return nullptr;
  const auto &names = info().attr_names;
  for (size_t i = 0; i < names.size() && i < attrs_.size(); ++i)
    if (names[i] == name) return &attrs_[i];
  return nullptr;
}

// Fresh names depend only on the values a graph holds: next_id_ is always one
// past the highest numeric name among them, and a name is taken only while its
// value is in the graph (created and not erased). So a graph and its printed
// and re-parsed copy name new values alike, and kiln-opt run on a dump numbers
// values as the compiler did.
namespace {

// The number a name like "12" stands for, or -1 ("x", "007", "1e3").
int64_t numeric_name(const std::string &n) {
  if (n.empty() || n.size() > 15 || (n.size() > 1 && n[0] == '0')) return -1;
  int64_t v = 0;
  for (char c : n) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// A graph's taken names and its next fresh number (Graph::used_names_, next_id_).
void take_name(std::unordered_set<std::string> &used, int64_t &next_id, const std::string &n) {
  used.insert(n);
  next_id = std::max(next_id, numeric_name(n) + 1);
}

void release_name(std::unordered_set<std::string> &used, int64_t &next_id, const std::string &n) {
  used.erase(n);
  int64_t id = numeric_name(n);
  if (id < 0 || id + 1 != next_id) return;
  // The highest number left: scan down past the free ones, or recount if that is longer.
  next_id = id;
  for (size_t steps = 0; next_id > 0 && !used.count(std::to_string(next_id - 1)); ++steps) {
    if (steps > used.size()) {
      next_id = 0;
      for (const std::string &u : used) next_id = std::max(next_id, numeric_name(u) + 1);
      return;
    }
    --next_id;
  }
}

} // namespace

void Value::set_name(std::string n) {
  if (graph_) release_name(graph_->used_names_, graph_->next_id_, name_);
  name_ = std::move(n);
  if (graph_) take_name(graph_->used_names_, graph_->next_id_, name_);
}

std::string Graph::unique_name(const std::string &hint) {
  std::string base = hint;
  if (base.empty()) return std::to_string(next_id_); // free: above every numeric name taken
  std::string cand = base;
  for (int i = 1; used_names_.count(cand); ++i) cand = base + "_" + std::to_string(i);
  return cand;
}

Value *Graph::new_value(Value::Kind kind, TensorType type, std::string name) {
  auto v = std::make_unique<Value>();
  v->kind_ = kind;
  v->type_ = std::move(type);
  v->name_ = unique_name(name);
  v->graph_ = this;
  take_name(used_names_, next_id_, v->name_);
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value *Graph::add_input(TensorType type, std::string name) {
  Value *v = new_value(Value::Kind::Input, std::move(type), std::move(name));
  inputs_.push_back(v);
  return v;
}

Value *Graph::add_param(const Tensor &live, std::string name) {
  Value *v = new_value(Value::Kind::Param, TensorType::of(live), std::move(name));
  v->tensor_ = live;
  params_.push_back(v);
  return v;
}

Value *Graph::add_const(const Tensor &value, std::string name) {
  Value *v = new_value(Value::Kind::Const, TensorType::of(value), std::move(name));
  v->tensor_ = value;
  consts_.push_back(v);
  return v;
}

void Graph::bind_param(Value *param, const Tensor &live) {
  KILN_CHECK(param && param->kind_ == Value::Kind::Param && param->graph_ == this,
             "bind_param: not a parameter of graph @", name_);
  KILN_CHECK(live.defined(), "bind_param: %", param->name_, " bound to an undefined tensor");
  KILN_CHECK(live.dtype() == param->type_.dtype && live.sizes() == IntArrayRef(param->type_.shape),
             "bind_param: %", param->name_, " has type ", param->type_.str(), " but the tensor is ",
             TensorType::of(live).str());
  param->tensor_ = live;
}

Value *Graph::find_param(std::string_view name) const {
  for (Value *p : params_)
    if (p->name_ == name) return p;
  return nullptr;
}

std::vector<std::unique_ptr<Node>>::iterator Graph::find(const Node *n) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto &p) { return p.get() == n; });
  KILN_CHECK(it != nodes_.end(), "ir: node is not in graph @", name_);
  return it;
}

Node *Graph::create(OpId op, std::vector<Value *> operands, Attrs attrs,
                    const std::vector<TensorType> &result_types, Node *before) {
  memory_plan_.reset(); // the plan described the graph before this change
  auto n = std::make_unique<Node>();
  n->kind_ = Node::Kind::Op;
  n->op_ = op;
  n->operands_ = std::move(operands);
  n->attrs_ = std::move(attrs);
  n->graph_ = this;
  n->phase_ = before ? before->phase_ : append_phase_;
  for (size_t i = 0; i < result_types.size(); ++i) {
    Value *r = new_value(Value::Kind::Result, result_types[i], "");
    r->producer_ = n.get();
    r->result_index_ = unsigned(i);
    n->results_.push_back(r);
  }
  Node *raw = n.get();
  nodes_.insert(before ? find(before) : nodes_.end(), std::move(n));
  return raw;
}

Node *Graph::create_group(std::vector<Value *> operands, const std::vector<TensorType> &result_types,
                          Node *before) {
  memory_plan_.reset();
  Node *n = create(OpId{}, std::move(operands), {}, result_types, before);
  n->kind_ = Node::Kind::FusionGroup;
  n->body_ = std::make_unique<Graph>(name_ + ".group");
  for (Value *v : n->operands_) n->body_->add_input(v ? v->type() : TensorType{});
  return n;
}

void Graph::erase(Node *n) {
  for (Value *r : n->results_)
    KILN_CHECK(!has_uses(r), "ir: cannot erase ", n->mnemonic(), " while %", r->name(), " is still used");
  memory_plan_.reset();
  auto it = find(n);
  for (const Value *r : n->results_) release_name(used_names_, next_id_, r->name());
  nodes_.erase(it);
}

void Graph::move_before(Node *n, Node *before) {
  memory_plan_.reset();
  auto it = find(n);
  std::unique_ptr<Node> owned = std::move(*it);
  nodes_.erase(it);
  nodes_.insert(before ? find(before) : nodes_.end(), std::move(owned));
}

std::vector<Node *> Graph::nodes() const {
  std::vector<Node *> out;
  out.reserve(nodes_.size());
  for (const auto &n : nodes_) out.push_back(n.get());
  return out;
}

std::vector<Use> Graph::uses(const Value *v) const {
  std::vector<Use> out;
  for (const auto &n : nodes_)
    for (size_t i = 0; i < n->operands_.size(); ++i)
      if (n->operands_[i] == v) out.push_back({n.get(), i});
  for (size_t i = 0; i < outputs_.size(); ++i)
    if (outputs_[i] == v) out.push_back({nullptr, i});
  return out;
}

bool Graph::has_uses(const Value *v) const {
  for (const auto &n : nodes_)
    for (Value *o : n->operands_)
      if (o == v) return true;
  if (std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end()) return true;
  for (const WriteBack &w : write_backs_)
    if (w.value == v || w.target == v) return true;
  return false;
}

void Graph::replace_all_uses(Value *from, Value *to) {
  memory_plan_.reset();
  for (auto &n : nodes_)
    for (Value *&o : n->operands_)
      if (o == from) o = to;
  for (Value *&o : outputs_)
    if (o == from) o = to;
  for (WriteBack &w : write_backs_)
    if (w.value == from) w.value = to;
}

} // namespace kiln::ir

namespace kiln::ir {

void Node::set_operand(size_t i, Value *v) {
  operands_.at(i) = v;
  if (graph_) graph_->memory_plan_.reset();
}

} // namespace kiln::ir
