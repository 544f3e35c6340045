// Structural hash and equality. Values are numbered canonically (inputs,
// params, consts, then node results in order), so names never matter; graph
// names do not either. Constants compare by value (bitwise), parameters by
// position and type (they are bound to live storage, not baked in).
#include "ir/hash.h"

#include <cmath>
#include <cstring>
#include <unordered_map>

namespace kiln::ir {

namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  // splitmix64 finalizer over the combined state: order-sensitive and well spread.
  uint64_t z = h ^ (x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Bit patterns, with every NaN folded into one: the text form keeps no NaN
// payload, and a NaN constant or attribute should equal itself.
uint64_t bits(double d) {
  if (std::isnan(d)) return 0x7ff8000000000000ull;
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

uint64_t element_bits(DType dt, const char *p) {
  switch (dt) {
  case DType::Bool: return *reinterpret_cast<const bool *>(p);
  case DType::Int32: return uint64_t(int64_t(*reinterpret_cast<const int32_t *>(p)));
  case DType::UInt8: return *reinterpret_cast<const uint8_t *>(p);
  case DType::Int8: return uint64_t(int64_t(*reinterpret_cast<const int8_t *>(p)));
  case DType::Int16: return uint64_t(int64_t(*reinterpret_cast<const int16_t *>(p)));
  case DType::Int64: return uint64_t(*reinterpret_cast<const int64_t *>(p));
  case DType::Float32: {
    float f = *reinterpret_cast<const float *>(p);
    if (std::isnan(f)) return 0x7fc00000u;
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  }
  case DType::Float64: return bits(*reinterpret_cast<const double *>(p));
  case DType::Float16:
  case DType::BFloat16: {
    uint16_t u;
    std::memcpy(&u, p, sizeof u);
    const bool nan = dt == DType::Float16 ? (u & 0x7FFFu) > 0x7C00u : (u & 0x7FFFu) > 0x7F80u;
    return nan ? 0x7fc00000u : u;
  }
  }
  return 0;
}

uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; ++i) h = mix(h, b[i]);
  return h;
}

uint64_t hash_type(uint64_t h, const TensorType &t) {
  h = mix(h, uint64_t(t.dtype));
  h = mix(h, t.shape.size());
  for (int64_t s : t.shape) h = mix(h, uint64_t(s));
  h = mix(h, t.sym.size());
  for (const SymExpr &e : t.sym) {
    const std::string s = e.str();
    h = hash_bytes(h, s.data(), s.size());
  }
  h = mix(h, t.strides.has_value());
  if (t.strides)
    for (int64_t s : *t.strides) h = mix(h, uint64_t(s));
  return h;
}

uint64_t hash_attr(uint64_t h, const AttrValue &a) {
  const auto &v = a.variant();
  h = mix(h, v.index());
  if (auto *i = std::get_if<int64_t>(&v)) return mix(h, uint64_t(*i));
  if (auto *d = std::get_if<double>(&v)) return mix(h, bits(*d));
  if (auto *b = std::get_if<bool>(&v)) return mix(h, *b);
  if (auto *l = std::get_if<std::vector<int64_t>>(&v)) {
    h = mix(h, l->size());
    for (int64_t x : *l) h = mix(h, uint64_t(x));
    return h;
  }
  if (auto *s = std::get_if<std::string>(&v)) return hash_bytes(mix(h, s->size()), s->data(), s->size());
  if (auto *t = std::get_if<DType>(&v)) return mix(h, uint64_t(*t));
  return h;
}

// Doubles compare by bits (NaNs folded) so that a nan attribute equals itself.
bool attr_equal(const AttrValue &a, const AttrValue &b) {
  auto *x = std::get_if<double>(&a.variant());
  auto *y = std::get_if<double>(&b.variant());
  if (x && y) return bits(*x) == bits(*y);
  return a == b;
}

// A constant's elements in row-major order, whatever its strides.
template <class F> void for_each_element(const Tensor &t, F &&f) {
  if (!t.defined() || t.is_meta()) return;
  const char *base = static_cast<const char *>(t.raw_data());
  const int64_t item = int64_t(t.element_size());
  std::vector<int64_t> idx(size_t(t.dim()), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    f(element_bits(t.dtype(), base + off * item));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.sizes()[d]) break;
      idx[d] = 0;
    }
  }
}

uint64_t hash_const(uint64_t h, const Value *c) {
  const Tensor &t = c->tensor();
  h = mix(h, t.defined() && t.impl().wrapped_number);
  for_each_element(t, [&](uint64_t e) { h = mix(h, e); });
  return h;
}

bool const_equal(const Value *a, const Value *b) {
  const Tensor &x = a->tensor(), &y = b->tensor();
  if (x.defined() != y.defined()) return false;
  if (!x.defined()) return true;
  if (x.impl().wrapped_number != y.impl().wrapped_number || x.is_meta() != y.is_meta()) return false;
  std::vector<uint64_t> bx, by;
  for_each_element(x, [&](uint64_t e) { bx.push_back(e); });
  for_each_element(y, [&](uint64_t e) { by.push_back(e); });
  return bx == by;
}

uint64_t graph_hash(const Graph &g);

uint64_t node_structure_hash(uint64_t h, const Node &n) {
  h = mix(h, uint64_t(n.kind()));
  if (n.kind() == Node::Kind::Op) h = mix(h, uint64_t(n.op()));
  h = mix(h, n.attrs().size());
  for (const AttrValue &a : n.attrs()) h = hash_attr(h, a);
  h = mix(h, n.results().size());
  for (const Value *r : n.results()) h = hash_type(h, r->type());
  if (n.body()) h = mix(h, graph_hash(*n.body()));
  return h;
}

class Numbering {
public:
  explicit Numbering(const Graph &g) {
    for (const Value *v : g.inputs()) add(v);
    for (const Value *v : g.params()) add(v);
    for (const Value *v : g.consts()) add(v);
    for (const Node *n : g.nodes())
      for (const Value *r : n->results()) add(r);
  }
  // Values from outside the graph (a malformed graph) all get one id.
  uint64_t id(const Value *v) const {
    if (!v) return ~uint64_t(0);
    auto it = ids_.find(v);
    return it == ids_.end() ? ~uint64_t(1) : it->second;
  }

private:
  void add(const Value *v) { ids_.emplace(v, ids_.size()); }
  std::unordered_map<const Value *, uint64_t> ids_;
};

uint64_t graph_hash(const Graph &g) {
  Numbering num(g);
  uint64_t h = mix(0, g.inputs().size());
  for (const Value *v : g.inputs()) h = hash_type(h, v->type());
  h = mix(h, g.params().size());
  for (const Value *v : g.params()) h = hash_type(h, v->type());
  h = mix(h, g.consts().size());
  for (const Value *v : g.consts()) h = hash_const(hash_type(h, v->type()), v);
  h = mix(h, g.num_nodes());
  for (const Node *n : g.nodes()) {
    h = node_structure_hash(h, *n);
    h = mix(h, n->operands().size());
    for (const Value *o : n->operands()) h = mix(h, num.id(o));
  }
  h = mix(h, g.outputs().size());
  for (const Value *v : g.outputs()) h = mix(h, num.id(v));
  h = mix(h, g.write_backs().size());
  for (const WriteBack &w : g.write_backs()) h = mix(mix(h, num.id(w.target)), num.id(w.value));
  return h;
}

// Equality: walk both graphs in step, mapping a's values to b's.
class Matcher {
public:
  bool graphs(const Graph &a, const Graph &b) {
    if (!lists(a.inputs(), b.inputs(), false) || !lists(a.params(), b.params(), false) ||
        !lists(a.consts(), b.consts(), true) || a.num_nodes() != b.num_nodes())
      return false;
    auto na = a.nodes(), nb = b.nodes();
    for (size_t i = 0; i < na.size(); ++i)
      if (!nodes(*na[i], *nb[i])) return false;
    if (!refs(a.outputs(), b.outputs()) || a.write_backs().size() != b.write_backs().size()) return false;
    for (size_t i = 0; i < a.write_backs().size(); ++i)
      if (!same(a.write_backs()[i].target, b.write_backs()[i].target) ||
          !same(a.write_backs()[i].value, b.write_backs()[i].value))
        return false;
    return true;
  }

private:
  bool lists(const std::vector<Value *> &a, const std::vector<Value *> &b, bool consts) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!(a[i]->type() == b[i]->type())) return false;
      if (consts && !const_equal(a[i], b[i])) return false;
      map_[a[i]] = b[i];
    }
    return true;
  }
  bool same(const Value *a, const Value *b) const {
    if (!a || !b) return a == b;
    auto it = map_.find(a);
    return it != map_.end() && it->second == b;
  }
  bool refs(const std::vector<Value *> &a, const std::vector<Value *> &b) const {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same(a[i], b[i])) return false;
    return true;
  }
  bool nodes(const Node &a, const Node &b) {
    if (a.kind() != b.kind() || (a.kind() == Node::Kind::Op && a.op() != b.op())) return false;
    if (a.attrs().size() != b.attrs().size() || a.results().size() != b.results().size()) return false;
    for (size_t i = 0; i < a.attrs().size(); ++i)
      if (!attr_equal(a.attrs()[i], b.attrs()[i])) return false;
    if (!refs(a.operands(), b.operands())) return false;
    if (bool(a.body()) != bool(b.body())) return false;
    if (a.body() && !Matcher().graphs(*a.body(), *b.body())) return false;
    for (size_t i = 0; i < a.results().size(); ++i) {
      if (!(a.results()[i]->type() == b.results()[i]->type())) return false;
      map_[a.results()[i]] = b.results()[i];
    }
    return true;
  }
  std::unordered_map<const Value *, const Value *> map_;
};

} // namespace

uint64_t structural_hash(const Graph &g) { return graph_hash(g); }

bool structurally_equal(const Graph &a, const Graph &b) { return Matcher().graphs(a, b); }

uint64_t node_hash(const Node &n) {
  uint64_t h = node_structure_hash(0x6b696c6eull, n);
  h = mix(h, n.operands().size());
  for (const Value *o : n.operands()) h = o ? hash_type(h, o->type()) : mix(h, 0xdead);
  return h;
}

} // namespace kiln::ir
