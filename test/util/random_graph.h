// A seeded random-graph generator for differential tests and fuzzing.
//
// A random graph is a model function over the eager API whose ops are chosen by
// a Chooser (a std::mt19937_64 seed, or a fuzzer's bytes). Every choice depends
// only on the chooser and on tensor shapes, never on data, so calling the
// function eagerly and tracing it (kiln::trace, kiln::compile) record the same
// ops: tracing a real function is what makes every generated graph valid.
//
// The ops: unary and binary elementwise (with random broadcastable shapes),
// reductions over the last or other dims (sum, mean, amax), softmax,
// scaled_dot_product_attention (causal or masked, some query rows with every
// key masked out),
// layer_norm, linear and matmul, and views (transpose, permute, narrow, slice
// with a step, select, expand, unsqueeze, reshape of contiguous data). Values
// are kept bounded (a magnitude bound per value; large values are squashed)
// and denominators away from zero, so float32 rounding differences between
// executors stay within a small tolerance.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.h>

namespace kiln::testing {

// Where the generator's choices come from. From bytes: each choice consumes
// bytes; once they run out every choice is 0 (so any input, even empty, makes
// a small valid graph).
class Chooser {
public:
  explicit Chooser(uint64_t seed) : gen_(seed) {}
  Chooser(const uint8_t *data, size_t size) : from_bytes_(true), bytes_(data, data + size) {}

  // A value in [0, n); n >= 1.
  uint64_t below(uint64_t n);
  // True with probability about percent/100.
  bool chance(int percent) { return below(100) < uint64_t(percent); }

private:
  bool from_bytes_ = false;
  std::mt19937_64 gen_;
  std::vector<uint8_t> bytes_;
  size_t pos_ = 0;
};

struct RandomGraphOptions {
  int max_ops = 14;        // ops chosen per graph (views and squashing add a few more)
  int max_inputs = 3;
  int max_rank = 4;
  int64_t max_dim = 9;
  int64_t max_numel = 2048; // no value grows past this many elements
  // Contraction-heavy graphs (contraction_graph_options()): inputs of odd GEMM
  // sizes (dims from 1, 2, 3, 7, 16, 17, 33, 65) plus an NCHW image, and about
  // half the ops linear, matmul (transposed weights, broadcast batch), bmm,
  // addmm or conv2d (stride, padding, dilation, groups including depthwise),
  // with the other ops around them as epilogues and producers.
  bool contractions = false;
  // unary() draws from the ops issue 16 added too (extended_graph_options()): the libm
  // list (sin, tan, asinh, log2, ...), the composed activations (mish, selu, ...) and
  // composites (leaky_relu, softplus, nan_to_num, logsumexp, ...). Off by default so
  // that a byte string makes the graph it made before the option existed.
  bool extended_ops = false;
  // unary() also draws the scans, sorts and rounding issue 16 added (scan_graph_options()):
  // cumsum, cumprod, logcumsumexp, sort and topk values (eager steps between compiled
  // groups), trunc and frac (fused); binary() draws atan2, hypot, fmod, copysign and
  // remainder (fused). Off by default, for the same reason.
  bool scan_ops = false;
  // The dtype of the inputs and parameters: float16 / bfloat16 graphs
  // (reduced_float_graph_options()) compute each op in float32 and round it.
  DType dtype = kFloat32;
};

// The options of contraction-heavy graphs: contractions on, larger values (8192
// elements), fewer ops (each contraction is a compile of its own).
RandomGraphOptions contraction_graph_options();

// The options of graphs that also draw the newer elementwise ops (extended_ops).
RandomGraphOptions extended_graph_options();

// The options of graphs that also draw scans, sorts, trunc and frac (scan_ops).
RandomGraphOptions scan_graph_options();

// The options of float16 or bfloat16 graphs (dtype), with the extended ops.
RandomGraphOptions reduced_float_graph_options(DType dtype);

// The longest reduction of any contraction in `g` (K of a GEMM, (Cin / groups)
// * kh * kw of a conv); 0 without contractions. Tests scale tolerances with it.
int64_t max_contraction_length(const ir::Graph &g);

struct RandomGraph {
  std::string origin; // "seed 42" or "fuzzer input (N bytes)": how to replay it
  std::vector<std::vector<int64_t>> input_shapes;
  DType dtype = kFloat32; // of the inputs
  TracedFunction fn; // same ops on every call

  // Inputs with values uniform in [-2, 2], from `data_seed`. Contiguous, or
  // with `strided`, each input (chosen from data_seed) contiguous, a
  // permutation of a contiguous tensor, a step-2 slice of a larger one, or
  // expanded along one dim (its values repeat there): the same shapes in the
  // layouts a caller may pass.
  std::vector<Tensor> make_inputs(uint64_t data_seed, bool strided = false) const;
  std::unique_ptr<ir::Graph> trace() const;
};

RandomGraph random_graph(uint64_t seed, const RandomGraphOptions &opts = {});
RandomGraph random_graph_from_bytes(const uint8_t *data, size_t size, const RandomGraphOptions &opts = {});

// The seeds a test should run: KILN_RANDOM_GRAPH_SEED alone when set (to
// replay a failure), else first, first+1, ..., first+count-1.
std::vector<uint64_t> random_graph_seeds(uint64_t first, uint64_t count);

// What a failure message needs to replay a failure: how to rerun the graph and its IR.
std::string describe(const RandomGraph &rg, const ir::Graph &g);

// "" when every element of every output has |got - want| <= atol + rtol |want|
// (NaN only where the other is NaN, infinities equal) and dtypes and shapes
// match; otherwise a message naming the worst element.
std::string compare_outputs(const std::vector<Tensor> &got, const std::vector<Tensor> &want, double rtol,
                            double atol);

} // namespace kiln::testing
