#include "passes/rewrite.h"

#include <cstring>

#include "runtime/trace_hook.h"

namespace kiln::passes {

Tensor meta_of(const ir::Value *v) {
  // A view has its base's strides, viewed: replayed on meta tensors (its type
  // records none), so that ops built on views get eager's result layout.
  const ir::Node *p = v->producer();
  if (p && p->kind() == ir::Node::Kind::Op && p->info().kind == OpKind::View && !p->operands().empty() &&
      p->operand(0)) {
    std::vector<Tensor> ins;
    for (size_t i = 0; i < p->operands().size(); ++i) ins.push_back(p->operand(i) ? meta_of(p->operand(i)) : Tensor());
    detail::TracingOff off;
    try {
      std::vector<Tensor> outs = run_op(p->op(), ins, p->attrs());
      const Tensor &r = outs.at(v->result_index());
      if (IntArrayRef(r.sizes()) == IntArrayRef(v->type().shape) && r.dtype() == v->type().dtype) return r;
    } catch (const Error &) {
      // A graph the verifier has not seen yet: its own check reports it.
    }
  }
  Tensor m = detail::make_tensor(v->type().shape, v->type().dtype, true);
  if (v->type().strides) m.impl().strides = *v->type().strides;
  if (v->kind() == ir::Value::Kind::Const && v->tensor().defined())
    m.impl().wrapped_number = v->tensor().impl().wrapped_number;
  return m;
}

ir::TensorType layout_type(const Tensor &t) {
  ir::TensorType type = ir::TensorType::of(t);
  if (!t.is_contiguous()) type.strides = Dims(t.strides());
  return type;
}

std::vector<ir::TensorType> infer_types(OpId op, const std::vector<ir::Value *> &operands, const Attrs &attrs) {
  std::vector<Tensor> metas;
  for (const ir::Value *v : operands) metas.push_back(v ? meta_of(v) : Tensor());
  detail::TracingOff off; // a pass may run while some caller traces
  std::vector<ir::TensorType> types;
  // A view's strides follow its operand's at run time; other results are
  // allocated in the layout eager gives them.
  const bool view = op_info(op).kind == OpKind::View;
  for (const Tensor &r : run_op(op, metas, attrs)) types.push_back(view ? ir::TensorType::of(r) : layout_type(r));
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
