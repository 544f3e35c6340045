// kiln::nn::functional: torch C++'s torch::nn::functional names and option structs, so
// that code written against libtorch ports mechanically:
//
//   namespace F = kiln::nn::functional;
//   y = F::gelu(x, F::GELUFuncOptions().approximate("tanh"));
//   y = F::leaky_relu(x, F::LeakyReLUFuncOptions().negative_slope(0.2).inplace(true));
//
// Each function calls the free function of runtime/ops.h with the options as its
// arguments (that function validates them and names itself in errors); inplace(true)
// writes the result into the input, as torch's. Header-only.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/loss.h"
#include "runtime/ops.h"
#include "runtime/options_arg.h"

namespace kiln {
// torch's mode names (torch::kCircular, ...) for the string options below.
inline constexpr const char kConstant[] = "constant", kReflect[] = "reflect", kReplicate[] = "replicate",
                            kCircular[] = "circular", kNearest[] = "nearest", kLinear[] = "linear",
                            kBilinear[] = "bilinear";
} // namespace kiln

namespace kiln::nn {

// A list option that also takes one value, as torch's ExpandingArray: .stride(2) or .stride({2, 1}).
struct Ints : std::vector<int64_t> {
  Ints() = default;
  Ints(int64_t v) : std::vector<int64_t>{v} {}
  Ints(int v) : std::vector<int64_t>{v} {}
  Ints(std::initializer_list<int64_t> l) : std::vector<int64_t>(l) {}
  Ints(std::vector<int64_t> v) : std::vector<int64_t>(std::move(v)) {}
};

struct ReLUFuncOptions {
  KILN_ARG(ReLUFuncOptions, bool, inplace, false)
};
using ReLU6FuncOptions = ReLUFuncOptions;
using SELUFuncOptions = ReLUFuncOptions;
using SiLUFuncOptions = ReLUFuncOptions;
using HardswishFuncOptions = ReLUFuncOptions;
using MishFuncOptions = ReLUFuncOptions;

struct LeakyReLUFuncOptions {
  KILN_ARG(LeakyReLUFuncOptions, double, negative_slope, 1e-2)
  KILN_ARG(LeakyReLUFuncOptions, bool, inplace, false)
};

struct ELUFuncOptions {
  KILN_ARG(ELUFuncOptions, double, alpha, 1.0)
  KILN_ARG(ELUFuncOptions, bool, inplace, false)
};

struct CELUFuncOptions {
  KILN_ARG(CELUFuncOptions, double, alpha, 1.0)
  KILN_ARG(CELUFuncOptions, bool, inplace, false)
};

struct GELUFuncOptions {
  KILN_ARG(GELUFuncOptions, std::string, approximate, "none")
};

struct HardtanhFuncOptions {
  KILN_ARG(HardtanhFuncOptions, double, min_val, -1.0)
  KILN_ARG(HardtanhFuncOptions, double, max_val, 1.0)
  KILN_ARG(HardtanhFuncOptions, bool, inplace, false)
};

struct SoftplusFuncOptions {
  KILN_ARG(SoftplusFuncOptions, double, beta, 1.0)
  KILN_ARG(SoftplusFuncOptions, double, threshold, 20.0)
};

struct ThresholdFuncOptions {
  ThresholdFuncOptions(double threshold, double value) : threshold_(threshold), value_(value) {}
  KILN_ARG(ThresholdFuncOptions, double, threshold, 0.0)
  KILN_ARG(ThresholdFuncOptions, double, value, 0.0)
  KILN_ARG(ThresholdFuncOptions, bool, inplace, false)
};

struct SoftmaxFuncOptions {
  SoftmaxFuncOptions(int64_t dim) : dim_(dim) {}
  KILN_ARG(SoftmaxFuncOptions, int64_t, dim, -1)
  KILN_ARG(SoftmaxFuncOptions, std::optional<DType>, dtype, std::nullopt)
};
using LogSoftmaxFuncOptions = SoftmaxFuncOptions;

struct LayerNormFuncOptions {
  LayerNormFuncOptions(std::vector<int64_t> normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}
  LayerNormFuncOptions(int64_t normalized_shape) : normalized_shape_(Ints{normalized_shape}) {}
  KILN_ARG(LayerNormFuncOptions, Ints, normalized_shape, {})
  KILN_ARG(LayerNormFuncOptions, Tensor, weight, {})
  KILN_ARG(LayerNormFuncOptions, Tensor, bias, {})
  KILN_ARG(LayerNormFuncOptions, double, eps, 1e-5)
};

struct BatchNormFuncOptions {
  KILN_ARG(BatchNormFuncOptions, Tensor, weight, {})
  KILN_ARG(BatchNormFuncOptions, Tensor, bias, {})
  KILN_ARG(BatchNormFuncOptions, bool, training, false)
  KILN_ARG(BatchNormFuncOptions, double, momentum, 0.1)
  KILN_ARG(BatchNormFuncOptions, double, eps, 1e-5)
};

struct Conv2dFuncOptions {
  KILN_ARG(Conv2dFuncOptions, Tensor, bias, {})
  KILN_ARG(Conv2dFuncOptions, Ints, stride, {1})
  KILN_ARG(Conv2dFuncOptions, Ints, padding, {0})
  KILN_ARG(Conv2dFuncOptions, Ints, dilation, {1})
  KILN_ARG(Conv2dFuncOptions, int64_t, groups, 1)
};

struct MaxPool2dFuncOptions {
  MaxPool2dFuncOptions(std::vector<int64_t> kernel_size) : kernel_size_(std::move(kernel_size)) {}
  MaxPool2dFuncOptions(int64_t kernel_size) : kernel_size_(Ints{kernel_size}) {}
  KILN_ARG(MaxPool2dFuncOptions, Ints, kernel_size, {})
  KILN_ARG(MaxPool2dFuncOptions, Ints, stride, {}) // empty: kernel_size
  KILN_ARG(MaxPool2dFuncOptions, Ints, padding, {0})
  KILN_ARG(MaxPool2dFuncOptions, Ints, dilation, {1})
  KILN_ARG(MaxPool2dFuncOptions, bool, ceil_mode, false)
};

struct AvgPool2dFuncOptions {
  AvgPool2dFuncOptions(std::vector<int64_t> kernel_size) : kernel_size_(std::move(kernel_size)) {}
  AvgPool2dFuncOptions(int64_t kernel_size) : kernel_size_(Ints{kernel_size}) {}
  KILN_ARG(AvgPool2dFuncOptions, Ints, kernel_size, {})
  KILN_ARG(AvgPool2dFuncOptions, Ints, stride, {})
  KILN_ARG(AvgPool2dFuncOptions, Ints, padding, {0})
  KILN_ARG(AvgPool2dFuncOptions, bool, ceil_mode, false)
  KILN_ARG(AvgPool2dFuncOptions, bool, count_include_pad, true)
};

struct AdaptiveAvgPool2dFuncOptions {
  AdaptiveAvgPool2dFuncOptions(std::vector<int64_t> output_size) : output_size_(std::move(output_size)) {}
  AdaptiveAvgPool2dFuncOptions(int64_t output_size) : output_size_(Ints{output_size}) {}
  KILN_ARG(AdaptiveAvgPool2dFuncOptions, Ints, output_size, {})
};

struct Conv1dFuncOptions {
  KILN_ARG(Conv1dFuncOptions, Tensor, bias, {})
  KILN_ARG(Conv1dFuncOptions, Ints, stride, {1})
  KILN_ARG(Conv1dFuncOptions, Ints, padding, {0})
  KILN_ARG(Conv1dFuncOptions, Ints, dilation, {1})
  KILN_ARG(Conv1dFuncOptions, int64_t, groups, 1)
};

struct MaxPool1dFuncOptions {
  MaxPool1dFuncOptions(std::vector<int64_t> kernel_size) : kernel_size_(std::move(kernel_size)) {}
  MaxPool1dFuncOptions(int64_t kernel_size) : kernel_size_(Ints{kernel_size}) {}
  KILN_ARG(MaxPool1dFuncOptions, Ints, kernel_size, {})
  KILN_ARG(MaxPool1dFuncOptions, Ints, stride, {})
  KILN_ARG(MaxPool1dFuncOptions, Ints, padding, {0})
  KILN_ARG(MaxPool1dFuncOptions, Ints, dilation, {1})
  KILN_ARG(MaxPool1dFuncOptions, bool, ceil_mode, false)
};

struct AvgPool1dFuncOptions {
  AvgPool1dFuncOptions(std::vector<int64_t> kernel_size) : kernel_size_(std::move(kernel_size)) {}
  AvgPool1dFuncOptions(int64_t kernel_size) : kernel_size_(Ints{kernel_size}) {}
  KILN_ARG(AvgPool1dFuncOptions, Ints, kernel_size, {})
  KILN_ARG(AvgPool1dFuncOptions, Ints, stride, {})
  KILN_ARG(AvgPool1dFuncOptions, Ints, padding, {0})
  KILN_ARG(AvgPool1dFuncOptions, bool, ceil_mode, false)
  KILN_ARG(AvgPool1dFuncOptions, bool, count_include_pad, true)
};

struct GroupNormFuncOptions {
  GroupNormFuncOptions(int64_t num_groups) : num_groups_(num_groups) {}
  KILN_ARG(GroupNormFuncOptions, int64_t, num_groups, 1)
  KILN_ARG(GroupNormFuncOptions, Tensor, weight, {})
  KILN_ARG(GroupNormFuncOptions, Tensor, bias, {})
  KILN_ARG(GroupNormFuncOptions, double, eps, 1e-5)
};

struct NormalizeFuncOptions {
  KILN_ARG(NormalizeFuncOptions, double, p, 2.0)
  KILN_ARG(NormalizeFuncOptions, int64_t, dim, 1)
  KILN_ARG(NormalizeFuncOptions, double, eps, 1e-12)
};

struct CosineSimilarityFuncOptions {
  KILN_ARG(CosineSimilarityFuncOptions, int64_t, dim, 1)
  KILN_ARG(CosineSimilarityFuncOptions, double, eps, 1e-8)
};

struct PairwiseDistanceFuncOptions {
  KILN_ARG(PairwiseDistanceFuncOptions, double, p, 2.0)
  KILN_ARG(PairwiseDistanceFuncOptions, double, eps, 1e-6)
  KILN_ARG(PairwiseDistanceFuncOptions, bool, keepdim, false)
};

struct PadFuncOptions {
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}
  PadFuncOptions(int64_t pad) : pad_(Ints{pad}) {}
  KILN_ARG(PadFuncOptions, Ints, pad, {})
  KILN_ARG(PadFuncOptions, std::string, mode, kConstant)
  KILN_ARG(PadFuncOptions, double, value, 0.0)
};

struct InterpolateFuncOptions {
  KILN_ARG(InterpolateFuncOptions, std::optional<std::vector<int64_t>>, size, std::nullopt)
  KILN_ARG(InterpolateFuncOptions, std::optional<std::vector<double>>, scale_factor, std::nullopt)
  KILN_ARG(InterpolateFuncOptions, std::string, mode, kNearest)
  KILN_ARG(InterpolateFuncOptions, std::optional<bool>, align_corners, std::nullopt)
};

struct PixelShuffleFuncOptions {
  PixelShuffleFuncOptions(int64_t upscale_factor) : upscale_factor_(upscale_factor) {}
  KILN_ARG(PixelShuffleFuncOptions, int64_t, upscale_factor, 1)
};

struct ConvTranspose2dFuncOptions {
  KILN_ARG(ConvTranspose2dFuncOptions, Tensor, bias, {})
  KILN_ARG(ConvTranspose2dFuncOptions, Ints, stride, {1})
  KILN_ARG(ConvTranspose2dFuncOptions, Ints, padding, {0})
  KILN_ARG(ConvTranspose2dFuncOptions, Ints, output_padding, {0})
  KILN_ARG(ConvTranspose2dFuncOptions, int64_t, groups, 1)
  KILN_ARG(ConvTranspose2dFuncOptions, Ints, dilation, {1})
};
using ConvTranspose1dFuncOptions = ConvTranspose2dFuncOptions;

struct UnfoldFuncOptions {
  UnfoldFuncOptions(std::vector<int64_t> kernel_size) : kernel_size_(std::move(kernel_size)) {}
  UnfoldFuncOptions(int64_t kernel_size) : kernel_size_(Ints{kernel_size}) {}
  KILN_ARG(UnfoldFuncOptions, Ints, kernel_size, {})
  KILN_ARG(UnfoldFuncOptions, Ints, dilation, {1})
  KILN_ARG(UnfoldFuncOptions, Ints, padding, {0})
  KILN_ARG(UnfoldFuncOptions, Ints, stride, {1})
};

struct AdaptiveMaxPool2dFuncOptions {
  AdaptiveMaxPool2dFuncOptions(std::vector<int64_t> output_size) : output_size_(std::move(output_size)) {}
  AdaptiveMaxPool2dFuncOptions(int64_t output_size) : output_size_(Ints{output_size}) {}
  KILN_ARG(AdaptiveMaxPool2dFuncOptions, Ints, output_size, {})
};
using AdaptiveMaxPool1dFuncOptions = AdaptiveMaxPool2dFuncOptions;

struct DropoutFuncOptions {
  KILN_ARG(DropoutFuncOptions, double, p, 0.5)
  KILN_ARG(DropoutFuncOptions, bool, training, true)
  KILN_ARG(DropoutFuncOptions, bool, inplace, false)
};

// Losses (runtime/loss.h); reduction is "mean", "sum" or "none".
struct MSELossFuncOptions {
  KILN_ARG(MSELossFuncOptions, std::string, reduction, "mean")
};
using L1LossFuncOptions = MSELossFuncOptions;
struct NLLLossFuncOptions {
  KILN_ARG(NLLLossFuncOptions, Tensor, weight, {})
  KILN_ARG(NLLLossFuncOptions, int64_t, ignore_index, -100)
  KILN_ARG(NLLLossFuncOptions, std::string, reduction, "mean")
};
struct CrossEntropyFuncOptions {
  KILN_ARG(CrossEntropyFuncOptions, Tensor, weight, {})
  KILN_ARG(CrossEntropyFuncOptions, int64_t, ignore_index, -100)
  KILN_ARG(CrossEntropyFuncOptions, std::string, reduction, "mean")
  KILN_ARG(CrossEntropyFuncOptions, double, label_smoothing, 0.0)
};
struct BinaryCrossEntropyWithLogitsFuncOptions {
  KILN_ARG(BinaryCrossEntropyWithLogitsFuncOptions, Tensor, weight, {})
  KILN_ARG(BinaryCrossEntropyWithLogitsFuncOptions, std::string, reduction, "mean")
  KILN_ARG(BinaryCrossEntropyWithLogitsFuncOptions, Tensor, pos_weight, {})
};

namespace functional {
using kiln::nn::AdaptiveAvgPool2dFuncOptions;
using kiln::nn::BinaryCrossEntropyWithLogitsFuncOptions;
using kiln::nn::CrossEntropyFuncOptions;
using kiln::nn::L1LossFuncOptions;
using kiln::nn::MSELossFuncOptions;
using kiln::nn::NLLLossFuncOptions;
using kiln::nn::AvgPool1dFuncOptions;
using kiln::nn::AvgPool2dFuncOptions;
using kiln::nn::Conv1dFuncOptions;
using kiln::nn::CosineSimilarityFuncOptions;
using kiln::nn::GroupNormFuncOptions;
using kiln::nn::InterpolateFuncOptions;
using kiln::nn::MaxPool1dFuncOptions;
using kiln::nn::NormalizeFuncOptions;
using kiln::nn::PadFuncOptions;
using kiln::nn::PairwiseDistanceFuncOptions;
using kiln::nn::PixelShuffleFuncOptions;
using kiln::nn::BatchNormFuncOptions;
using kiln::nn::CELUFuncOptions;
using kiln::nn::Conv2dFuncOptions;
using kiln::nn::DropoutFuncOptions;
using kiln::nn::ELUFuncOptions;
using kiln::nn::GELUFuncOptions;
using kiln::nn::HardswishFuncOptions;
using kiln::nn::HardtanhFuncOptions;
using kiln::nn::LayerNormFuncOptions;
using kiln::nn::LeakyReLUFuncOptions;
using kiln::nn::LogSoftmaxFuncOptions;
using kiln::nn::MaxPool2dFuncOptions;
using kiln::nn::MishFuncOptions;
using kiln::nn::ReLU6FuncOptions;
using kiln::nn::ReLUFuncOptions;
using kiln::nn::SELUFuncOptions;
using kiln::nn::SiLUFuncOptions;
using kiln::nn::SoftmaxFuncOptions;
using kiln::nn::SoftplusFuncOptions;
using kiln::nn::ThresholdFuncOptions;
using kiln::nn::ConvTranspose1dFuncOptions;
using kiln::nn::ConvTranspose2dFuncOptions;
using kiln::nn::UnfoldFuncOptions;
using kiln::nn::AdaptiveMaxPool1dFuncOptions;
using kiln::nn::AdaptiveMaxPool2dFuncOptions;

namespace detail {
// torch's inplace=true: the result is written into x's memory and x is returned.
inline Tensor maybe_inplace(Tensor x, const Tensor &result, bool inplace) {
  if (!inplace) return result;
  x.copy_(result);
  return x;
}
} // namespace detail

inline Tensor relu(const Tensor &x, const ReLUFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::relu(x), o.inplace());
}
inline Tensor relu6(const Tensor &x, const ReLU6FuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::hardtanh(x, 0, 6), o.inplace());
}
inline Tensor leaky_relu(const Tensor &x, const LeakyReLUFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::leaky_relu(x, o.negative_slope()), o.inplace());
}
inline Tensor elu(const Tensor &x, const ELUFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::elu(x, o.alpha()), o.inplace());
}
inline Tensor celu(const Tensor &x, const CELUFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::celu(x, o.alpha()), o.inplace());
}
inline Tensor selu(const Tensor &x, const SELUFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::selu(x), o.inplace());
}
inline Tensor silu(const Tensor &x, const SiLUFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::silu(x), o.inplace());
}
inline Tensor mish(const Tensor &x, const MishFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::mish(x), o.inplace());
}
inline Tensor hardswish(const Tensor &x, const HardswishFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::hardswish(x), o.inplace());
}
inline Tensor hardsigmoid(const Tensor &x) { return kiln::hardsigmoid(x); }
inline Tensor gelu(const Tensor &x, const GELUFuncOptions &o = {}) { return kiln::gelu(x, o.approximate()); }
inline Tensor hardtanh(const Tensor &x, const HardtanhFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::hardtanh(x, o.min_val(), o.max_val()), o.inplace());
}
inline Tensor softplus(const Tensor &x, const SoftplusFuncOptions &o = {}) {
  return kiln::softplus(x, o.beta(), o.threshold());
}
inline Tensor softsign(const Tensor &x) { return kiln::softsign(x); }
inline Tensor logsigmoid(const Tensor &x) { return kiln::log_sigmoid(x); }
inline Tensor threshold(const Tensor &x, const ThresholdFuncOptions &o) {
  return detail::maybe_inplace(x, kiln::threshold(x, o.threshold(), o.value()), o.inplace());
}
inline Tensor softmax(const Tensor &x, const SoftmaxFuncOptions &o) { return kiln::softmax(x, o.dim(), o.dtype()); }
inline Tensor log_softmax(const Tensor &x, const LogSoftmaxFuncOptions &o) {
  return kiln::log_softmax(x, o.dim(), o.dtype());
}
inline Tensor layer_norm(const Tensor &x, const LayerNormFuncOptions &o) {
  return kiln::layer_norm(x, o.normalized_shape(), o.weight(), o.bias(), o.eps());
}
inline Tensor batch_norm(const Tensor &x, const Tensor &running_mean, const Tensor &running_var,
                         const BatchNormFuncOptions &o = {}) {
  return kiln::batch_norm(x, o.weight(), o.bias(), running_mean, running_var, o.training(), o.momentum(), o.eps());
}
inline Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias = {}) {
  return kiln::linear(x, weight, bias);
}
inline Tensor conv2d(const Tensor &x, const Tensor &weight, const Conv2dFuncOptions &o = {}) {
  return kiln::conv2d(x, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}
inline Tensor max_pool2d(const Tensor &x, const MaxPool2dFuncOptions &o) {
  return kiln::max_pool2d(x, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}
inline std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor &x, const MaxPool2dFuncOptions &o) {
  return kiln::max_pool2d_with_indices(x, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}
inline Tensor avg_pool2d(const Tensor &x, const AvgPool2dFuncOptions &o) {
  return kiln::avg_pool2d(x, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(), o.count_include_pad());
}
inline Tensor adaptive_avg_pool2d(const Tensor &x, const AdaptiveAvgPool2dFuncOptions &o) {
  return kiln::adaptive_avg_pool2d(x, o.output_size());
}
inline Tensor conv1d(const Tensor &x, const Tensor &weight, const Conv1dFuncOptions &o = {}) {
  return kiln::conv1d(x, weight, o.bias(), o.stride(), o.padding(), o.dilation(), o.groups());
}
inline Tensor max_pool1d(const Tensor &x, const MaxPool1dFuncOptions &o) {
  return kiln::max_pool1d(x, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}
inline std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor &x, const MaxPool1dFuncOptions &o) {
  return kiln::max_pool1d_with_indices(x, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}
inline Tensor avg_pool1d(const Tensor &x, const AvgPool1dFuncOptions &o) {
  return kiln::avg_pool1d(x, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(), o.count_include_pad());
}
inline Tensor group_norm(const Tensor &x, const GroupNormFuncOptions &o) {
  return kiln::group_norm(x, o.num_groups(), o.weight(), o.bias(), o.eps());
}
inline Tensor normalize(const Tensor &x, const NormalizeFuncOptions &o = {}) {
  return kiln::normalize(x, o.p(), o.dim(), o.eps());
}
inline Tensor cosine_similarity(const Tensor &a, const Tensor &b, const CosineSimilarityFuncOptions &o = {}) {
  return kiln::cosine_similarity(a, b, o.dim(), o.eps());
}
inline Tensor pairwise_distance(const Tensor &a, const Tensor &b, const PairwiseDistanceFuncOptions &o = {}) {
  return kiln::pairwise_distance(a, b, o.p(), o.eps(), o.keepdim());
}
inline Tensor pad(const Tensor &x, const PadFuncOptions &o) {
  return kiln::pad(x, o.pad(), o.mode(), o.mode() == kConstant ? std::optional<double>(o.value()) : std::nullopt);
}
inline Tensor interpolate(const Tensor &x, const InterpolateFuncOptions &o = {}) {
  return kiln::interpolate(x, o.size(), o.scale_factor(), o.mode(), o.align_corners());
}
inline Tensor pixel_shuffle(const Tensor &x, const PixelShuffleFuncOptions &o) {
  return kiln::pixel_shuffle(x, o.upscale_factor());
}
inline Tensor embedding(const Tensor &input, const Tensor &weight) { return kiln::embedding(weight, input); }
inline Tensor one_hot(const Tensor &x, int64_t num_classes = -1) { return kiln::one_hot(x, num_classes); }
inline Tensor conv_transpose2d(const Tensor &x, const Tensor &weight, const ConvTranspose2dFuncOptions &o = {}) {
  return kiln::conv_transpose2d(x, weight, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(),
                                o.dilation());
}
inline Tensor conv_transpose1d(const Tensor &x, const Tensor &weight, const ConvTranspose1dFuncOptions &o = {}) {
  return kiln::conv_transpose1d(x, weight, o.bias(), o.stride(), o.padding(), o.output_padding(), o.groups(),
                                o.dilation());
}
// torch's F::unfold: im2col, [N, C, H, W] -> [N, C * kh * kw, L].
inline Tensor unfold(const Tensor &x, const UnfoldFuncOptions &o) {
  return kiln::im2col(x, o.kernel_size(), o.dilation(), o.padding(), o.stride());
}
inline Tensor adaptive_max_pool2d(const Tensor &x, const AdaptiveMaxPool2dFuncOptions &o) {
  return std::get<0>(kiln::adaptive_max_pool2d(x, o.output_size()));
}
inline Tensor adaptive_max_pool1d(const Tensor &x, const AdaptiveMaxPool1dFuncOptions &o) {
  return std::get<0>(kiln::adaptive_max_pool1d(x, o.output_size()));
}
inline std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor &x,
                                                                   const AdaptiveMaxPool2dFuncOptions &o) {
  return kiln::adaptive_max_pool2d(x, o.output_size());
}
inline std::tuple<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor &x,
                                                                   const AdaptiveMaxPool1dFuncOptions &o) {
  return kiln::adaptive_max_pool1d(x, o.output_size());
}
inline Tensor dropout(const Tensor &x, const DropoutFuncOptions &o = {}) {
  return detail::maybe_inplace(x, kiln::dropout(x, o.p(), o.training()), o.inplace());
}
inline Tensor mse_loss(const Tensor &input, const Tensor &target, const MSELossFuncOptions &o = {}) {
  return kiln::mse_loss(input, target, o.reduction());
}
inline Tensor l1_loss(const Tensor &input, const Tensor &target, const L1LossFuncOptions &o = {}) {
  return kiln::l1_loss(input, target, o.reduction());
}
inline Tensor nll_loss(const Tensor &input, const Tensor &target, const NLLLossFuncOptions &o = {}) {
  return kiln::nll_loss(input, target, o.weight(), o.ignore_index(), o.reduction());
}
inline Tensor cross_entropy(const Tensor &input, const Tensor &target, const CrossEntropyFuncOptions &o = {}) {
  return kiln::cross_entropy(input, target, o.weight(), o.ignore_index(), o.reduction(), o.label_smoothing());
}
inline Tensor binary_cross_entropy_with_logits(const Tensor &input, const Tensor &target,
                                               const BinaryCrossEntropyWithLogitsFuncOptions &o = {}) {
  return kiln::binary_cross_entropy_with_logits(input, target, o.weight(), o.reduction(), o.pos_weight());
}
} // namespace functional
} // namespace kiln::nn
