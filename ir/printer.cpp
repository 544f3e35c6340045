// The text form of a graph. Everything the parser needs is printed (types,
// strides, constant values, every attribute), so parse(print(g)) is exact.
#include "ir/printer.h"

#include <ostream>
#include <sstream>

#include "ir/text.h"

namespace kiln::ir {

namespace {

// Appends rather than `"%" + s`: GCC 12 warns (-Wrestrict) on the latter.
std::string value_ref(const Value *v) {
  if (!v) return "none";
  std::string s = "%";
  s += text::name(v->name());
  return s;
}

std::string join_ints(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string attr_str(const AttrValue &a) {
  const auto &v = a.variant();
  if (std::holds_alternative<std::monostate>(v)) return "none";
  if (auto *i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto *d = std::get_if<double>(&v)) return text::format_double(*d);
  if (auto *b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (auto *l = std::get_if<std::vector<int64_t>>(&v)) return join_ints(*l);
  if (auto *s = std::get_if<std::string>(&v)) return text::quoted(*s);
  return std::string(short_name(std::get<DType>(v)));
}

// One element of a constant, at byte address `p`.
std::string element_str(DType dt, const char *p) {
  switch (dt) {
  case DType::Bool: return *reinterpret_cast<const bool *>(p) ? "true" : "false";
  case DType::Int32: return std::to_string(*reinterpret_cast<const int32_t *>(p));
  case DType::UInt8: return std::to_string(int(*reinterpret_cast<const uint8_t *>(p)));
  case DType::Int8: return std::to_string(int(*reinterpret_cast<const int8_t *>(p)));
  case DType::Int16: return std::to_string(*reinterpret_cast<const int16_t *>(p));
  case DType::Int64: return std::to_string(*reinterpret_cast<const int64_t *>(p));
  case DType::Float32: return text::format_float(*reinterpret_cast<const float *>(p));
  case DType::Float64: return text::format_double(*reinterpret_cast<const double *>(p));
  case DType::Float16: return text::format_float(float(*reinterpret_cast<const Half *>(p)));
  case DType::BFloat16: return text::format_float(float(*reinterpret_cast<const BFloat16 *>(p)));
  }
  return "?";
}

// The elements of `t` in logical (row-major) order, whatever its strides.
std::string const_values(const Tensor &t) {
  if (!t.defined() || t.is_meta()) return "?";
  const char *base = static_cast<const char *>(t.raw_data());
  const int64_t item = int64_t(t.element_size());
  if (t.dim() == 0) return element_str(t.dtype(), base);
  std::string s = "[";
  std::vector<int64_t> idx(size_t(t.dim()), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    if (n) s += ", ";
    s += element_str(t.dtype(), base + off * item);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.sizes()[d]) break;
      idx[d] = 0;
    }
  }
  return s + "]";
}

class Printer {
public:
  explicit Printer(std::ostream &os) : os_(os) {}

  void graph(const Graph &g, int depth) {
    indent(depth);
    os_ << "graph @" << text::name(g.name()) << "(";
    value_list(g.inputs());
    os_ << ")";
    if (!g.symbol_hints().empty()) {
      os_ << " symbols(";
      for (size_t k = 0; k < g.symbol_hints().size(); ++k)
        os_ << (k ? ", " : "") << "s" << k << " = " << g.symbol_hints()[k];
      os_ << ")";
    }
    if (!g.params().empty()) {
      os_ << " params(";
      value_list(g.params());
      os_ << ")";
    }
    if (!g.consts().empty()) {
      os_ << " consts(";
      for (size_t i = 0; i < g.consts().size(); ++i) {
        const Value *c = g.consts()[i];
        if (i) os_ << ", ";
        os_ << value_ref(c) << ": " << c->type().str() << " = ";
        // A wrapped number takes part in type promotion only by category: keep that.
        if (c->tensor().defined() && c->tensor().impl().wrapped_number) os_ << "wrapped ";
        os_ << const_values(c->tensor());
      }
      os_ << ")";
    }
    os_ << " {\n";
    // A training step's nodes: a `phase` line where the phase changes (the
    // top level only: a group's body is its group's).
    StepPhase phase = StepPhase::Forward;
    for (const Node *n : g.nodes()) {
      if (depth == 0 && n->phase() != phase) {
        phase = n->phase();
        indent(depth + 1);
        os_ << "phase " << step_phase_name(phase) << "\n";
      }
      node(*n, depth + 1);
    }
    for (const WriteBack &w : g.write_backs()) {
      indent(depth + 1);
      os_ << "writeback " << value_ref(w.target) << " <- " << value_ref(w.value) << "\n";
    }
    indent(depth + 1);
    os_ << "return";
    for (size_t i = 0; i < g.outputs().size(); ++i) os_ << (i ? ", " : " ") << value_ref(g.outputs()[i]);
    os_ << "\n";
    if (g.memory_plan()) memory_plan(*g.memory_plan(), depth + 1);
    indent(depth);
    os_ << "}\n";
  }

private:
  // memory_plan {peak_bytes = N} { %v {buffer = b, offset = o, size = s} ... }
  // A symbolic plan adds its formulas after the values at the traced sizes:
  // {peak_bytes = N, sym_peak = [max(...)]} and {..., sym_offset = [..], sym_size = [..]}.
  void memory_plan(const MemoryPlan &plan, int depth) {
    indent(depth);
    os_ << "memory_plan {peak_bytes = " << plan.peak_bytes;
    if (plan.symbolic) os_ << ", sym_peak = [" << plan.sym_peak.str() << "]";
    os_ << "} {\n";
    for (const auto &[v, s] : plan.entries) {
      indent(depth + 1);
      os_ << value_ref(v) << " {buffer = " << s.buffer << ", offset = " << s.offset << ", size = " << s.size;
      if (plan.symbolic) os_ << ", sym_offset = [" << s.sym_offset.str() << "], sym_size = [" << s.sym_size.str() << "]";
      os_ << "}\n";
    }
    indent(depth);
    os_ << "}\n";
  }

  void indent(int depth) {
    for (int i = 0; i < depth; ++i) os_ << "  ";
  }

  void value_list(const std::vector<Value *> &vs) {
    for (size_t i = 0; i < vs.size(); ++i) os_ << (i ? ", " : "") << value_ref(vs[i]) << ": " << vs[i]->type().str();
  }

  void node(const Node &n, int depth) {
    indent(depth);
    for (size_t i = 0; i < n.results().size(); ++i) os_ << (i ? ", " : "") << value_ref(n.results()[i]);
    if (!n.results().empty()) os_ << " = ";
    os_ << n.mnemonic() << "(";
    for (size_t i = 0; i < n.operands().size(); ++i) os_ << (i ? ", " : "") << value_ref(n.operands()[i]);
    os_ << ")";
    if (n.kind() == Node::Kind::Op) attrs(n);
    if (!n.results().empty()) {
      os_ << " :";
      for (size_t i = 0; i < n.results().size(); ++i) os_ << (i ? ", " : " ") << n.results()[i]->type().str();
    }
    if (n.kind() == Node::Kind::FusionGroup && n.body()) {
      os_ << " {\n";
      graph(*n.body(), depth + 1);
      indent(depth);
      os_ << "}";
    }
    os_ << "\n";
  }

  // Every attribute, by its ops.def name; extra unnamed ones (a malformed node)
  // still print so that the verifier's complaint can be seen in the dump.
  void attrs(const Node &n) {
    const auto &names = n.info().attr_names;
    if (n.attrs().empty() && names.empty()) return;
    os_ << " {";
    for (size_t i = 0; i < n.attrs().size(); ++i) {
      os_ << (i ? ", " : "") << (i < names.size() ? std::string(names[i]) : std::string("?").append(std::to_string(i))) << " = "
          << attr_str(n.attrs()[i]);
    }
    os_ << "}";
  }

  std::ostream &os_;
};

} // namespace

void print(const Graph &g, std::ostream &os) { Printer(os).graph(g, 0); }

std::string print(const Graph &g) {
  std::ostringstream os;
  print(g, os);
  return os.str();
}

} // namespace kiln::ir
