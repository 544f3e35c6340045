// Internal to the nn / linear-algebra kernels (linalg.cpp, nn.cpp): a strided
// GEMM that hands BLAS-compatible operands (including transposed views) to
// OpenBLAS without copying, OpenBLAS thread control, and small packing helpers.
// Not part of the public API.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

// KILN_TRACE's INPUTS is one macro argument, so a braced list with a comma
// ({a, b}) would be split by the preprocessor: pass KILN_NN_INPUTS(a, b) instead.
#define KILN_NN_INPUTS(...) (::kiln::detail::op_inputs(__VA_ARGS__))

namespace kiln::detail::nn {

// Whether `nbatch` independent products of `flops_each` multiply-adds should run
// batch-parallel (single-threaded BLAS per batch) rather than one after another
// with OpenBLAS's own threads: yes when there are enough batches to fill kiln's
// threads, or when each is too small for OpenBLAS to thread well.
// Measured (2 cores, 12 x [128,64]@[64,128]): 0.28 ms batch-parallel vs 0.36 ms
// sequential; equal for 4 x 512^3.
bool batch_parallel(int64_t nbatch, int64_t flops_each);

// C[i, j] = alpha * sum_p A[i, p] * B[p, j] + beta * C[i, j] for i < m, j < n,
// with A[i, p] at A[i * ars + p * acs], B[p, j] at B[p * brs + j * bcs] and C
// row-major with leading dimension ldc. beta == 0 ignores C's contents (NaN too).
// float/double go to OpenBLAS: a row-major or transposed operand is passed as is
// (a transpose flag, no copy); any other layout is packed first. OpenBLAS runs
// single-threaded for the whole process (its thread count is process-wide and
// may not change under concurrent callers); a large product called outside a
// kiln parallel region is split along its longer side over kiln's threads. Integer types
// use plain loops with wrap-around arithmetic, as torch's CPU integer matmul.
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
          int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc);

// conv2d(input, weight, bias, ...) written into `out` (contiguous, of the
// result's shape and dtype; kiln::Error otherwise) in blocks of `block_rows`
// output rows per image, each block's im2col buffer small enough to stay in
// cache; (image, block) items run over kiln's pool with single-threaded BLAS.
// after(ctx, n, p0, np) runs on the thread that computed pixels [p0, p0 + np)
// (of Ho * Wo) of image n, for all channels, right after their GEMM, while they
// are in that core's cache: the compiled executor applies conv epilogues there
// (codegen/epilogue.cpp). `after` must be thread-safe; it may be null. The
// im2col blocks live in each thread's thread_scratch (runtime/allocator.h).
// A depthwise conv (one input channel per group: weight [O, 1, kH, kW]) runs a
// direct kernel instead (no im2col, no BLAS), in the same blocks, with the same
// callback after each.
using BlockCallback = void (*)(void *ctx, int64_t image, int64_t p0, int64_t np);
void conv2d_into(const Tensor &input, const Tensor &weight, const Tensor &bias, IntArrayRef stride,
                 IntArrayRef padding, IntArrayRef dilation, int64_t groups, const Tensor &out, int64_t block_rows,
                 BlockCallback after, void *ctx);
// Output rows per conv2d_into block for a weight [O, C/groups, kH, kW] and an
// Ho x Wo output: the im2col block stays within 512 KiB; for a depthwise
// weight [O, 1, kH, kW], up to 128K outputs (all channels) in multiples of 4 rows.
int64_t conv2d_block_rows(IntArrayRef weight, int64_t ho, int64_t wo);

// A contiguous tensor with x's values converted to `dtype` (x itself when it is
// already contiguous and of that dtype). Meta in, meta out.
Tensor packed(const Tensor &x, DType dtype);
inline Tensor packed(const Tensor &x) { return packed(x, x.dtype()); }

// Throws "<op>: expected <arg> to be a floating-point tensor, got int64".
void check_floating(const Tensor &t, const char *op, const char *arg);
// Throws "<op>: expected <arg> to have dtype float32 (as <ref_arg>), got float64".
void check_same_dtype(const Tensor &t, DType want, const char *op, const char *arg, const char *ref_arg);
// Throws when an adapter receives a number of inputs other than KILN_TRACE recorded.
void check_num_inputs(const std::vector<Tensor> &in, size_t n, const char *op);

} // namespace kiln::detail::nn
