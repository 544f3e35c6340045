#include "runtime/op_registry.h"

#include <unordered_map>

#include "runtime/op_adapters.h"

namespace kiln {

std::string_view kind_name(OpKind k) {
  switch (k) {
  case OpKind::Elementwise: return "elementwise";
  case OpKind::Reduction: return "reduction";
  case OpKind::View: return "view";
  case OpKind::Contraction: return "contraction";
  case OpKind::Composite: return "composite";
  case OpKind::Opaque: return "opaque";
  case OpKind::Factory: return "factory";
  }
  return "?";
}

AttrValue::AttrValue(const Scalar &s) {
  if (s.is_floating_point()) v_ = s.toDouble();
  else if (s.is_bool()) v_ = s.to<bool>();
  else v_ = s.toLong();
}

namespace {
const char *type_name(const AttrValue::Variant &v) {
  static const char *names[] = {"none", "int", "float", "bool", "int list", "string", "dtype"};
  return names[v.index()];
}
template <class T> const T &get_as(const AttrValue::Variant &v, const char *want) {
  const T *p = std::get_if<T>(&v);
  KILN_CHECK(p, "attribute: expected ", want, ", got ", type_name(v));
  return *p;
}
std::vector<std::string_view> split_names(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    size_t c = s.find(',');
    out.push_back(s.substr(0, c));
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}
} // namespace

int64_t AttrValue::as_int() const {
  if (auto *b = std::get_if<bool>(&v_)) return *b;
  return get_as<int64_t>(v_, "an int");
}
double AttrValue::as_float() const {
  if (auto *i = std::get_if<int64_t>(&v_)) return double(*i);
  return get_as<double>(v_, "a float");
}
bool AttrValue::as_bool() const { return get_as<bool>(v_, "a bool"); }
const std::vector<int64_t> &AttrValue::as_ints() const { return get_as<std::vector<int64_t>>(v_, "an int list"); }
const std::string &AttrValue::as_string() const { return get_as<std::string>(v_, "a string"); }
DType AttrValue::as_dtype() const { return get_as<DType>(v_, "a dtype"); }
Scalar AttrValue::as_scalar() const {
  if (auto *i = std::get_if<int64_t>(&v_)) return Scalar(*i);
  if (auto *b = std::get_if<bool>(&v_)) return Scalar(*b);
  return Scalar(get_as<double>(v_, "a number"));
}

namespace {
struct Table {
  std::vector<OpInfo> ops;
  std::unordered_map<std::string_view, const OpInfo *> by_name;
  Table() {
#define KILN_OP(Id, mnemonic, kind, attrs)                                                                  \
  ops.push_back(OpInfo{OpId::Id, mnemonic, OpKind::kind, split_names(attrs), &adapters::Id});
#include "runtime/ops.def"
    for (const OpInfo &op : ops) by_name.emplace(op.mnemonic, &op);
  }
};
const Table &table() {
  static const Table t;
  return t;
}
} // namespace

const OpInfo &op_info(OpId id) { return table().ops.at(size_t(id)); }

const OpInfo *find_op(std::string_view mnemonic) {
  auto it = table().by_name.find(mnemonic);
  return it == table().by_name.end() ? nullptr : it->second;
}

std::vector<Tensor> run_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  const OpInfo &op = op_info(id);
  KILN_CHECK(attrs.size() == op.attr_names.size(), op.mnemonic, ": expected ", op.attr_names.size(),
             " attributes, got ", attrs.size());
  return op.run(inputs, attrs);
}

} // namespace kiln
