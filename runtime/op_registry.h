// The op table as data: ids, mnemonics, kinds, attribute names and the uniform
// adapter each op is run through by the interpreter, the tracer and shape inference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

enum class OpId : uint16_t {
#define KILN_OP(Id, mnemonic, kind, attrs) Id,
#include "runtime/ops.def"
};
inline constexpr int kNumOps = 0
#define KILN_OP(Id, mnemonic, kind, attrs) +1
#include "runtime/ops.def"
    ;

enum class OpKind : uint8_t { Elementwise, Reduction, View, Contraction, Composite, Opaque, Factory };
std::string_view kind_name(OpKind k);

// One attribute value. none (an absent optional), int, float, bool, int list,
// string or dtype; Scalars map to int, float or bool.
class AttrValue {
public:
  using Variant = std::variant<std::monostate, int64_t, double, bool, std::vector<int64_t>, std::string, DType>;
  AttrValue() = default;
  AttrValue(std::monostate) {}
  AttrValue(int v) : v_(int64_t(v)) {}
  AttrValue(long v) : v_(int64_t(v)) {}
  AttrValue(long long v) : v_(int64_t(v)) {}
  AttrValue(double v) : v_(v) {}
  AttrValue(bool v) : v_(v) {}
  AttrValue(IntArrayRef v) : v_(v.vec()) {}
  AttrValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  AttrValue(std::initializer_list<int64_t> v) : v_(std::vector<int64_t>(v)) {}
  AttrValue(std::string v) : v_(std::move(v)) {}
  AttrValue(const char *v) : v_(std::string(v)) {}
  AttrValue(DType v) : v_(v) {}
  AttrValue(const Scalar &s);
  template <class T> AttrValue(const std::optional<T> &o) {
    if (o) *this = AttrValue(*o);
  }

  bool is_none() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_ints() const { return std::holds_alternative<std::vector<int64_t>>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_dtype() const { return std::holds_alternative<DType>(v_); }
  // Accessors throw kiln::Error when the value has another type.
  int64_t as_int() const;
  double as_float() const; // ints convert
  bool as_bool() const;
  const std::vector<int64_t> &as_ints() const;
  const std::string &as_string() const;
  DType as_dtype() const;
  Scalar as_scalar() const; // int, float or bool
  std::optional<Scalar> as_opt_scalar() const { return is_none() ? std::nullopt : std::optional(as_scalar()); }
  std::optional<int64_t> as_opt_int() const { return is_none() ? std::nullopt : std::optional(as_int()); }
  std::optional<double> as_opt_float() const { return is_none() ? std::nullopt : std::optional(as_float()); }
  std::optional<DType> as_opt_dtype() const { return is_none() ? std::nullopt : std::optional(as_dtype()); }
  std::optional<std::string> as_opt_string() const {
    return is_none() ? std::nullopt : std::optional(as_string());
  }
  const Variant &variant() const { return v_; }
  bool operator==(const AttrValue &o) const { return v_ == o.v_; }

private:
  Variant v_;
};

// Positional attributes, in the order the op's entry in ops.def names them.
using Attrs = std::vector<AttrValue>;

// Runs one op on `inputs` (an undefined Tensor stands for an absent optional
// input) and returns all of its results.
using OpFn = std::vector<Tensor> (*)(const std::vector<Tensor> &inputs, const Attrs &attrs);

struct OpInfo {
  OpId id;
  std::string_view mnemonic;
  OpKind kind;
  std::vector<std::string_view> attr_names;
  OpFn run;
};

const OpInfo &op_info(OpId id);
// nullptr when no op has that mnemonic.
const OpInfo *find_op(std::string_view mnemonic);
// op_info(id).run(inputs, attrs) with arity/attribute-count checks.
std::vector<Tensor> run_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);

} // namespace kiln
