// The public eager ops: libtorch's names, argument order and semantics.
//
// Every op is listed once in runtime/ops.def. Each function here:
//   1. validates its arguments (kiln::Error naming op, shapes/dtypes, argument);
//   2. when tracing is active, records itself (KILN_TRACE, runtime/trace_hook.h);
//   3. computes its result's metadata; returns it as-is if any input is meta;
//   4. computes the values.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/op_lists.h"
#include "runtime/tensor.h"

namespace kiln {

// ---- factories
Tensor empty(IntArrayRef size, TensorOptions options = {});
Tensor zeros(IntArrayRef size, TensorOptions options = {});
Tensor ones(IntArrayRef size, TensorOptions options = {});
Tensor full(IntArrayRef size, const Scalar &fill_value, TensorOptions options = {});
Tensor empty_like(const Tensor &t, TensorOptions options = {});
Tensor zeros_like(const Tensor &t, TensorOptions options = {});
Tensor ones_like(const Tensor &t, TensorOptions options = {});
Tensor full_like(const Tensor &t, const Scalar &fill_value, TensorOptions options = {});
Tensor arange(const Scalar &end, TensorOptions options = {});
Tensor arange(const Scalar &start, const Scalar &end, const Scalar &step = 1, TensorOptions options = {});
Tensor linspace(const Scalar &start, const Scalar &end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m, TensorOptions options = {});
// x.numel() as a 0-d int64 tensor (torch's x.sym_numel()). Traced, so a function compiled
// over symbolic sizes computes with the call's count, where x.numel() would be the traced one.
Tensor sym_numel(const Tensor &x);
Tensor randn(IntArrayRef size, TensorOptions options = {});
Tensor rand(IntArrayRef size, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions options = kInt64);
Tensor randint(int64_t high, IntArrayRef size, TensorOptions options = kInt64);
Tensor randn_like(const Tensor &t, TensorOptions options = {});
Tensor rand_like(const Tensor &t, TensorOptions options = {});
// Non-owning view of user memory (contiguous strides unless given).
Tensor from_blob(void *data, IntArrayRef sizes, TensorOptions options = {});
Tensor from_blob(void *data, IntArrayRef sizes, IntArrayRef strides, TensorOptions options = {});
// Copies of C++ data: tensor({1.f, 2.f}), tensor(std::vector<int64_t>{...}).
Tensor tensor(const std::vector<float> &values, TensorOptions options = {});
Tensor tensor(const std::vector<double> &values, TensorOptions options = kFloat64);
Tensor tensor(const std::vector<int64_t> &values, TensorOptions options = kInt64);
Tensor tensor(const std::vector<int32_t> &values, TensorOptions options = kInt32);
Tensor tensor(const std::vector<bool> &values, TensorOptions options = kBool);
Tensor tensor(std::initializer_list<float> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<double> values, TensorOptions options = kFloat64);
Tensor tensor(std::initializer_list<int64_t> values, TensorOptions options = kInt64);
Tensor tensor(std::initializer_list<int> values, TensorOptions options = kInt64);
Tensor scalar_tensor(const Scalar &s, TensorOptions options = {});

// Reproducible random numbers: every random factory draws from one global
// counter-based stream, so results depend on the seed and the call order only
// (never on the thread count).
void manual_seed(uint64_t seed);

// ---- unary elementwise
Tensor neg(const Tensor &x);
Tensor abs(const Tensor &x);
// Declared from the lists of runtime/ops.def (runtime/op_lists.h), one per line: the
// vector-math functions (KILN_VECMATH_OPS: exp, expm1, log, log1p, tanh, erf, sigmoid,
// ...; bool and integer inputs promote to float32, as torch's) and the composed ops
// (KILN_COMPOSED_OPS: silu, hardsigmoid (relu6(x + 3) / 6), hardswish, mish, log_sigmoid,
// selu, ...; float inputs only).
// Each is `Tensor fn(const Tensor &x);`; docs/ops-reference.md lists them by name.
#define KILN_DECLARE_UNARY_OP(Id, fn, definition) Tensor fn(const Tensor &x);
KILN_VECMATH_OPS(KILN_DECLARE_UNARY_OP)
KILN_COMPOSED_OPS(KILN_DECLARE_UNARY_OP)
// ... and the C library's functions (KILN_LIBM_OPS: sin, cos, tan, asin, acos, atan, sinh,
// cosh, asinh, acosh, atanh, log2, log10; bool and integer inputs promote to float32).
KILN_LIBM_OPS(KILN_DECLARE_UNARY_OP)
#undef KILN_DECLARE_UNARY_OP
Tensor sqrt(const Tensor &x);
Tensor rsqrt(const Tensor &x);
Tensor relu(const Tensor &x);
// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor &x, const std::string &approximate = "none");
Tensor reciprocal(const Tensor &x);
Tensor square(const Tensor &x);
Tensor floor(const Tensor &x);
Tensor ceil(const Tensor &x);
Tensor round(const Tensor &x);
Tensor sign(const Tensor &x);
Tensor logical_not(const Tensor &x);
// x.to(dtype): a copy converted to dtype (x itself when the dtype matches).
Tensor to(const Tensor &x, DType dtype);

// ---- binary / ternary elementwise with broadcasting
Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha = 1);
Tensor add(const Tensor &a, const Scalar &b, const Scalar &alpha = 1);
Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha = 1);
Tensor sub(const Tensor &a, const Scalar &b, const Scalar &alpha = 1);
Tensor mul(const Tensor &a, const Tensor &b);
Tensor mul(const Tensor &a, const Scalar &b);
// rounding_mode: nullopt (true division), "trunc" or "floor".
Tensor div(const Tensor &a, const Tensor &b, std::optional<std::string> rounding_mode = std::nullopt);
Tensor div(const Tensor &a, const Scalar &b, std::optional<std::string> rounding_mode = std::nullopt);
Tensor pow(const Tensor &a, const Tensor &exponent);
Tensor pow(const Tensor &a, const Scalar &exponent);
Tensor pow(const Scalar &a, const Tensor &exponent);
Tensor maximum(const Tensor &a, const Tensor &b);
Tensor minimum(const Tensor &a, const Tensor &b);
Tensor remainder(const Tensor &a, const Tensor &b);
Tensor remainder(const Tensor &a, const Scalar &b);
// The C library's binary functions (KILN_LIBM2_OPS: atan2, hypot, fmod, copysign), each
// `Tensor fn(const Tensor &a, const Tensor &b);` with torch's dtype rules: atan2 and
// copysign promote bool and integers to float32, hypot takes floating inputs only, fmod
// keeps integer types (C's %: the dividend's sign; a zero divisor raises) but not bool.
#define KILN_DECLARE_BINARY_OP(Id, fn, definition) Tensor fn(const Tensor &a, const Tensor &b);
KILN_LIBM2_OPS(KILN_DECLARE_BINARY_OP)
#undef KILN_DECLARE_BINARY_OP
Tensor fmod(const Tensor &a, const Scalar &b);
Tensor copysign(const Tensor &a, const Scalar &b);
Tensor eq(const Tensor &a, const Tensor &b);
Tensor eq(const Tensor &a, const Scalar &b);
Tensor ne(const Tensor &a, const Tensor &b);
Tensor ne(const Tensor &a, const Scalar &b);
Tensor lt(const Tensor &a, const Tensor &b);
Tensor lt(const Tensor &a, const Scalar &b);
Tensor le(const Tensor &a, const Tensor &b);
Tensor le(const Tensor &a, const Scalar &b);
Tensor gt(const Tensor &a, const Tensor &b);
Tensor gt(const Tensor &a, const Scalar &b);
Tensor ge(const Tensor &a, const Tensor &b);
Tensor ge(const Tensor &a, const Scalar &b);
Tensor logical_and(const Tensor &a, const Tensor &b);
Tensor logical_or(const Tensor &a, const Tensor &b);
Tensor where(const Tensor &condition, const Tensor &a, const Tensor &b);
Tensor where(const Tensor &condition, const Tensor &a, const Scalar &b);
Tensor where(const Tensor &condition, const Scalar &a, const Tensor &b);
Tensor clamp(const Tensor &x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor masked_fill(const Tensor &x, const Tensor &mask, const Scalar &value);
Tensor lerp(const Tensor &start, const Tensor &end, const Scalar &weight);
Tensor lerp(const Tensor &start, const Tensor &end, const Tensor &weight);

// ---- in-place (the result must have self's shape; self's dtype must hold it)
Tensor &add_(Tensor &self, const Tensor &other, const Scalar &alpha = 1);
Tensor &add_(Tensor &self, const Scalar &other, const Scalar &alpha = 1);
Tensor &sub_(Tensor &self, const Tensor &other, const Scalar &alpha = 1);
Tensor &sub_(Tensor &self, const Scalar &other, const Scalar &alpha = 1);
Tensor &mul_(Tensor &self, const Tensor &other);
Tensor &mul_(Tensor &self, const Scalar &other);
Tensor &div_(Tensor &self, const Tensor &other);
Tensor &div_(Tensor &self, const Scalar &other);
#define KILN_DECLARE_BINARY_INPLACE(Id, fn, definition) Tensor &fn##_(Tensor &self, const Tensor &other);
KILN_LIBM2_OPS(KILN_DECLARE_BINARY_INPLACE)
#undef KILN_DECLARE_BINARY_INPLACE
Tensor &fmod_(Tensor &self, const Scalar &other);
Tensor &copysign_(Tensor &self, const Scalar &other);
Tensor &clamp_(Tensor &self, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor &relu_(Tensor &self);
Tensor &zero_(Tensor &self);
Tensor &fill_(Tensor &self, const Scalar &value);
// Copies src (broadcast to self's shape, converted to self's dtype) into self.
Tensor &copy_(Tensor &self, const Tensor &src);

// ---- reductions over any set of dims (an empty dim list reduces all dims)
Tensor sum(const Tensor &x, std::optional<DType> dtype = std::nullopt);
Tensor sum(const Tensor &x, IntArrayRef dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor &x, std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor &x, IntArrayRef dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor &x, std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor &x, int64_t dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt);
Tensor amax(const Tensor &x, IntArrayRef dim = {}, bool keepdim = false);
Tensor amin(const Tensor &x, IntArrayRef dim = {}, bool keepdim = false);
Tensor max(const Tensor &x);
std::tuple<Tensor, Tensor> max(const Tensor &x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor &x);
std::tuple<Tensor, Tensor> min(const Tensor &x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor &x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor &x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// correction defaults to 1 (Bessel), as torch.var.
Tensor var(const Tensor &x, IntArrayRef dim = {}, std::optional<double> correction = std::nullopt, bool keepdim = false);
Tensor std(const Tensor &x, IntArrayRef dim = {}, std::optional<double> correction = std::nullopt, bool keepdim = false);
Tensor norm(const Tensor &x, const Scalar &p = 2, IntArrayRef dim = {}, bool keepdim = false);

// ---- views and movement (free-function forms of the Tensor methods)
Tensor view(const Tensor &x, IntArrayRef shape);
Tensor reshape(const Tensor &x, IntArrayRef shape);
Tensor transpose(const Tensor &x, int64_t dim0, int64_t dim1);
Tensor t(const Tensor &x);
Tensor permute(const Tensor &x, IntArrayRef dims);
Tensor narrow(const Tensor &x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor &x, int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> end = std::nullopt, int64_t step = 1);
Tensor select(const Tensor &x, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor &x, int64_t dim);
Tensor squeeze(const Tensor &x);
Tensor squeeze(const Tensor &x, int64_t dim);
Tensor expand(const Tensor &x, IntArrayRef size);
Tensor flatten(const Tensor &x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor as_strided(const Tensor &x, IntArrayRef size, IntArrayRef stride,
                  std::optional<int64_t> storage_offset = std::nullopt);
Tensor contiguous(const Tensor &x);
// x with `format`'s strides (x itself when it has them). Layout is not part of
// a traced graph's values: under tracing ChannelsLast returns x unchanged, and
// the layout pass decides the graph's layouts.
Tensor contiguous(const Tensor &x, MemoryFormat format);
Tensor clone(const Tensor &x);

// ---- nn
Tensor softmax(const Tensor &x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor log_softmax(const Tensor &x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor layer_norm(const Tensor &x, IntArrayRef normalized_shape, const Tensor &weight = {},
                  const Tensor &bias = {}, double eps = 1e-5);
// Inference with running statistics when training is false; training=true normalizes
// with the batch statistics and, as torch, updates running_mean / running_var in place
// when they are given (momentum; unbiased variance). Traced, the update becomes ops
// with write-backs into the running tensors.
Tensor batch_norm(const Tensor &x, const Tensor &weight, const Tensor &bias, const Tensor &running_mean,
                  const Tensor &running_var, bool training = false, double momentum = 0.1,
                  double eps = 1e-5);
Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias = {});
Tensor matmul(const Tensor &a, const Tensor &b);
Tensor mm(const Tensor &a, const Tensor &b);
Tensor bmm(const Tensor &a, const Tensor &b);
Tensor addmm(const Tensor &input, const Tensor &mat1, const Tensor &mat2, const Scalar &beta = 1,
             const Scalar &alpha = 1);
Tensor conv2d(const Tensor &input, const Tensor &weight, const Tensor &bias = {}, IntArrayRef stride = 1,
              IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
Tensor max_pool2d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  IntArrayRef dilation = 1, bool ceil_mode = false);
// max_pool2d's values and the int64 index of each into its input plane's H * W, as torch's:
// ties keep the first position, a NaN in the window the last NaN's.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride = {},
                                                   IntArrayRef padding = 0, IntArrayRef dilation = 1,
                                                   bool ceil_mode = false);
Tensor avg_pool2d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor &x, IntArrayRef output_size);
// torch::embedding(weight, indices)
Tensor embedding(const Tensor &weight, const Tensor &indices);
// Identity unless train is true; then, as torch, each element is zeroed with probability p (a Philox mask,
// the same for a seed at any thread count) and the kept ones scaled by 1 / (1 - p).
Tensor dropout(const Tensor &x, double p, bool train);
// Training-mode dropout's keep mask (bool, x's sizes; x's values are not read): element i is kept when
// the i-th Philox uniform of its draws is >= p. offset < 0 (eager) reserves fresh draws; a traced mask
// records its offset in the call's draws, so that compiled code draws what eager drew
// (runtime/random_stream.h).
Tensor dropout_mask(const Tensor &x, double p, int64_t offset = -1);
Tensor tril(const Tensor &x, int64_t diagonal = 0);
Tensor triu(const Tensor &x, int64_t diagonal = 0);
Tensor cat(const TensorList &tensors, int64_t dim = 0);
Tensor stack(const TensorList &tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor &x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor &x, IntArrayRef split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor &x, int64_t chunks, int64_t dim = 0);
Tensor index_select(const Tensor &x, int64_t dim, const Tensor &index);
Tensor gather(const Tensor &x, int64_t dim, const Tensor &index);
// Scans along dim, run eagerly inside compiled code too. cumsum / cumprod: bool and integer
// inputs give int64 unless dtype is given; float32 accumulates in double, as torch's CPU kernels.
Tensor cumsum(const Tensor &x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor cumprod(const Tensor &x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor logcumsumexp(const Tensor &x, int64_t dim);
// Sorting along dim: (values, int64 indices). Always stable (equal values keep their order);
// NaN sorts above every number, as torch's.
std::tuple<Tensor, Tensor> sort(const Tensor &x, int64_t dim = -1, bool descending = false);
std::tuple<Tensor, Tensor> sort(const Tensor &x, std::optional<bool> stable, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor &x, int64_t dim = -1, bool descending = false);
// The k largest (smallest) elements along dim and their int64 indices, in sorted order (also
// for sorted=false, whose order torch leaves unspecified); ties keep the lower index first.
std::tuple<Tensor, Tensor> topk(const Tensor &x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// Scatter along dim: a copy of x where out[i][index[i][j]] = src[i][j] (for dim 1; index has x's
// rank and is no larger than src, nor than x outside dim). A repeated index keeps the last write.
Tensor scatter(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &src);
Tensor scatter(const Tensor &x, int64_t dim, const Tensor &index, const Scalar &value);
Tensor scatter_add(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &src);
// reduce: "sum", "prod", "mean", "amax", "amin" (NaN propagates); include_self=false leaves x's
// own value out wherever something is scattered to. "mean" of integers rounds down, as torch's.
Tensor scatter_reduce(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &src, const std::string &reduce,
                      bool include_self = true);
// A copy of x with alpha * source.select(dim, k) added to x.select(dim, index[k]) for every k.
Tensor index_add(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &source, const Scalar &alpha = 1);
// Advanced indexing, torch's aten::index: one entry per leading dim of x, nullopt for a
// whole dim; int64 / int32 tensors broadcast together and pick elements (the index shape
// replaces the indexed dims where they are adjacent, and comes first otherwise); a bool
// mask covers as many dims as it has and indexes by its nonzero() positions (eager
// only: the shape depends on values). The torch::indexing forms, x.index({Slice(), idx})
// and x.index_put_({mask}, 0.0): runtime/indexing.h.
Tensor index(const Tensor &x, const std::vector<std::optional<Tensor>> &indices);
// A copy of x with values (x's dtype, broadcast to index(x, indices)'s shape) written at
// the indexed places; accumulate adds them instead (repeated indices add up).
Tensor index_put(const Tensor &x, const std::vector<std::optional<Tensor>> &indices, const Tensor &values,
                 bool accumulate = false);
Tensor &index_put_(Tensor &self, const std::vector<std::optional<Tensor>> &indices, const Tensor &values,
                   bool accumulate = false);
// Shapes that depend on the values: eager only (a traced call reports them as item() is).
// nonzero: [count, x.dim()] int64 coordinates in row-major order; masked_select: 1-D, mask broadcast.
Tensor nonzero(const Tensor &x);
Tensor masked_select(const Tensor &x, const Tensor &mask);
// Random: bernoulli(p) draws 1 with probability p per element (p's floating dtype); normal(mean,
// std, size). A traced call records the drawn values as constants, as randn's.
Tensor bernoulli(const Tensor &p);
Tensor bernoulli(const Tensor &x, double p);
Tensor normal(double mean, double std, IntArrayRef size, TensorOptions options = {});
Tensor scaled_dot_product_attention(const Tensor &query, const Tensor &key, const Tensor &value,
                                    const Tensor &attn_mask = {}, double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt);

// ---- composites: torch's functions that are compositions of the ops above, as torch's
// CompositeImplicitAutograd ones are (runtime/kernels/composite.cpp). Each validates its
// arguments (a kiln::Error naming it), then calls those ops: a traced call records them,
// so a compiled function fuses them with their neighbours, and they have no table entry.
// Activations (float inputs only, as torch's, except hardtanh, threshold, clamp_min/max):
Tensor leaky_relu(const Tensor &x, const Scalar &negative_slope = 0.01);
Tensor elu(const Tensor &x, const Scalar &alpha = 1, const Scalar &scale = 1, const Scalar &input_scale = 1);
Tensor celu(const Tensor &x, const Scalar &alpha = 1);
Tensor softplus(const Tensor &x, const Scalar &beta = 1, const Scalar &threshold = 20);
Tensor hardtanh(const Tensor &x, const Scalar &min_val = -1, const Scalar &max_val = 1);
// torch.threshold: value where x <= threshold, else x (x's dtype).
Tensor threshold(const Tensor &x, const Scalar &threshold, const Scalar &value);
Tensor clamp_min(const Tensor &x, const Scalar &min);
Tensor clamp_max(const Tensor &x, const Scalar &max);
// log(z / (1 - z)), z = clamp(x, eps, 1 - eps) when eps is given; integer inputs promote to float32.
Tensor logit(const Tensor &x, std::optional<double> eps = std::nullopt);
// Classification (bool results; integer inputs are never NaN or infinite).
Tensor isnan(const Tensor &x);
Tensor isinf(const Tensor &x);
Tensor isposinf(const Tensor &x);
Tensor isneginf(const Tensor &x);
Tensor isfinite(const Tensor &x);
// NaN -> nan (0), +inf -> posinf (the dtype's max), -inf -> neginf (its lowest); integers: a copy.
Tensor nan_to_num(const Tensor &x, std::optional<double> nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
// Reductions: any / all of nonzero elements (bool results); logsumexp (float), stable as torch's.
Tensor any(const Tensor &x);
Tensor any(const Tensor &x, int64_t dim, bool keepdim = false);
Tensor all(const Tensor &x);
Tensor all(const Tensor &x, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor &x, IntArrayRef dim, bool keepdim = false);
// Eager comparisons of whole tensors (they read values: a traced call reports them as item() is).
bool allclose(const Tensor &a, const Tensor &b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
bool equal(const Tensor &a, const Tensor &b);
// Linear algebra: outer product of two 1-D tensors; beta * input + alpha * (sum of) batch products.
Tensor outer(const Tensor &a, const Tensor &b);
Tensor baddbmm(const Tensor &input, const Tensor &batch1, const Tensor &batch2, const Scalar &beta = 1,
               const Scalar &alpha = 1);
Tensor addbmm(const Tensor &input, const Tensor &batch1, const Tensor &batch2, const Scalar &beta = 1,
              const Scalar &alpha = 1);
// n-th forward difference along dim.
Tensor diff(const Tensor &x, int64_t n = 1, int64_t dim = -1);
// Movement: views where torch's are views, copies (cat, reshape of an expand) where torch copies.
std::vector<Tensor> unbind(const Tensor &x, int64_t dim = 0);
Tensor movedim(const Tensor &x, IntArrayRef source, IntArrayRef destination);
Tensor unflatten(const Tensor &x, int64_t dim, IntArrayRef sizes);
Tensor repeat(const Tensor &x, IntArrayRef repeats);
Tensor tile(const Tensor &x, IntArrayRef reps);
Tensor roll(const Tensor &x, IntArrayRef shifts, IntArrayRef dims = {});
Tensor flip(const Tensor &x, IntArrayRef dims);
// int64 class indices -> int64 one-hot rows; num_classes -1: max + 1 (read from the values).
Tensor one_hot(const Tensor &indices, int64_t num_classes = -1);
// nn (runtime/kernels/composite_nn.cpp): relu6 = hardtanh(x, 0, 6); the norms over their
// dims with biased variance (float inputs), torch's defaults.
Tensor relu6(const Tensor &x);
Tensor group_norm(const Tensor &input, int64_t num_groups, const Tensor &weight = {}, const Tensor &bias = {},
                  double eps = 1e-5);
// Input statistics only (use_input_stats=false normalizes with the running ones, as batch_norm).
Tensor instance_norm(const Tensor &input, const Tensor &running_mean = {}, const Tensor &running_var = {},
                     const Tensor &weight = {}, const Tensor &bias = {}, bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);
// eps defaults to the dtype's epsilon, as torch's.
Tensor rms_norm(const Tensor &input, IntArrayRef normalized_shape, const Tensor &weight = {},
                std::optional<double> eps = std::nullopt);
Tensor local_response_norm(const Tensor &input, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
Tensor normalize(const Tensor &input, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
Tensor cosine_similarity(const Tensor &x1, const Tensor &x2, int64_t dim = 1, double eps = 1e-8);
Tensor pairwise_distance(const Tensor &x1, const Tensor &x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);
// 1-D forms through the 2-D ops: input [N, C, L] or [C, L].
Tensor conv1d(const Tensor &input, const Tensor &weight, const Tensor &bias = {}, IntArrayRef stride = 1,
              IntArrayRef padding = 0, IntArrayRef dilation = 1, int64_t groups = 1);
Tensor max_pool1d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  IntArrayRef dilation = 1, bool ceil_mode = false);
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride = {},
                                                   IntArrayRef padding = 0, IntArrayRef dilation = 1,
                                                   bool ceil_mode = false);
Tensor avg_pool1d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride = {}, IntArrayRef padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool1d(const Tensor &x, IntArrayRef output_size);
// torch.nn.functional.pad: pad = (left, right) of the last dim, then of the one before, ...;
// mode constant (value, default 0; negative padding crops), reflect, replicate, circular.
Tensor pad(const Tensor &x, IntArrayRef pad, const std::string &mode = "constant",
           std::optional<double> value = std::nullopt);
// torch.nn.functional.interpolate for [N, C, L] and [N, C, H, W]: mode nearest, linear (3-D) or
// bilinear (4-D, align_corners both ways); exactly one of size and scale_factor.
Tensor interpolate(const Tensor &x, std::optional<std::vector<int64_t>> size = std::nullopt,
                   std::optional<std::vector<double>> scale_factor = std::nullopt,
                   const std::string &mode = "nearest", std::optional<bool> align_corners = std::nullopt);
Tensor pixel_shuffle(const Tensor &x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor &x, int64_t downscale_factor);
// torch.einsum: "ij,jk->ik" (explicit output) or "ij,jk" (implicit: the subscripts that appear
// once, alphabetically); "..." broadcasts; a subscript repeated in one operand takes its diagonal;
// subscripts absent from the output are summed. Operands are contracted left to right, each pair
// through permute/reshape and bmm (runtime/kernels/composite_linalg.cpp). `path`, as torch's
// (opt_einsum's format), orders the contractions: pairs of positions in the list of
// remaining operands, each pair's product appended to the list.
Tensor einsum(const std::string &equation, const std::vector<Tensor> &operands,
              const std::optional<std::vector<int64_t>> &path = std::nullopt);
// Transposed convolutions (weight [C_in, C_out / groups, k...]), torch's argument order: the
// input zero-inserted by stride and padded, then conv2d with the flipped, group-transposed weight.
Tensor conv_transpose1d(const Tensor &input, const Tensor &weight, const Tensor &bias = {}, IntArrayRef stride = 1,
                        IntArrayRef padding = 0, IntArrayRef output_padding = 0, int64_t groups = 1,
                        IntArrayRef dilation = 1);
Tensor conv_transpose2d(const Tensor &input, const Tensor &weight, const Tensor &bias = {}, IntArrayRef stride = 1,
                        IntArrayRef padding = 0, IntArrayRef output_padding = 0, int64_t groups = 1,
                        IntArrayRef dilation = 1);
// torch.nn.functional.unfold's im2col: [N, C, H, W] (or [C, H, W]) -> [N, C * kh * kw, L] sliding blocks.
Tensor im2col(const Tensor &input, IntArrayRef kernel_size, IntArrayRef dilation = 1, IntArrayRef padding = 0,
              IntArrayRef stride = 1);
// Adaptive max pooling: the values and int64 indices into H * W (L), as torch's; window i spans
// [floor(i * H / oh), ceil((i + 1) * H / oh)); NaN propagates.
std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor &x, IntArrayRef output_size);
std::tuple<Tensor, Tensor> adaptive_max_pool1d(const Tensor &x, IntArrayRef output_size);
// torch.repeat_interleave: each element repeated `repeats` times along dim (flattened input when
// dim is nullopt). The tensor forms read the repeats' values (a traced call reports them as item()
// is); repeat_interleave(repeats) gives the indices [0] * r0 + [1] * r1 + ...
Tensor repeat_interleave(const Tensor &self, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor &self, const Tensor &repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor &repeats);
// Rounding toward zero, and x - trunc(x) (float; trunc of an integer tensor is a copy, frac an Error).
Tensor trunc(const Tensor &x);
Tensor frac(const Tensor &x);

// ---- threads
// Threads used by kiln's own kernels (default: the number of cores).
void set_num_threads(int n);
int get_num_threads();

} // namespace kiln
