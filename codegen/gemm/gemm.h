// kiln's own GEMM: C = alpha * op(A) * op(B) + beta * C with JIT-compiled,
// register-blocked micro-kernels (codegen/gemm/ukernel.h) and C++ loops
// around them (cache blocking, packing, threads over kiln's pool).
//
//   kiln::gemm::sgemm(false, true, M, N, K, 1.f, A, lda, W, ldw, 0.f, C, ldc);
//   auto packed = kiln::gemm::pack_b<float>(true, K, N, W, ldw);   // weights, once
//   kiln::gemm::gemm_packed<float>(false, M, 1.f, A, lda, packed, 0.f, C, ldc);
//
// Row-major operands as in cblas with CblasRowMajor: op(A) is M x K (A[i*lda+p],
// or A[p*lda+i] when trans_a), op(B) is K x N, C is M x N with row stride ldc.
// BLAS semantics: beta == 0 never reads C, alpha == 0 never reads A or B, K == 0
// scales C by beta. Bad arguments throw kiln::Error naming the argument; a
// micro-kernel that cannot be compiled throws kiln::Error (callers fall back to BLAS).
//
// Design (numbers from bench/gemm_bench.cpp, see docs/performance.md):
// - micro-kernel MR x NR accumulators (AVX-512: 8 x 48 floats / 8 x 24 doubles;
//   AVX2: 6 x 16 / 6 x 8) in vector registers, A and B read from
//   packed panels (A: kc x MR, B: kc x NR, zero padded), N edge by masked
//   loads/stores, M edge by a kernel compiled for the remaining rows.
// - loops (Goto/BLIS order): jc over NC columns (B block kc x nc packed once
//   per jc, pc), pc over KC, ic over MC rows (A block mc x kc packed, kept in
//   L2), jr over NR panels (B micro-panel in L1), ir over MR rows.
// - threads: the N panels (or, when there are fewer of them than row blocks,
//   the M rows in MR multiples) are split into one contiguous range per thread;
//   each thread packs its own B blocks into thread-local scratch; A is packed
//   per thread on an M split, and once for all threads on an N split (each
//   thread packs its share of the rows, see PackedARef), or, with
//   Config::a_in_place, read where it lies by kernels that take its row stride.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel.h"

namespace kiln::codegen::gemm {

// Tile and blocking; defaults come from the host CPU (default_config<T>()).
struct Config {
  int mr = 0, nv = 0, lanes = 0; // micro-tile: mr rows x (nv * lanes) columns
  int unroll = 0;                // k steps per micro-kernel loop iteration
  int64_t kc = 0, mc = 0, nc = 0; // cache blocks (elements); mc a multiple of mr, nc of nr
  int threads = 0;                // 0: kiln::get_num_threads()
  // The micro-kernels read op(A) where it lies (row-major: its column stride
  // must be 1) instead of packing it: for products whose threads would all
  // read one shared packing of A (an N split over few rows, a compiled
  // contraction's column tiles), where packing A cost up to ~10% (fc2 of W5
  // on 2 threads). A PackedARef is then not taken.
  bool a_in_place = false;
  int64_t nr() const { return int64_t(nv) * lanes; }
  std::string to_string() const;
};

// False when KILN_GEMM_A=pack (read once): callers then never set
// Config::a_in_place, and A is packed as before (for A/B measurements).
bool a_in_place_allowed();

// "avx512" when the JIT's host CPU has AVX-512F, else "avx2" (AVX2 + FMA),
// else "generic" (the vectors LLVM legalizes for the host).
std::string host_isa();
template <class T> Config default_config();
// The configuration of the matmul family's products with N columns:
// default_config<T>(), or on AVX-512 float32 with k blocks twice as long, and
// the 8 x 2 tile (32 columns) instead of the default 8 x 3 (48) when N leaves
// over 5% of the last 48-column panel's columns empty and 32 wastes fewer
// (N = 64, 128, 256: attention's heads, a small model's linears).
// KILN_GEMM_TILE, when set, fixes the configuration for every N.
template <class T> Config product_config(int64_t N);
// Config for an ISA by name ("avx512", "avx2"): tests run the AVX2 kernels on an AVX-512 host.
template <class T> Config config_for_isa(const std::string &isa);

// Memory for a packing that outlives a call (weights packed once per version),
// 64-byte aligned, freed with std::free. A large one (2 MiB or more) is 2 MiB
// aligned and advised to use transparent huge pages.
void *alloc_packing(size_t bytes);

// Weights packed once into the micro-kernel's B panel layout for `config`:
// blocks of kc rows, each holding ceil(N / nr) panels of kc x nr elements.
template <class T> struct PackedB {
  int64_t K = 0, N = 0;
  Config config;
  std::shared_ptr<T> data; // 64-byte aligned
  int64_t panels() const { return (N + config.nr() - 1) / config.nr(); }
  int64_t bytes() const;
  // Panels of the k block starting at row pc (a multiple of config.kc).
  const T *block(int64_t pc) const { return data.get() + pc * panels() * config.nr(); }
};

template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T *B, int64_t ldb, const Config &config = default_config<T>());

// The same from any element strides: op(B)[p, j] = B[p * rs + j * cs] (W^T of a
// linear is W with (rs, cs) = (1, ldw)).
template <class T>
PackedB<T> pack_b_strided(int64_t K, int64_t N, const T *B, int64_t rs, int64_t cs,
                          const Config &config = default_config<T>());

// op(A) packed once for several products over the same rows (the column
// tiles of a compiled contraction, the threads of an N split), instead of once
// per product: every k block's row panels, block pc (a multiple of config.kc)
// at data + pc * M, the panel of row i (a multiple of config.mr) at
// + i * min(kc, K - pc), each as pack_a lays out one block. A product of m rows
// reads rows [r0, r0 + m) of it (r0 a multiple of config.mr).
template <class T> struct PackedARef {
  const T *data = nullptr;
  int64_t M = 0;  // rows packed
  int64_t r0 = 0; // first row of the product
};

// The most op(A) bytes pack_a_shared takes (its buffer stays with the thread).
constexpr int64_t kSharedABytes = int64_t(8) << 20;

// Packs op(A) (M x K, op(A)[i, p] = A[i * ars + p * acs]) as PackedARef lays it
// out into the calling thread's reusable scratch (grown on demand and kept: a
// steady-state call allocates nothing), row panels split over `threads`
// threads (0: kiln::get_num_threads(); 1 inside a parallel region), joined
// before returning. The data stays valid until this thread's next
// pack_a_shared (or an N-split gemm call, which packs through it).
// M * K * sizeof(T) must be at most kSharedABytes.
template <class T>
const T *pack_a_shared(int64_t M, int64_t K, const T *A, int64_t ars, int64_t acs, const Config &config, int threads);

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda, const T *B,
          int64_t ldb, T beta, T *C, int64_t ldc, const Config &config = default_config<T>());

// The same with any element strides, as runtime/kernels/linalg_internal.h's
// gemm (the executor's contraction steps): op(A)[i, p] = A[i * ars + p * acs],
// op(B)[p, j] = B[p * brs + j * bcs] (the packing reads any layout; strides may
// be 0 for broadcast operands), C row-major with leading dimension ldc >= N.
template <class T>
void gemm_strided(int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
                  int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc, const Config &config = default_config<T>());

template <class T>
void gemm_packed(bool trans_a, int64_t M, T alpha, const T *A, int64_t lda, const PackedB<T> &B, T beta, T *C,
                 int64_t ldc, int threads = 0);

// Micro-kernel entry points of one Config, resolved (compiled or found in the
// caches) once, for the row counts a caller needs: callers that run the same
// shapes call after call (the executor's contraction steps) pass it to the
// overloads below, which then take no lock and look nothing up per call.
struct KernelSet {
  Config config;
  bool f64 = false;
  std::vector<const void *> by_rows; // [r], r = 1..mr: entry point, or null when not resolved
  // The compiled kernels, from the Jit current at resolve_kernels (Jit::current():
  // a ScopedJit's or the global one), which must outlive the set as it must the plans.
  std::vector<std::shared_ptr<const void>> keep;
  // Whether every kernel a product of M rows uses is resolved. With
  // Config::a_in_place a tail of r rows without its own kernel runs as the
  // largest resolved ones summing to r (4 + 2 + 1 for 7).
  bool covers(int64_t M) const;
};

// The kernels for products of each of `rows` rows (full tiles and the M % mr tail).
template <class T> KernelSet resolve_kernels(const Config &config, const std::vector<int64_t> &rows);

// ---- Epilogues in registers: an elementwise expression the micro-kernel
// applies to the accumulator tile on the LAST k block, before the store
// (earlier k blocks run the plain kernel). The expression is a KernelDesc's
// node list (lowered by codegen/op_lowering.cpp's rules, emitted per vector by
// codegen/lower_vector.h), so the values are those of the same epilogue run as
// a compiled elementwise kernel over the stored C tile.
struct Epilogue {
  // How each input of `expr` is addressed, relative to C's element (i, j):
  enum class Operand : uint8_t {
    Acc,    // the contraction's value alpha * op(A) op(B) + beta * C itself
    Scalar, // one element, broadcast
    Row,    // p[i * ld]: a per-row value, broadcast along the row
    Col,    // p[j]: a per-column vector (bias), loaded with the N edge mask
    Tile,   // p[i * ld + j] (residual)
  };
  // Inputs (Loads) and outputs of the expression; its shape and strides are
  // not used (key() wants them canonical: shape {1, 1}, strides {0, 0}).
  // Outputs have C's element type and are Tile-addressed; inputs any dtype
  // (bool as one byte, as in kiln's tensors), the Acc one C's type.
  KernelDesc expr;
  std::vector<Operand> inputs; // one per expr.inputs
  bool store_c = true;         // also store the contraction's value into C
  // Determines the generated code (with the tile configuration): the Jit key.
  std::string key() const;
};

// Per call: for each buffer of the expression (its inputs, then its outputs)
// the address of the element at C's (0, 0) and its row stride in elements;
// `kernels` from resolve_epilogue_kernels (the same Config as the plain ones).
struct EpilogueArgs {
  const void *const *ptrs = nullptr;
  const int64_t *lds = nullptr;
  const KernelSet *kernels = nullptr;
};

// The epilogue variants of the micro-kernels for products of each of `rows`
// rows, compiled through Jit::current().compile_module (memory and disk caches;
// two models with the same expression share them). Throws kiln::Error when
// the expression cannot be generated (the caller then runs its epilogue apart).
template <class T>
KernelSet resolve_epilogue_kernels(const Config &config, const Epilogue &epi, const std::vector<int64_t> &rows);

// gemm_strided with resolved kernels (config = kernels.config) and `threads`
// (0: kiln::get_num_threads(); 1 inside a parallel region in any case).
// `ap`, when set: op(A) packed by pack_a_shared (A, ars and acs are then not read).
template <class T>
void gemm_strided(int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
                  int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc, const KernelSet &kernels, int threads,
                  const PackedARef<T> &ap = PackedARef<T>{}, const EpilogueArgs *epi = nullptr);

// (Both: `epi`, when given, is applied in the micro-kernels' registers; it
// needs K > 0 and alpha != 0, which reach every micro-kernel.)
// C[:, 0, n) = alpha * op(A) * B[:, j0, j0 + n) + beta * C over packed columns
// [j0, j0 + n) of B (j0 a multiple of B.config.nr(), j0 + n <= B.N); op(A) with
// any element strides as in gemm_strided. kernels.config must be B.config.
template <class T>
void gemm_packed_cols(int64_t M, T alpha, const T *A, int64_t ars, int64_t acs, const PackedB<T> &B, int64_t j0,
                      int64_t n, T beta, T *C, int64_t ldc, const KernelSet &kernels, int threads,
                      const PackedARef<T> &ap = PackedARef<T>{}, const EpilogueArgs *epi = nullptr);

inline void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void dgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda,
                  const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
  gemm<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Compiles (or finds in the caches) every micro-kernel `config` can use, so
// that a first call does not pay for it; returns how many were compiled or found.
template <class T> int warm_up(const Config &config = default_config<T>());

// The register-only FMA peak of `threads` threads in GFLOP/s: a JIT-compiled
// loop of independent vector FMAs at the host's widest vector, timed for ~`ms`.
double fma_peak_gflops(int threads, double ms = 100);

// The same for one thread per CPU-second of that thread (thread CPU time): on a
// shared machine, the rate the core gives while this thread runs on it.
double fma_peak_cpu_gflops(double ms = 100);

// The full-tile micro-kernel alone on one thread, on L1-resident packed panels
// (A mr x kc, B kc x nr, one C tile), in GFLOP/s per CPU-second of the thread
// (compare with fma_peak_cpu_gflops): the bound of the loops around it.
template <class T> double ukernel_gflops(const Config &config, int64_t kc, double ms = 100);

} // namespace kiln::codegen::gemm

namespace kiln {
namespace gemm = codegen::gemm;
}
