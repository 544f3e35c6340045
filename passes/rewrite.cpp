#include "passes/rewrite.h"

#include <cstring>

#include "runtime/trace_hook.h"

namespace kiln::passes {

Tensor meta_of(const ir::Value *v) {
  Tensor m = detail::make_tensor(v->type().shape, v->type().dtype, true);
  if (v->kind() == ir::Value::Kind::Const && v->tensor().defined())
    m.impl().wrapped_number = v->tensor().impl().wrapped_number;
  return m;
}

std::vector<ir::TensorType> infer_types(OpId op, const std::vector<ir::Value *> &operands, const Attrs &attrs) {
  std::vector<Tensor> metas;
  for (const ir::Value *v : operands) metas.push_back(v ? meta_of(v) : Tensor());
  detail::TracingOff off; // a pass may run while some caller traces
  std::vector<ir::TensorType> types;
  for (const Tensor &r : run_op(op, metas, attrs)) types.push_back(ir::TensorType::of(r));
  return types;
}

Tensor contiguous_copy(const Tensor &t) {
  Tensor out = detail::make_tensor(t.sizes(), t.dtype());
  out.impl().wrapped_number = t.impl().wrapped_number;
  size_t item = itemsize(t.dtype());
  if (t.numel() == 0) return out;
  const char *src = static_cast<const char *>(t.raw_data());
  char *dst = static_cast<char *>(out.raw_data());
  std::vector<int64_t> idx(t.dim(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.strides()[d];
    std::memcpy(dst + n * int64_t(item), src + off * int64_t(item), item);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.sizes()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

std::optional<double> const_scalar(const ir::Value *v) {
  if (!v || v->kind() != ir::Value::Kind::Const || !v->tensor().defined()) return std::nullopt;
  const Tensor &t = v->tensor();
  if (t.numel() != 1 || t.is_meta()) return std::nullopt;
  return dispatch_dtype(t.dtype(), [&]<class T>() { return double(*static_cast<const T *>(t.raw_data())); });
}

std::vector<ir::Value *> Builder::op_n(OpId id, std::vector<ir::Value *> operands, Attrs attrs) {
  std::vector<ir::TensorType> types = infer_types(id, operands, attrs);
  return g_.create(id, std::move(operands), std::move(attrs), types, anchor_)->results();
}

ir::Value *Builder::op(OpId id, std::vector<ir::Value *> operands, Attrs attrs) {
  return op_n(id, std::move(operands), std::move(attrs)).at(0);
}

ir::Value *Builder::scalar(double v) { return g_.add_const(detail::wrap_scalar(Scalar(v)), "cst"); }

} // namespace kiln::passes
