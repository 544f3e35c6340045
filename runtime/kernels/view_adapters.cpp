// Uniform adapters of the view ops implemented in runtime/tensor.cpp. Each reads
// the attributes exactly as the op's KILN_TRACE records them (ops.def order).
#include "runtime/op_adapters.h"
#include "runtime/ops.h"
#include "runtime/view_internal.h"

namespace kiln::adapters {

std::vector<Tensor> View(const std::vector<Tensor> &in, const Attrs &a) { return {view(in.at(0), a[0].as_ints())}; }
std::vector<Tensor> Reshape(const std::vector<Tensor> &in, const Attrs &a) {
  return {reshape(in.at(0), a[0].as_ints())};
}
std::vector<Tensor> Transpose(const std::vector<Tensor> &in, const Attrs &a) {
  return {transpose(in.at(0), a[0].as_int(), a[1].as_int())};
}
std::vector<Tensor> Permute(const std::vector<Tensor> &in, const Attrs &a) {
  return {permute(in.at(0), a[0].as_ints())};
}
// slice records normalized ints; none is accepted too, as in the typed call.
std::vector<Tensor> Slice(const std::vector<Tensor> &in, const Attrs &a) {
  return {slice(in.at(0), a[0].as_int(), a[1].as_opt_int(), a[2].as_opt_int(), a[3].as_int())};
}
std::vector<Tensor> Select(const std::vector<Tensor> &in, const Attrs &a) {
  return {select(in.at(0), a[0].as_int(), a[1].as_int())};
}
std::vector<Tensor> Unsqueeze(const std::vector<Tensor> &in, const Attrs &a) {
  return {unsqueeze(in.at(0), a[0].as_int())};
}
std::vector<Tensor> Squeeze(const std::vector<Tensor> &in, const Attrs &a) {
  return {detail::squeeze_dims(in.at(0), a[0].as_ints())};
}
std::vector<Tensor> Expand(const std::vector<Tensor> &in, const Attrs &a) {
  return {expand(in.at(0), a[0].as_ints())};
}
std::vector<Tensor> AsStrided(const std::vector<Tensor> &in, const Attrs &a) {
  return {as_strided(in.at(0), a[0].as_ints(), a[1].as_ints(), a[2].as_opt_int())};
}

} // namespace kiln::adapters
