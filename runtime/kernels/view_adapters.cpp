// Uniform adapters of the view ops implemented in runtime/tensor.cpp. Each reads
// the attributes exactly as the op's KILN_TRACE records them (ops.def order).
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/view_internal.h"

namespace kiln::adapters {

std::vector<Tensor> View(const std::vector<Tensor> &in, const Attrs &a) { return {view(in.at(0), attrs::View{a}.shape())}; }
std::vector<Tensor> Reshape(const std::vector<Tensor> &in, const Attrs &a) {
  return {reshape(in.at(0), attrs::Reshape{a}.shape())};
}
std::vector<Tensor> Transpose(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Transpose at{a};
  return {transpose(in.at(0), at.dim0(), at.dim1())};
}
std::vector<Tensor> Permute(const std::vector<Tensor> &in, const Attrs &a) {
  return {permute(in.at(0), attrs::Permute{a}.dims())};
}
// slice records normalized ints; none is accepted too, as in the typed call.
std::vector<Tensor> Slice(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Slice at{a};
  return {slice(in.at(0), at.dim(), at.start(), at.end(), at.step())};
}
std::vector<Tensor> Select(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Select at{a};
  return {select(in.at(0), at.dim(), at.index())};
}
std::vector<Tensor> Unsqueeze(const std::vector<Tensor> &in, const Attrs &a) {
  return {unsqueeze(in.at(0), attrs::Unsqueeze{a}.dim())};
}
std::vector<Tensor> Squeeze(const std::vector<Tensor> &in, const Attrs &a) {
  return {detail::squeeze_dims(in.at(0), attrs::Squeeze{a}.dims())};
}
std::vector<Tensor> Expand(const std::vector<Tensor> &in, const Attrs &a) {
  return {expand(in.at(0), attrs::Expand{a}.shape())};
}
std::vector<Tensor> AsStrided(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::AsStrided at{a};
  return {as_strided(in.at(0), at.size(), at.stride(), at.storage_offset())};
}

} // namespace kiln::adapters
