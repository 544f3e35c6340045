#include "passes/rewrite.h"

#include <algorithm>
#include <cstring>

#include "ir/sym_infer.h"
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

namespace {

std::vector<ir::TensorType> infer_static(OpId op, const std::vector<ir::Value *> &operands, const Attrs &attrs) {
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

std::vector<ir::TensorType> infer_symbolic(OpId op, const std::vector<ir::Value *> &operands, const Attrs &attrs,
                                           std::span<const int64_t> hints, const std::vector<ir::SymExpr> *target) {
  const std::string_view name = op_info(op).mnemonic;
  if (ir::sizes_in_attrs(op))
    KILN_CHECK(target && !target->empty(), name,
               ": a symbolic operand needs the result's symbolic sizes (passes::Builder::reshape)");
  std::vector<int> symbols;
  auto add_symbols = [&](const std::vector<ir::SymExpr> &dims) {
    for (const ir::SymExpr &e : dims)
      for (int k : e.symbols()) symbols.push_back(k);
  };
  for (const ir::Value *v : operands)
    if (v) add_symbols(v->type().sym);
  if (target) add_symbols(*target);
  std::sort(symbols.begin(), symbols.end());
  symbols.erase(std::unique(symbols.begin(), symbols.end()), symbols.end());
  for (int k : symbols)
    KILN_CHECK(size_t(k) < hints.size(), name, ": symbol s", k, " has no traced value");

  // The rule at the traced sizes gives the dtypes and layouts.
  std::vector<ir::TensorType> types =
      infer_static(op, operands, target ? ir::attrs_with_sizes(op, attrs, ir::evaluate_dims(*target, hints)) : attrs);
  for (const ir::TensorType &t : types)
    KILN_CHECK(!t.strides, name, ": eager gives its result ", t.str(),
               " a strided layout, which a symbolic type cannot hold yet");
  auto rule = [&](std::span<const int64_t> values) {
    std::vector<Tensor> metas;
    for (const ir::Value *v : operands) {
      if (!v) {
        metas.emplace_back();
        continue;
      }
      const ir::TensorType &t = v->type();
      Tensor m = detail::make_tensor(t.symbolic() ? Dims(ir::evaluate_dims(t.sym, values)) : t.shape, t.dtype, true);
      if (v->kind() == ir::Value::Kind::Const && v->tensor().defined())
        m.impl().wrapped_number = v->tensor().impl().wrapped_number;
      metas.push_back(m);
    }
    detail::TracingOff off;
    std::vector<Dims> sizes;
    const Attrs at = target ? ir::attrs_with_sizes(op, attrs, ir::evaluate_dims(*target, values)) : attrs;
    for (const Tensor &r : run_op(op, metas, at)) sizes.push_back(Dims(r.sizes()));
    return sizes;
  };
  std::vector<std::vector<ir::SymExpr>> dims;
  try {
    dims = ir::fit_symbolic_dims(rule, hints, symbols);
  } catch (const Error &e) {
    throw Error(std::string(name) + ": " + e.what());
  }
  for (size_t r = 0; r < types.size(); ++r) {
    bool symbolic = false;
    for (const ir::SymExpr &e : dims[r]) symbolic |= !e.is_constant();
    if (symbolic) types[r].sym = dims[r];
  }
  return types;
}

} // namespace

std::vector<ir::TensorType> infer_types(OpId op, const std::vector<ir::Value *> &operands, const Attrs &attrs,
                                        std::span<const int64_t> hints, const std::vector<ir::SymExpr> *target) {
  bool symbolic = target && !target->empty();
  for (const ir::Value *v : operands) symbolic |= v && v->type().symbolic();
  if (!symbolic) return infer_static(op, operands, attrs);
  return infer_symbolic(op, operands, attrs, hints, target);
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

namespace {

// The traced values of the symbols: the graph's, or in a fusion body (which
// has none of its own) read off the operands' dims that are a bare symbol.
std::vector<int64_t> symbol_values(const ir::Graph &g, const std::vector<ir::Value *> &operands) {
  if (!g.symbol_hints().empty()) return g.symbol_hints();
  std::vector<int64_t> values;
  for (const ir::Value *v : operands) {
    if (!v) continue;
    const ir::TensorType &t = v->type();
    for (size_t d = 0; d < t.sym.size(); ++d) {
      const std::optional<int> id = t.sym[d].as_symbol();
      if (!id) continue;
      if (values.size() <= size_t(*id)) values.resize(size_t(*id) + 1, -1);
      values[size_t(*id)] = t.shape[int64_t(d)];
    }
  }
  // A symbol no operand has as a bare dim (an operand of [2*s0] alone) has no
  // traced value here: say so instead of fitting around a made-up one.
  for (const ir::Value *v : operands)
    for (const ir::SymExpr &e : v ? v->type().sym : std::vector<ir::SymExpr>{})
      for (int id : e.symbols())
        KILN_CHECK(size_t(id) < values.size() && values[size_t(id)] >= 0, "@", g.name(), ": s", id,
                   " is no operand's dim alone, so its traced value is unknown in this fusion body (operand ",
                   v->type().str(), ")");
  return values;
}

} // namespace

std::vector<ir::Value *> Builder::op_n(OpId id, std::vector<ir::Value *> operands, Attrs attrs) {
  std::vector<ir::TensorType> types = infer_types(id, operands, attrs, symbol_values(g_, operands));
  return g_.create(id, std::move(operands), std::move(attrs), types, anchor_)->results();
}

ir::Value *Builder::op(OpId id, std::vector<ir::Value *> operands, Attrs attrs) {
  return op_n(id, std::move(operands), std::move(attrs)).at(0);
}

ir::Value *Builder::reshape(ir::Value *x, const ir::TensorType &to) {
  std::vector<ir::Value *> operands{x};
  Attrs attrs = attrs::ReshapeArgs{.shape = to.shape.vec()}.to_attrs();
  std::vector<ir::TensorType> types =
      infer_types(OpId::Reshape, operands, attrs, symbol_values(g_, operands), to.symbolic() ? &to.sym : nullptr);
  return g_.create(OpId::Reshape, std::move(operands), std::move(attrs), types, anchor_)->result();
}

ir::Value *Builder::scalar(double v) { return g_.add_const(detail::wrap_scalar(Scalar(v)), "cst"); }

} // namespace kiln::passes
