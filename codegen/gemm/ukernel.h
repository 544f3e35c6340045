// INTERNAL to codegen/gemm: the LLVM IR of a GEMM micro-kernel.
//
// A micro-kernel computes one MR x NR tile of C from packed panels:
//   C[i, j] = alpha * sum_p A[p, i] * B[p, j] + beta * C[i, j]   (i < MR, j < n <= NR)
// with A packed as kc rows of MR contiguous elements (or, for the a_rows
// variants, read in place: MR rows of kc elements, lda apart) and B as kc rows of NR
// contiguous elements (NR = nv vectors of `lanes` elements). The tile lives in
// MR x nv vector accumulators for the whole k loop; columns j >= n are neither
// read nor written (masked loads/stores), and beta == 0 never reads C (BLAS).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "codegen/jit.h"

namespace kiln::codegen::gemm {

struct TileConfig {
  int mr = 1;      // rows of the tile (accumulator rows)
  int nv = 1;      // vectors per row
  int lanes = 16;  // elements per vector (16 floats = one zmm)
  bool f64 = false;
  int unroll = 1;  // k steps per loop iteration
  // A read in place (row-major, row stride lda, a trailing argument) instead
  // of from a packed panel: see MicroKernelRows.
  bool a_rows = false;
  int nr() const { return nv * lanes; }
  std::string key() const;
};

// void fn(const T *a, const T *b, T *c, int64_t kc, int64_t ldc, int64_t n, T alpha, T beta)
template <class T>
using MicroKernel = void (*)(const T *a, const T *b, T *c, int64_t kc, int64_t ldc, int64_t n, T alpha, T beta);

// The same with an epilogue in registers (gemm.h, Epilogue): on the tile it
// computes, C's value v, it evaluates epi.expr per vector and stores its
// outputs (and v into C only when epi.store_c). Extra arguments: per buffer of
// epi.expr its pointer at C's (0, 0) of the whole block and its row stride,
// and (row, col), this tile's offset in that block.
template <class T>
using EpilogueMicroKernel = void (*)(const T *a, const T *b, T *c, int64_t kc, int64_t ldc, int64_t n, T alpha,
                                     T beta, const void *const *ptrs, const int64_t *lds, int64_t row, int64_t col);

// The a_rows variants: A[i, p] at a[i * lda + p] (op(A) row-major where it
// lies: no packing, and nothing written that the other cores must fetch).
template <class T>
using MicroKernelRows = void (*)(const T *a, const T *b, T *c, int64_t kc, int64_t ldc, int64_t n, T alpha, T beta,
                                 int64_t lda);
template <class T>
using EpilogueMicroKernelRows = void (*)(const T *a, const T *b, T *c, int64_t kc, int64_t ldc, int64_t n, T alpha,
                                         T beta, const void *const *ptrs, const int64_t *lds, int64_t row, int64_t col,
                                         int64_t lda);

struct Epilogue;
// Throws kiln::Error if the IR does not verify. `epi` null: the plain kernel.
std::unique_ptr<llvm::Module> build_ukernel(const TileConfig &cfg, const std::string &symbol,
                                            const LowerTarget &target, llvm::LLVMContext &ctx,
                                            const Epilogue *epi = nullptr);

// void fn(int64_t iters, float *io): `accs` independent chains of vector FMAs
// (acc = acc * x + y) iterated `iters` times, x and y read from io[0], io[1], the
// sum written to io[0]: iters * accs * lanes * 2 flops and no memory traffic.
std::unique_ptr<llvm::Module> build_fma_probe(int lanes, int accs, const std::string &symbol,
                                              const LowerTarget &target, llvm::LLVMContext &ctx);

// The two generators above as Jit::compile_module builders (for callers that
// include no LLVM header).
ModuleBuilder ukernel_builder(const TileConfig &cfg);
ModuleBuilder ukernel_builder(const TileConfig &cfg, const Epilogue &epi);
ModuleBuilder fma_probe_builder(int lanes, int accs);

struct Config;
// The micro-kernel of `config`'s tile for `rows` rows (1..config.mr), compiled
// on first use and kept (gemm.cpp's table): for loops of codegen/gemm other than
// gemm.cpp's own (conv.cpp). Throws kiln::Error if it cannot be compiled.
template <class T> MicroKernel<T> micro_kernel(const Config &config, int rows);

} // namespace kiln::codegen::gemm
