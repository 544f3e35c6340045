// TEMPORARY weak stubs so that every layer links while op families land.
// Deleted once every op has its kernel.
#include "runtime/ops.h"
#pragma GCC diagnostic ignored "-Wunused-parameter"
namespace kiln {
__attribute__((weak)) Tensor empty(IntArrayRef size, TensorOptions options ) { KILN_FAIL("empty: not implemented yet"); }
__attribute__((weak)) Tensor zeros(IntArrayRef size, TensorOptions options ) { KILN_FAIL("zeros: not implemented yet"); }
__attribute__((weak)) Tensor ones(IntArrayRef size, TensorOptions options ) { KILN_FAIL("ones: not implemented yet"); }
__attribute__((weak)) Tensor full(IntArrayRef size, const Scalar &fill_value, TensorOptions options ) { KILN_FAIL("full: not implemented yet"); }
__attribute__((weak)) Tensor empty_like(const Tensor &t, TensorOptions options ) { KILN_FAIL("empty_like: not implemented yet"); }
__attribute__((weak)) Tensor zeros_like(const Tensor &t, TensorOptions options ) { KILN_FAIL("zeros_like: not implemented yet"); }
__attribute__((weak)) Tensor ones_like(const Tensor &t, TensorOptions options ) { KILN_FAIL("ones_like: not implemented yet"); }
__attribute__((weak)) Tensor full_like(const Tensor &t, const Scalar &fill_value, TensorOptions options ) { KILN_FAIL("full_like: not implemented yet"); }
__attribute__((weak)) Tensor arange(const Scalar &end, TensorOptions options ) { KILN_FAIL("arange: not implemented yet"); }
__attribute__((weak)) Tensor arange(const Scalar &start, const Scalar &end, const Scalar &step , TensorOptions options ) { KILN_FAIL("arange: not implemented yet"); }
__attribute__((weak)) Tensor linspace(const Scalar &start, const Scalar &end, int64_t steps, TensorOptions options ) { KILN_FAIL("linspace: not implemented yet"); }
__attribute__((weak)) Tensor eye(int64_t n, TensorOptions options ) { KILN_FAIL("eye: not implemented yet"); }
__attribute__((weak)) Tensor eye(int64_t n, int64_t m, TensorOptions options ) { KILN_FAIL("eye: not implemented yet"); }
__attribute__((weak)) Tensor randn(IntArrayRef size, TensorOptions options ) { KILN_FAIL("randn: not implemented yet"); }
__attribute__((weak)) Tensor rand(IntArrayRef size, TensorOptions options ) { KILN_FAIL("rand: not implemented yet"); }
__attribute__((weak)) Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions options ) { KILN_FAIL("randint: not implemented yet"); }
__attribute__((weak)) Tensor randint(int64_t high, IntArrayRef size, TensorOptions options ) { KILN_FAIL("randint: not implemented yet"); }
__attribute__((weak)) Tensor randn_like(const Tensor &t, TensorOptions options ) { KILN_FAIL("randn_like: not implemented yet"); }
__attribute__((weak)) Tensor rand_like(const Tensor &t, TensorOptions options ) { KILN_FAIL("rand_like: not implemented yet"); }
__attribute__((weak)) Tensor from_blob(void *data, IntArrayRef sizes, TensorOptions options ) { KILN_FAIL("from_blob: not implemented yet"); }
__attribute__((weak)) Tensor from_blob(void *data, IntArrayRef sizes, IntArrayRef strides, TensorOptions options ) { KILN_FAIL("from_blob: not implemented yet"); }
__attribute__((weak)) Tensor tensor(const std::vector<float> &values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(const std::vector<double> &values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(const std::vector<int64_t> &values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(const std::vector<int32_t> &values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(const std::vector<bool> &values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(std::initializer_list<float> values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(std::initializer_list<double> values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(std::initializer_list<int64_t> values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor tensor(std::initializer_list<int> values, TensorOptions options ) { KILN_FAIL("tensor: not implemented yet"); }
__attribute__((weak)) Tensor scalar_tensor(const Scalar &s, TensorOptions options ) { KILN_FAIL("scalar_tensor: not implemented yet"); }
__attribute__((weak)) void manual_seed(uint64_t seed) { KILN_FAIL("manual_seed: not implemented yet"); }
__attribute__((weak)) Tensor neg(const Tensor &x) { KILN_FAIL("neg: not implemented yet"); }
__attribute__((weak)) Tensor abs(const Tensor &x) { KILN_FAIL("abs: not implemented yet"); }
__attribute__((weak)) Tensor exp(const Tensor &x) { KILN_FAIL("exp: not implemented yet"); }
__attribute__((weak)) Tensor log(const Tensor &x) { KILN_FAIL("log: not implemented yet"); }
__attribute__((weak)) Tensor log1p(const Tensor &x) { KILN_FAIL("log1p: not implemented yet"); }
__attribute__((weak)) Tensor expm1(const Tensor &x) { KILN_FAIL("expm1: not implemented yet"); }
__attribute__((weak)) Tensor sqrt(const Tensor &x) { KILN_FAIL("sqrt: not implemented yet"); }
__attribute__((weak)) Tensor rsqrt(const Tensor &x) { KILN_FAIL("rsqrt: not implemented yet"); }
__attribute__((weak)) Tensor sin(const Tensor &x) { KILN_FAIL("sin: not implemented yet"); }
__attribute__((weak)) Tensor cos(const Tensor &x) { KILN_FAIL("cos: not implemented yet"); }
__attribute__((weak)) Tensor tanh(const Tensor &x) { KILN_FAIL("tanh: not implemented yet"); }
__attribute__((weak)) Tensor sigmoid(const Tensor &x) { KILN_FAIL("sigmoid: not implemented yet"); }
__attribute__((weak)) Tensor relu(const Tensor &x) { KILN_FAIL("relu: not implemented yet"); }
__attribute__((weak)) Tensor gelu(const Tensor &x, const std::string &approximate ) { KILN_FAIL("gelu: not implemented yet"); }
__attribute__((weak)) Tensor silu(const Tensor &x) { KILN_FAIL("silu: not implemented yet"); }
__attribute__((weak)) Tensor erf(const Tensor &x) { KILN_FAIL("erf: not implemented yet"); }
__attribute__((weak)) Tensor reciprocal(const Tensor &x) { KILN_FAIL("reciprocal: not implemented yet"); }
__attribute__((weak)) Tensor square(const Tensor &x) { KILN_FAIL("square: not implemented yet"); }
__attribute__((weak)) Tensor floor(const Tensor &x) { KILN_FAIL("floor: not implemented yet"); }
__attribute__((weak)) Tensor ceil(const Tensor &x) { KILN_FAIL("ceil: not implemented yet"); }
__attribute__((weak)) Tensor round(const Tensor &x) { KILN_FAIL("round: not implemented yet"); }
__attribute__((weak)) Tensor sign(const Tensor &x) { KILN_FAIL("sign: not implemented yet"); }
__attribute__((weak)) Tensor logical_not(const Tensor &x) { KILN_FAIL("logical_not: not implemented yet"); }
__attribute__((weak)) Tensor to(const Tensor &x, DType dtype) { KILN_FAIL("to: not implemented yet"); }
__attribute__((weak)) Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha ) { KILN_FAIL("add: not implemented yet"); }
__attribute__((weak)) Tensor add(const Tensor &a, const Scalar &b, const Scalar &alpha ) { KILN_FAIL("add: not implemented yet"); }
__attribute__((weak)) Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha ) { KILN_FAIL("sub: not implemented yet"); }
__attribute__((weak)) Tensor sub(const Tensor &a, const Scalar &b, const Scalar &alpha ) { KILN_FAIL("sub: not implemented yet"); }
__attribute__((weak)) Tensor mul(const Tensor &a, const Tensor &b) { KILN_FAIL("mul: not implemented yet"); }
__attribute__((weak)) Tensor mul(const Tensor &a, const Scalar &b) { KILN_FAIL("mul: not implemented yet"); }
__attribute__((weak)) Tensor div(const Tensor &a, const Tensor &b, std::optional<std::string> rounding_mode ) { KILN_FAIL("div: not implemented yet"); }
__attribute__((weak)) Tensor div(const Tensor &a, const Scalar &b, std::optional<std::string> rounding_mode ) { KILN_FAIL("div: not implemented yet"); }
__attribute__((weak)) Tensor pow(const Tensor &a, const Tensor &exponent) { KILN_FAIL("pow: not implemented yet"); }
__attribute__((weak)) Tensor pow(const Tensor &a, const Scalar &exponent) { KILN_FAIL("pow: not implemented yet"); }
__attribute__((weak)) Tensor pow(const Scalar &a, const Tensor &exponent) { KILN_FAIL("pow: not implemented yet"); }
__attribute__((weak)) Tensor maximum(const Tensor &a, const Tensor &b) { KILN_FAIL("maximum: not implemented yet"); }
__attribute__((weak)) Tensor minimum(const Tensor &a, const Tensor &b) { KILN_FAIL("minimum: not implemented yet"); }
__attribute__((weak)) Tensor remainder(const Tensor &a, const Tensor &b) { KILN_FAIL("remainder: not implemented yet"); }
__attribute__((weak)) Tensor remainder(const Tensor &a, const Scalar &b) { KILN_FAIL("remainder: not implemented yet"); }
__attribute__((weak)) Tensor eq(const Tensor &a, const Tensor &b) { KILN_FAIL("eq: not implemented yet"); }
__attribute__((weak)) Tensor eq(const Tensor &a, const Scalar &b) { KILN_FAIL("eq: not implemented yet"); }
__attribute__((weak)) Tensor ne(const Tensor &a, const Tensor &b) { KILN_FAIL("ne: not implemented yet"); }
__attribute__((weak)) Tensor ne(const Tensor &a, const Scalar &b) { KILN_FAIL("ne: not implemented yet"); }
__attribute__((weak)) Tensor lt(const Tensor &a, const Tensor &b) { KILN_FAIL("lt: not implemented yet"); }
__attribute__((weak)) Tensor lt(const Tensor &a, const Scalar &b) { KILN_FAIL("lt: not implemented yet"); }
__attribute__((weak)) Tensor le(const Tensor &a, const Tensor &b) { KILN_FAIL("le: not implemented yet"); }
__attribute__((weak)) Tensor le(const Tensor &a, const Scalar &b) { KILN_FAIL("le: not implemented yet"); }
__attribute__((weak)) Tensor gt(const Tensor &a, const Tensor &b) { KILN_FAIL("gt: not implemented yet"); }
__attribute__((weak)) Tensor gt(const Tensor &a, const Scalar &b) { KILN_FAIL("gt: not implemented yet"); }
__attribute__((weak)) Tensor ge(const Tensor &a, const Tensor &b) { KILN_FAIL("ge: not implemented yet"); }
__attribute__((weak)) Tensor ge(const Tensor &a, const Scalar &b) { KILN_FAIL("ge: not implemented yet"); }
__attribute__((weak)) Tensor logical_and(const Tensor &a, const Tensor &b) { KILN_FAIL("logical_and: not implemented yet"); }
__attribute__((weak)) Tensor logical_or(const Tensor &a, const Tensor &b) { KILN_FAIL("logical_or: not implemented yet"); }
__attribute__((weak)) Tensor where(const Tensor &condition, const Tensor &a, const Tensor &b) { KILN_FAIL("where: not implemented yet"); }
__attribute__((weak)) Tensor where(const Tensor &condition, const Tensor &a, const Scalar &b) { KILN_FAIL("where: not implemented yet"); }
__attribute__((weak)) Tensor where(const Tensor &condition, const Scalar &a, const Tensor &b) { KILN_FAIL("where: not implemented yet"); }
__attribute__((weak)) Tensor clamp(const Tensor &x, std::optional<Scalar> min, std::optional<Scalar> max ) { KILN_FAIL("clamp: not implemented yet"); }
__attribute__((weak)) Tensor masked_fill(const Tensor &x, const Tensor &mask, const Scalar &value) { KILN_FAIL("masked_fill: not implemented yet"); }
__attribute__((weak)) Tensor lerp(const Tensor &start, const Tensor &end, const Scalar &weight) { KILN_FAIL("lerp: not implemented yet"); }
__attribute__((weak)) Tensor lerp(const Tensor &start, const Tensor &end, const Tensor &weight) { KILN_FAIL("lerp: not implemented yet"); }
__attribute__((weak)) Tensor & add_(Tensor &self, const Tensor &other, const Scalar &alpha ) { KILN_FAIL("add_: not implemented yet"); }
__attribute__((weak)) Tensor & add_(Tensor &self, const Scalar &other, const Scalar &alpha ) { KILN_FAIL("add_: not implemented yet"); }
__attribute__((weak)) Tensor & sub_(Tensor &self, const Tensor &other, const Scalar &alpha ) { KILN_FAIL("sub_: not implemented yet"); }
__attribute__((weak)) Tensor & sub_(Tensor &self, const Scalar &other, const Scalar &alpha ) { KILN_FAIL("sub_: not implemented yet"); }
__attribute__((weak)) Tensor & mul_(Tensor &self, const Tensor &other) { KILN_FAIL("mul_: not implemented yet"); }
__attribute__((weak)) Tensor & mul_(Tensor &self, const Scalar &other) { KILN_FAIL("mul_: not implemented yet"); }
__attribute__((weak)) Tensor & div_(Tensor &self, const Tensor &other) { KILN_FAIL("div_: not implemented yet"); }
__attribute__((weak)) Tensor & div_(Tensor &self, const Scalar &other) { KILN_FAIL("div_: not implemented yet"); }
__attribute__((weak)) Tensor & clamp_(Tensor &self, std::optional<Scalar> min, std::optional<Scalar> max ) { KILN_FAIL("clamp_: not implemented yet"); }
__attribute__((weak)) Tensor & relu_(Tensor &self) { KILN_FAIL("relu_: not implemented yet"); }
__attribute__((weak)) Tensor & zero_(Tensor &self) { KILN_FAIL("zero_: not implemented yet"); }
__attribute__((weak)) Tensor & fill_(Tensor &self, const Scalar &value) { KILN_FAIL("fill_: not implemented yet"); }
__attribute__((weak)) Tensor & copy_(Tensor &self, const Tensor &src) { KILN_FAIL("copy_: not implemented yet"); }
__attribute__((weak)) Tensor sum(const Tensor &x, std::optional<DType> dtype ) { KILN_FAIL("sum: not implemented yet"); }
__attribute__((weak)) Tensor sum(const Tensor &x, IntArrayRef dim, bool keepdim , std::optional<DType> dtype ) { KILN_FAIL("sum: not implemented yet"); }
__attribute__((weak)) Tensor mean(const Tensor &x, std::optional<DType> dtype ) { KILN_FAIL("mean: not implemented yet"); }
__attribute__((weak)) Tensor mean(const Tensor &x, IntArrayRef dim, bool keepdim , std::optional<DType> dtype ) { KILN_FAIL("mean: not implemented yet"); }
__attribute__((weak)) Tensor prod(const Tensor &x, std::optional<DType> dtype ) { KILN_FAIL("prod: not implemented yet"); }
__attribute__((weak)) Tensor prod(const Tensor &x, int64_t dim, bool keepdim , std::optional<DType> dtype ) { KILN_FAIL("prod: not implemented yet"); }
__attribute__((weak)) Tensor amax(const Tensor &x, IntArrayRef dim , bool keepdim ) { KILN_FAIL("amax: not implemented yet"); }
__attribute__((weak)) Tensor amin(const Tensor &x, IntArrayRef dim , bool keepdim ) { KILN_FAIL("amin: not implemented yet"); }
__attribute__((weak)) Tensor max(const Tensor &x) { KILN_FAIL("max: not implemented yet"); }
__attribute__((weak)) std::tuple<Tensor, Tensor> max(const Tensor &x, int64_t dim, bool keepdim ) { KILN_FAIL("max: not implemented yet"); }
__attribute__((weak)) Tensor min(const Tensor &x) { KILN_FAIL("min: not implemented yet"); }
__attribute__((weak)) std::tuple<Tensor, Tensor> min(const Tensor &x, int64_t dim, bool keepdim ) { KILN_FAIL("min: not implemented yet"); }
__attribute__((weak)) Tensor argmax(const Tensor &x, std::optional<int64_t> dim , bool keepdim ) { KILN_FAIL("argmax: not implemented yet"); }
__attribute__((weak)) Tensor argmin(const Tensor &x, std::optional<int64_t> dim , bool keepdim ) { KILN_FAIL("argmin: not implemented yet"); }
__attribute__((weak)) Tensor var(const Tensor &x, IntArrayRef dim , std::optional<double> correction , bool keepdim ) { KILN_FAIL("var: not implemented yet"); }
__attribute__((weak)) Tensor std(const Tensor &x, IntArrayRef dim , std::optional<double> correction , bool keepdim ) { KILN_FAIL("std: not implemented yet"); }
__attribute__((weak)) Tensor norm(const Tensor &x, const Scalar &p , IntArrayRef dim , bool keepdim ) { KILN_FAIL("norm: not implemented yet"); }
__attribute__((weak)) Tensor view(const Tensor &x, IntArrayRef shape) { KILN_FAIL("view: not implemented yet"); }
__attribute__((weak)) Tensor reshape(const Tensor &x, IntArrayRef shape) { KILN_FAIL("reshape: not implemented yet"); }
__attribute__((weak)) Tensor transpose(const Tensor &x, int64_t dim0, int64_t dim1) { KILN_FAIL("transpose: not implemented yet"); }
__attribute__((weak)) Tensor t(const Tensor &x) { KILN_FAIL("t: not implemented yet"); }
__attribute__((weak)) Tensor permute(const Tensor &x, IntArrayRef dims) { KILN_FAIL("permute: not implemented yet"); }
__attribute__((weak)) Tensor narrow(const Tensor &x, int64_t dim, int64_t start, int64_t length) { KILN_FAIL("narrow: not implemented yet"); }
__attribute__((weak)) Tensor slice(const Tensor &x, int64_t dim , std::optional<int64_t> start , std::optional<int64_t> end , int64_t step ) { KILN_FAIL("slice: not implemented yet"); }
__attribute__((weak)) Tensor select(const Tensor &x, int64_t dim, int64_t index) { KILN_FAIL("select: not implemented yet"); }
__attribute__((weak)) Tensor unsqueeze(const Tensor &x, int64_t dim) { KILN_FAIL("unsqueeze: not implemented yet"); }
__attribute__((weak)) Tensor squeeze(const Tensor &x) { KILN_FAIL("squeeze: not implemented yet"); }
__attribute__((weak)) Tensor squeeze(const Tensor &x, int64_t dim) { KILN_FAIL("squeeze: not implemented yet"); }
__attribute__((weak)) Tensor expand(const Tensor &x, IntArrayRef size) { KILN_FAIL("expand: not implemented yet"); }
__attribute__((weak)) Tensor flatten(const Tensor &x, int64_t start_dim , int64_t end_dim ) { KILN_FAIL("flatten: not implemented yet"); }
__attribute__((weak)) Tensor as_strided(const Tensor &x, IntArrayRef size, IntArrayRef stride, std::optional<int64_t> storage_offset ) { KILN_FAIL("as_strided: not implemented yet"); }
__attribute__((weak)) Tensor contiguous(const Tensor &x) { KILN_FAIL("contiguous: not implemented yet"); }
__attribute__((weak)) Tensor clone(const Tensor &x) { KILN_FAIL("clone: not implemented yet"); }
__attribute__((weak)) Tensor softmax(const Tensor &x, int64_t dim, std::optional<DType> dtype ) { KILN_FAIL("softmax: not implemented yet"); }
__attribute__((weak)) Tensor log_softmax(const Tensor &x, int64_t dim, std::optional<DType> dtype ) { KILN_FAIL("log_softmax: not implemented yet"); }
__attribute__((weak)) Tensor layer_norm(const Tensor &x, IntArrayRef normalized_shape, const Tensor &weight , const Tensor &bias , double eps ) { KILN_FAIL("layer_norm: not implemented yet"); }
__attribute__((weak)) Tensor batch_norm(const Tensor &x, const Tensor &weight, const Tensor &bias, const Tensor &running_mean, const Tensor &running_var, bool training , double momentum , double eps ) { KILN_FAIL("batch_norm: not implemented yet"); }
__attribute__((weak)) Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias ) { KILN_FAIL("linear: not implemented yet"); }
__attribute__((weak)) Tensor matmul(const Tensor &a, const Tensor &b) { KILN_FAIL("matmul: not implemented yet"); }
__attribute__((weak)) Tensor mm(const Tensor &a, const Tensor &b) { KILN_FAIL("mm: not implemented yet"); }
__attribute__((weak)) Tensor bmm(const Tensor &a, const Tensor &b) { KILN_FAIL("bmm: not implemented yet"); }
__attribute__((weak)) Tensor addmm(const Tensor &input, const Tensor &mat1, const Tensor &mat2, const Scalar &beta , const Scalar &alpha ) { KILN_FAIL("addmm: not implemented yet"); }
__attribute__((weak)) Tensor conv2d(const Tensor &input, const Tensor &weight, const Tensor &bias , IntArrayRef stride , IntArrayRef padding , IntArrayRef dilation , int64_t groups ) { KILN_FAIL("conv2d: not implemented yet"); }
__attribute__((weak)) Tensor max_pool2d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride , IntArrayRef padding , IntArrayRef dilation , bool ceil_mode ) { KILN_FAIL("max_pool2d: not implemented yet"); }
__attribute__((weak)) Tensor avg_pool2d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride , IntArrayRef padding , bool ceil_mode , bool count_include_pad ) { KILN_FAIL("avg_pool2d: not implemented yet"); }
__attribute__((weak)) Tensor adaptive_avg_pool2d(const Tensor &x, IntArrayRef output_size) { KILN_FAIL("adaptive_avg_pool2d: not implemented yet"); }
__attribute__((weak)) Tensor embedding(const Tensor &weight, const Tensor &indices) { KILN_FAIL("embedding: not implemented yet"); }
__attribute__((weak)) Tensor dropout(const Tensor &x, double p, bool train) { KILN_FAIL("dropout: not implemented yet"); }
__attribute__((weak)) Tensor tril(const Tensor &x, int64_t diagonal ) { KILN_FAIL("tril: not implemented yet"); }
__attribute__((weak)) Tensor triu(const Tensor &x, int64_t diagonal ) { KILN_FAIL("triu: not implemented yet"); }
__attribute__((weak)) Tensor cat(const TensorList &tensors, int64_t dim ) { KILN_FAIL("cat: not implemented yet"); }
__attribute__((weak)) Tensor stack(const TensorList &tensors, int64_t dim ) { KILN_FAIL("stack: not implemented yet"); }
__attribute__((weak)) std::vector<Tensor> split(const Tensor &x, int64_t split_size, int64_t dim ) { KILN_FAIL("split: not implemented yet"); }
__attribute__((weak)) std::vector<Tensor> split(const Tensor &x, IntArrayRef split_sizes, int64_t dim ) { KILN_FAIL("split: not implemented yet"); }
__attribute__((weak)) std::vector<Tensor> chunk(const Tensor &x, int64_t chunks, int64_t dim ) { KILN_FAIL("chunk: not implemented yet"); }
__attribute__((weak)) Tensor index_select(const Tensor &x, int64_t dim, const Tensor &index) { KILN_FAIL("index_select: not implemented yet"); }
__attribute__((weak)) Tensor gather(const Tensor &x, int64_t dim, const Tensor &index) { KILN_FAIL("gather: not implemented yet"); }
__attribute__((weak)) Tensor scaled_dot_product_attention(const Tensor &query, const Tensor &key, const Tensor &value, const Tensor &attn_mask , double dropout_p , bool is_causal , std::optional<double> scale ) { KILN_FAIL("scaled_dot_product_attention: not implemented yet"); }
} // namespace kiln
namespace kiln {
__attribute__((weak)) std::ostream &operator<<(std::ostream &os, const Tensor &) { KILN_FAIL("operator<<: not implemented yet"); return os; }
} // namespace kiln
