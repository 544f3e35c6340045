// Tensor methods: each forwards to the free function of the same name (runtime/ops.h).
#include "runtime/ops.h"

namespace kiln {

Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::contiguous(MemoryFormat format) const { return kiln::contiguous(*this, format); }
Tensor Tensor::clone() const { return kiln::clone(*this); }
Tensor Tensor::to(DType dtype) const { return kiln::to(*this, dtype); }
Tensor & Tensor::copy_(const Tensor &src) { return kiln::copy_(*this, src); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim ) const { return kiln::split(*this, split_size, dim); }
std::vector<Tensor> Tensor::split(IntArrayRef split_sizes, int64_t dim ) const { return kiln::split(*this, split_sizes, dim); }
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim ) const { return kiln::chunk(*this, chunks, dim); }
Tensor Tensor::index_select(int64_t dim, const Tensor &index) const { return kiln::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor &index) const { return kiln::gather(*this, dim, index); }
Tensor Tensor::tril(int64_t diagonal ) const { return kiln::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal ) const { return kiln::triu(*this, diagonal); }
Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::log1p() const { return kiln::log1p(*this); }
Tensor Tensor::expm1() const { return kiln::expm1(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::sin() const { return kiln::sin(*this); }
Tensor Tensor::cos() const { return kiln::cos(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::erf() const { return kiln::erf(*this); }
Tensor Tensor::reciprocal() const { return kiln::reciprocal(*this); }
Tensor Tensor::square() const { return kiln::square(*this); }
Tensor Tensor::floor() const { return kiln::floor(*this); }
Tensor Tensor::ceil() const { return kiln::ceil(*this); }
Tensor Tensor::round() const { return kiln::round(*this); }
Tensor Tensor::sign() const { return kiln::sign(*this); }
Tensor Tensor::logical_not() const { return kiln::logical_not(*this); }
Tensor Tensor::add(const Tensor &other, const Scalar &alpha ) const { return kiln::add(*this, other, alpha); }
Tensor Tensor::add(const Scalar &other, const Scalar &alpha ) const { return kiln::add(*this, other, alpha); }
Tensor Tensor::sub(const Tensor &other, const Scalar &alpha ) const { return kiln::sub(*this, other, alpha); }
Tensor Tensor::sub(const Scalar &other, const Scalar &alpha ) const { return kiln::sub(*this, other, alpha); }
Tensor Tensor::mul(const Tensor &other) const { return kiln::mul(*this, other); }
Tensor Tensor::mul(const Scalar &other) const { return kiln::mul(*this, other); }
Tensor Tensor::div(const Tensor &other) const { return kiln::div(*this, other); }
Tensor Tensor::div(const Scalar &other) const { return kiln::div(*this, other); }
Tensor Tensor::pow(const Tensor &exponent) const { return kiln::pow(*this, exponent); }
Tensor Tensor::pow(const Scalar &exponent) const { return kiln::pow(*this, exponent); }
Tensor Tensor::maximum(const Tensor &other) const { return kiln::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor &other) const { return kiln::minimum(*this, other); }
Tensor Tensor::remainder(const Tensor &other) const { return kiln::remainder(*this, other); }
Tensor Tensor::remainder(const Scalar &other) const { return kiln::remainder(*this, other); }
Tensor Tensor::atan2(const Tensor &other) const { return kiln::atan2(*this, other); }
Tensor Tensor::hypot(const Tensor &other) const { return kiln::hypot(*this, other); }
Tensor Tensor::fmod(const Tensor &other) const { return kiln::fmod(*this, other); }
Tensor Tensor::fmod(const Scalar &other) const { return kiln::fmod(*this, other); }
Tensor Tensor::copysign(const Tensor &other) const { return kiln::copysign(*this, other); }
Tensor Tensor::copysign(const Scalar &other) const { return kiln::copysign(*this, other); }
Tensor Tensor::eq(const Tensor &other) const { return kiln::eq(*this, other); }
Tensor Tensor::eq(const Scalar &other) const { return kiln::eq(*this, other); }
Tensor Tensor::ne(const Tensor &other) const { return kiln::ne(*this, other); }
Tensor Tensor::ne(const Scalar &other) const { return kiln::ne(*this, other); }
Tensor Tensor::lt(const Tensor &other) const { return kiln::lt(*this, other); }
Tensor Tensor::lt(const Scalar &other) const { return kiln::lt(*this, other); }
Tensor Tensor::le(const Tensor &other) const { return kiln::le(*this, other); }
Tensor Tensor::le(const Scalar &other) const { return kiln::le(*this, other); }
Tensor Tensor::gt(const Tensor &other) const { return kiln::gt(*this, other); }
Tensor Tensor::gt(const Scalar &other) const { return kiln::gt(*this, other); }
Tensor Tensor::ge(const Tensor &other) const { return kiln::ge(*this, other); }
Tensor Tensor::ge(const Scalar &other) const { return kiln::ge(*this, other); }
Tensor Tensor::logical_and(const Tensor &other) const { return kiln::logical_and(*this, other); }
Tensor Tensor::logical_or(const Tensor &other) const { return kiln::logical_or(*this, other); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max ) const { return kiln::clamp(*this, min, max); }
Tensor Tensor::masked_fill(const Tensor &mask, const Scalar &value) const { return kiln::masked_fill(*this, mask, value); }
Tensor Tensor::lerp(const Tensor &end, const Scalar &weight) const { return kiln::lerp(*this, end, weight); }
Tensor Tensor::lerp(const Tensor &end, const Tensor &weight) const { return kiln::lerp(*this, end, weight); }
Tensor & Tensor::add_(const Tensor &other, const Scalar &alpha ) { return kiln::add_(*this, other, alpha); }
Tensor & Tensor::add_(const Scalar &other, const Scalar &alpha ) { return kiln::add_(*this, other, alpha); }
Tensor & Tensor::sub_(const Tensor &other, const Scalar &alpha ) { return kiln::sub_(*this, other, alpha); }
Tensor & Tensor::sub_(const Scalar &other, const Scalar &alpha ) { return kiln::sub_(*this, other, alpha); }
Tensor & Tensor::mul_(const Tensor &other) { return kiln::mul_(*this, other); }
Tensor & Tensor::mul_(const Scalar &other) { return kiln::mul_(*this, other); }
Tensor & Tensor::div_(const Tensor &other) { return kiln::div_(*this, other); }
Tensor & Tensor::div_(const Scalar &other) { return kiln::div_(*this, other); }
Tensor & Tensor::atan2_(const Tensor &other) { return kiln::atan2_(*this, other); }
Tensor & Tensor::hypot_(const Tensor &other) { return kiln::hypot_(*this, other); }
Tensor & Tensor::fmod_(const Tensor &other) { return kiln::fmod_(*this, other); }
Tensor & Tensor::fmod_(const Scalar &other) { return kiln::fmod_(*this, other); }
Tensor & Tensor::copysign_(const Tensor &other) { return kiln::copysign_(*this, other); }
Tensor & Tensor::copysign_(const Scalar &other) { return kiln::copysign_(*this, other); }
Tensor & Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max ) { return kiln::clamp_(*this, min, max); }
Tensor & Tensor::relu_() { return kiln::relu_(*this); }
Tensor & Tensor::zero_() { return kiln::zero_(*this); }
Tensor & Tensor::fill_(const Scalar &value) { return kiln::fill_(*this, value); }
Tensor Tensor::sum(std::optional<DType> dtype ) const { return kiln::sum(*this, dtype); }
Tensor Tensor::sum(IntArrayRef dim, bool keepdim , std::optional<DType> dtype ) const { return kiln::sum(*this, dim, keepdim, dtype); }
Tensor Tensor::mean(std::optional<DType> dtype ) const { return kiln::mean(*this, dtype); }
Tensor Tensor::mean(IntArrayRef dim, bool keepdim , std::optional<DType> dtype ) const { return kiln::mean(*this, dim, keepdim, dtype); }
Tensor Tensor::prod(std::optional<DType> dtype ) const { return kiln::prod(*this, dtype); }
Tensor Tensor::prod(int64_t dim, bool keepdim , std::optional<DType> dtype ) const { return kiln::prod(*this, dim, keepdim, dtype); }
Tensor Tensor::amax(IntArrayRef dim , bool keepdim ) const { return kiln::amax(*this, dim, keepdim); }
Tensor Tensor::amin(IntArrayRef dim , bool keepdim ) const { return kiln::amin(*this, dim, keepdim); }
Tensor Tensor::max() const { return kiln::max(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim ) const { return kiln::max(*this, dim, keepdim); }
Tensor Tensor::min() const { return kiln::min(*this); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim ) const { return kiln::min(*this, dim, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim , bool keepdim ) const { return kiln::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> dim , bool keepdim ) const { return kiln::argmin(*this, dim, keepdim); }
Tensor Tensor::var(IntArrayRef dim , std::optional<double> correction , bool keepdim ) const { return kiln::var(*this, dim, correction, keepdim); }
Tensor Tensor::std(IntArrayRef dim , std::optional<double> correction , bool keepdim ) const { return kiln::std(*this, dim, correction, keepdim); }
Tensor Tensor::norm(const Scalar &p , IntArrayRef dim , bool keepdim ) const { return kiln::norm(*this, p, dim, keepdim); }
Tensor Tensor::softmax(int64_t dim, std::optional<DType> dtype ) const { return kiln::softmax(*this, dim, dtype); }
Tensor Tensor::log_softmax(int64_t dim, std::optional<DType> dtype ) const { return kiln::log_softmax(*this, dim, dtype); }
Tensor Tensor::matmul(const Tensor &other) const { return kiln::matmul(*this, other); }
Tensor Tensor::mm(const Tensor &mat2) const { return kiln::mm(*this, mat2); }
Tensor Tensor::bmm(const Tensor &mat2) const { return kiln::bmm(*this, mat2); }

} // namespace kiln
