// The loops around the JIT-compiled micro-kernels: see codegen/gemm/gemm.h.
#include "codegen/gemm/gemm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

#include <spdlog/spdlog.h>

#ifdef __AVX__
#include <immintrin.h>
#include <sys/mman.h>
#endif

#include "codegen/gemm/ukernel.h"
#include "codegen/jit.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"

namespace kiln::codegen::gemm {

// ------------------------------------------------------------------ configs

std::string Config::to_string() const {
  return "mr=" + std::to_string(mr) + " nr=" + std::to_string(nr()) + " (" + std::to_string(nv) + "x" +
         std::to_string(lanes) + ") unroll=" + std::to_string(unroll) + " kc=" + std::to_string(kc) +
         " mc=" + std::to_string(mc) + " nc=" + std::to_string(nc) + (a_in_place ? " a=in-place" : "");
}

bool a_in_place_allowed() {
  static const bool allowed = [] {
    const char *s = std::getenv("KILN_GEMM_A");
    if (!s || !*s || std::string(s) == "in-place") return true;
    if (std::string(s) == "pack") return false;
    kiln::log()->warn("KILN_GEMM_A='{}' is not 'pack' or 'in-place': ignored", s);
    return true;
  }();
  return allowed;
}

std::string host_isa() {
  const std::string &f = Jit::global().cpu_features();
  if (f.find("+avx512f") != std::string::npos) return "avx512";
  if (f.find("+avx2") != std::string::npos && f.find("+fma") != std::string::npos) return "avx2";
  return "generic";
}

namespace {
// kc = 256 floats (the B micro-panel kc x nr is reused across the ir loop), mc
// x kc of A a quarter of L2 (1 MiB), kc x nc of B a slice of L3. Measured per
// CPU-second on 2048^3 and W5's qkv, 8 x 48 tile (KILN_BENCH_CPU, interleaved
// runs): kc 256 >= 160, 128 > 96; mc 256 >= 512, 768; differences near the
// +-10% noise of the shared machine.
Config make_config(int mr, int nv, int lanes, int elem_bytes) {
  Config c;
  c.mr = mr, c.nv = nv, c.lanes = lanes, c.unroll = 4;
  c.kc = 256 * 4 / elem_bytes;
  c.mc = std::max<int64_t>(1, (256 * 1024 / (c.kc * elem_bytes)) / mr) * mr;
  c.nc = std::max<int64_t>(1, 4096 / c.nr()) * c.nr();
  return c;
}

// Lets the benchmark sweep tiles without a rebuild: KILN_GEMM_TILE=mr,nv[,kc,mc,nc,unroll].
void apply_env_override(Config &c) {
  const char *s = std::getenv("KILN_GEMM_TILE");
  if (!s || !*s) return;
  long v[6] = {c.mr, c.nv, long(c.kc), long(c.mc), long(c.nc), c.unroll};
  int n = std::sscanf(s, "%ld,%ld,%ld,%ld,%ld,%ld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
  if (n < 2 || v[0] < 1 || v[1] < 1) {
    kiln::log()->warn("KILN_GEMM_TILE='{}' is not MR,NV[,KC,MC,NC,UNROLL] with MR, NV >= 1: ignored", s);
    return;
  }
  c.mr = int(v[0]), c.nv = int(v[1]);
  c.kc = v[2] > 0 ? v[2] : c.kc, c.unroll = v[5] > 0 ? int(v[5]) : c.unroll;
  c.mc = std::max<int64_t>(1, (v[3] > 0 ? v[3] : c.mc) / c.mr) * c.mr;
  c.nc = std::max<int64_t>(1, (v[4] > 0 ? v[4] : c.nc) / c.nr()) * c.nr();
}
} // namespace

template <class T> Config config_for_isa(const std::string &isa) {
  constexpr int eb = sizeof(T);
  // avx512: 32 zmm; 8 x 3 accumulators + 3 B vectors + a broadcast. The
  // micro-kernels alone all run at 96-99% of the FMA peak (14x2, 12x2, 6x4,
  // 8x3, 9x3); in whole products 8x3 measured a few % ahead of 14x2, and it
  // tiles W5 exactly (M = 128 = 16 x 8, N = 768 / 2304 / 3072 = k x 48).
  if (isa == "avx512") return make_config(8, 3, 64 / eb, eb);
  // avx2: 16 ymm; 6 x 2 accumulators + 2 B vectors + 1 broadcast.
  if (isa == "avx2") return make_config(6, 2, 32 / eb, eb);
  return make_config(4, 2, 16 / eb, eb);
}

template <class T> Config default_config() {
  static const Config c = [] {
    Config c = config_for_isa<T>(host_isa());
    apply_env_override(c);
    return c;
  }();
  return c;
}

// An edge panel computes all nr columns and stores the live ones: with N = 64
// the 8 x 3 tile spends a third of its FMAs on padding. Measured on this
// machine (kiln bench FILE.kir --repeat 1000, 2 threads, docs/performance.md):
// batched [16] 128x128x64 97 -> 88 us and 128x64x128 130 -> 94 us, 512x256x256
// 171 -> 152 us with 8 x 2; N multiple of 48 (W5) keeps 8 x 3, which measured
// a few % ahead there.
// k blocks of 512 instead of 256: C is read and written once per k block, and
// on long K that cost kiln 4-7% per core against oneDNN (kiln_bench_gemm_interleaved
// on one thread: fc2, K = 3072, 0.955 -> ~1.0; 2048^3 0.93 -> ~1.0). The A
// block (256 x 512, 512 KiB) then fills half of L2.
template <class T> Config product_config(int64_t N) {
  const Config d = default_config<T>();
  const char *env = std::getenv("KILN_GEMM_TILE");
  if (sizeof(T) != 4 || (env && *env) || d.mr != 8 || d.nv != 3 || N <= 0) return d;
  const Config narrow = make_config(8, 2, d.lanes, sizeof(T));
  auto waste = [N](int64_t nr) { return double((N + nr - 1) / nr * nr - N) / double(N); };
  Config c = waste(d.nr()) > 0.05 && waste(narrow.nr()) < waste(d.nr()) ? narrow : d;
  c.kc = 2 * d.kc;
  return c;
}

// ------------------------------------------------------------------ kernels

// Huge pages where the kernel grants them on request (THP "madvise", as on this
// machine): W5's 28 MB of packed weights then take ~14 page faults instead of
// ~7,000. On this virtual machine those faults were most of a warm compile
// (perf: the page-fault path under pack_b_block); kiln_bench_compile_cpu w5:
// 86 -> 17-20 ms CPU. The advice is only advice: a refusal leaves normal pages.
void *alloc_packing(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes < kHuge) return std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
  const size_t rounded = (bytes + kHuge - 1) & ~(kHuge - 1);
  void *p = std::aligned_alloc(kHuge, rounded);
  if (!p) return p;
  ::madvise(p, rounded, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
  // Faulted in here, by one thread in the kernel, before the pool's threads
  // pack into it: their concurrent first touches of the same fresh region
  // took twice as long (W5's warm compile, a 9.4 MB weight: 4.1-4.8 ms ->
  // 2.0-2.4 ms per packing). Linux 5.14+; an older kernel refuses (ignored).
  ::madvise(p, rounded, MADV_POPULATE_WRITE);
#endif
  return p;
}

namespace {

template <class T> struct Kernels {
  std::vector<const void *> by_rows; // by_rows[r]: the r-row kernel (r <= mr), null until compiled
};

std::mutex g_kernels_mu;

template <class T> std::map<std::tuple<int, int, int, bool>, Kernels<T>> &kernel_table() {
  static std::map<std::tuple<int, int, int, bool>, Kernels<T>> table;
  return table;
}

template <class T> TileConfig tile(const Config &c, int rows) {
  TileConfig t;
  t.mr = rows, t.nv = c.nv, t.lanes = c.lanes, t.f64 = sizeof(T) == 8, t.unroll = c.unroll, t.a_rows = c.a_in_place;
  return t;
}

template <class T> const void *compile_kernel(const TileConfig &t) {
  // In Jit::global(), never destroyed, not Jit::current(): the table below
  // keeps the entry address for the whole process, and a ScopedJit (kiln
  // bench's cold-compile measurement) is destroyed with the kernels it compiled.
  auto k = Jit::global().compile_module(t.key(), ukernel_builder(t));
  return reinterpret_cast<const void *>(k->fn());
}

// The kernels for row counts `a` and `b` (0 = none) of `c`, compiling the missing ones.
template <class T> const Kernels<T> &kernels(const Config &c, int a, int b) {
  std::lock_guard<std::mutex> lock(g_kernels_mu);
  Kernels<T> &ks = kernel_table<T>()[{c.nv, c.lanes, c.unroll * 1000 + c.mr, c.a_in_place}];
  ks.by_rows.resize(size_t(c.mr) + 1);
  for (int r : {a, b})
    if (r > 0 && !ks.by_rows[r]) ks.by_rows[r] = compile_kernel<T>(tile<T>(c, r));
  return ks;
}

// ------------------------------------------------------------------ scratch

// Thread-local, 64-byte aligned, grown on demand and kept: a steady-state call allocates nothing.
struct Scratch {
  void *p = nullptr;
  size_t bytes = 0;
  ~Scratch() { std::free(p); }
  void *get(size_t want) {
    if (want <= bytes) return p;
    std::free(p);
    bytes = (want + 4095) & ~size_t(4095);
    p = std::aligned_alloc(64, bytes);
    KILN_CHECK(p, "gemm: cannot allocate ", bytes, " bytes of packing scratch");
    return p;
  }
};

thread_local Scratch t_scratch;
// op(A) packed once for all the threads of a call (pack_a_shared): its own
// buffer, since the calling thread also runs a share and packs B into t_scratch.
thread_local Scratch t_shared_a;

// ------------------------------------------------------------------ packing


#ifdef __AVX__
// 8 rows of 8 contiguous floats (src, row stride rs) stored transposed: d[j * 8 + i] = src[i * rs + j].
inline void transpose8x8(const float *src, int64_t rs, float *d) {
  __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + rs), r2 = _mm256_loadu_ps(src + 2 * rs),
         r3 = _mm256_loadu_ps(src + 3 * rs), r4 = _mm256_loadu_ps(src + 4 * rs), r5 = _mm256_loadu_ps(src + 5 * rs),
         r6 = _mm256_loadu_ps(src + 6 * rs), r7 = _mm256_loadu_ps(src + 7 * rs);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
               t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + 8, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 16, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 24, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 32, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 40, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 48, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 56, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

// One panel: `rows` rows of op(A) from src, k [0, kc), stored kc x rows, k-major.
template <class T> void pack_a_panel(const T *src, int64_t rs, int64_t cs, int64_t rows, int64_t kc, T *d) {
  int64_t p = 0;
#ifdef __AVX__
  // Row-major f32 A (W4/W5's activations), full 8-row panels: 8 x 8 register
  // transposes, ~6x the elements per second of the scalar gather below.
  if constexpr (std::is_same_v<T, float>)
    if (cs == 1 && rows == 8)
      for (; p + 8 <= kc; p += 8) transpose8x8(src + p, rs, d + p * 8);
#endif
  // k outer: the writes stay contiguous and each row's cache line is read
  // across 16 consecutive k; row outer (contiguous reads, writes strided by
  // `rows`) measured 5-10x slower per element (2048 x 2048, kc 256).
  for (; p < kc; ++p)
    for (int64_t i = 0; i < rows; ++i) d[p * rows + i] = src[i * rs + p * cs];
}

// A rows [i0, i0 + mc) x k [p0, p0 + kc) into panels of mr rows (the last one
// of mc % mr rows), each kc x rows, k-major. op(A)[i, p] = A[i * rs + p * cs].
template <class T>
void pack_a(const T *A, int64_t rs, int64_t cs, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr, T *dst) {
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t rows = std::min<int64_t>(mr, mc - ir);
    pack_a_panel(A + (i0 + ir) * rs + p0 * cs, rs, cs, rows, kc, dst + ir * kc);
  }
}

// B k [p0, p0 + kc) x panels [q0, q1) of nr columns (zero past column N), each
// panel kc x nr, k-major. op(B)[p, j] = B[p * rs + j * cs].
#ifdef __AVX512F__
// dst[i * ldd + j] = src[j * lds + i] for a 16 x 16 block of floats: 16 row
// loads, four rounds of in-register shuffles, 16 row stores (the scalar loop
// below stores one element at a time, 16 rows apart).
inline void transpose16(const float *src, int64_t lds, float *dst, int64_t ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) { // pairs of rows: 32-bit interleave
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) { // quads: 64-bit interleave
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Now r[4q + k] holds, in each 128-bit lane l, column 4l + k of rows 4q .. 4q + 3.
  for (int k = 0; k < 4; ++k) { // 128-bit lanes: rows 0-7 and 8-15
    t[k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    t[8 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
  }
  for (int k = 0; k < 8; ++k) {
    _mm512_storeu_ps(dst + k * ldd, _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88));
    _mm512_storeu_ps(dst + (8 + k) * ldd, _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd));
  }
}
#endif

template <class T>
void pack_b_block(const T *B, int64_t rs, int64_t cs, int64_t N, int64_t p0, int64_t kc, int64_t q0, int64_t q1,
                  int64_t nr, T *dst) {
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t j0 = q * nr, cols = std::min<int64_t>(nr, N - j0);
    T *d = dst + (q - q0) * kc * nr;
    const T *src = B + p0 * rs + j0 * cs;
    if (cols < nr)
      for (int64_t p = 0; p < kc; ++p) std::fill(d + p * nr + cols, d + (p + 1) * nr, T(0));
    if (cs == 1) {
      for (int64_t p = 0; p < kc; ++p) std::copy_n(src + p * rs, cols, d + p * nr); // inlined, not a call per row
    } else if (rs == 1) {
      // B = W^T of a row-major weight: column j is W's row j. Walking k down
      // the columns (below) touches nr rows of W at once, nr lines that a
      // stride of a power-of-two multiple of 4 KiB (ldb 3072) maps to one L1
      // set; here each row's 16 consecutive k (one line) is read once and
      // scattered over 16 rows of the panel, which stay in L1.
      // One thread, W5's four weights: 5.4 -> 2.5 ms (docs/performance.md, "Packing W^T").
      constexpr int64_t kb = 16;
      int64_t p = 0;
#ifdef __AVX512F__
      // Whole 16 x 16 blocks in registers (f32, a full panel): W5's four
      // weights in a warm compile, allocation included, 6.7-7.9 -> 5.1-5.6 ms
      // on 2 threads (docs/performance.md, "Packing W^T").
      if constexpr (std::is_same_v<T, float>)
        if (cols == nr && nr % 16 == 0) {
          for (; p + kb <= kc; p += kb)
            for (int64_t j = 0; j < nr; j += 16) transpose16(src + j * cs + p, cs, d + p * nr + j, nr);
        }
#endif
      for (; p + kb <= kc; p += kb)
        for (int64_t j = 0; j < cols; ++j) {
          const T *s = src + j * cs + p;
          T *o = d + p * nr + j;
          for (int64_t i = 0; i < kb; ++i) o[i * nr] = s[i];
        }
      for (; p < kc; ++p)
        for (int64_t j = 0; j < cols; ++j) d[p * nr + j] = src[j * cs + p];
    } else { // any other strides (strided views): k outer, as in pack_a, contiguous writes
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t j = 0; j < cols; ++j) d[p * nr + j] = src[j * cs + p * rs];
    }
  }
}

// op(A) (M x K) packed whole, in PackedARef's layout, into the calling
// thread's t_shared_a: row panels split over `threads` threads (each packs all
// k blocks of its rows), joined before returning.
template <class T>
const T *pack_a_rows(int64_t M, int64_t K, const T *A, int64_t rs, int64_t cs, const Config &c, int threads) {
  T *dst = static_cast<T *>(t_shared_a.get(size_t(std::max<int64_t>(1, M * K)) * sizeof(T)));
  const int64_t mblocks = (M + c.mr - 1) / c.mr;
  auto rows = [&](int64_t b0, int64_t b1) {
    const int64_t i0 = b0 * c.mr, i1 = std::min(M, b1 * c.mr);
    for (int64_t pc = 0; pc < K; pc += c.kc) {
      const int64_t kc = std::min(c.kc, K - pc);
      pack_a(A, rs, cs, i0, i1 - i0, pc, kc, c.mr, dst + pc * M + i0 * kc);
    }
  };
  if (threads <= 0) threads = get_num_threads();
  const int64_t parts = std::min<int64_t>(mblocks, in_parallel_region() ? 1 : threads);
  if (parts <= 1) {
    rows(0, mblocks);
    return dst;
  }
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) rows(mblocks * t / parts, mblocks * (t + 1) / parts);
  });
  return dst;
}

// Whether op(A) is small enough to be packed whole for a call (its scratch is kept per thread).
template <class T> bool shares_a(int64_t M, int64_t K) { return M * K * int64_t(sizeof(T)) <= kSharedABytes; }

// ------------------------------------------------------------------ driver

template <class T> struct Problem {
  int64_t M, N, K;
  T alpha, beta;
  const T *A;
  int64_t ars, acs;
  const T *B; // null when `packed`
  int64_t brs, bcs;
  const PackedB<T> *packed;
  T *C;
  int64_t ldc;
  Config cfg;
  const void *const *kern; // [r]: the r-row micro-kernel
  int64_t q0 = 0;          // first panel of B (C's column 0 is B's column q0 * nr)
  PackedARef<T> ap = {};   // op(A) packed already (rows [ap.r0, ap.r0 + M) of it), else null
  const EpilogueArgs *epi = nullptr; // applied by the last k block's micro-kernels
};

// The epilogue hook: on the last k block, the micro-kernel variant that
// applies pr.epi in registers (its buffers addressed from C's (0, 0) by the
// tile's row and column), else the plain micro-kernel.
// `a`: the packed panel, or with cfg.a_in_place A's row where the tile starts.
template <class T>
void call_micro_kernel(const Problem<T> &pr, bool last, int rows, const T *a, const T *b, int64_t row, int64_t col,
                       int64_t kc, int64_t cols, T beta) {
  T *c = pr.C + row * pr.ldc + col;
  const void *const *ks = last && pr.epi ? pr.epi->kernels->by_rows.data() : pr.kern;
  const void *fn = ks[rows];
  if (!fn) { // a tail run as smaller kernels (KernelSet::covers): A is read in place, so any row starts one
    for (int r0 = 0; r0 < rows;) {
      int k = rows - r0;
      while (k > 0 && !ks[k]) --k;
      KILN_CHECK(k > 0, "gemm: no micro-kernel for ", rows - r0, " rows");
      call_micro_kernel(pr, last, k, a + r0 * pr.ars, b, row + r0, col, kc, cols, beta);
      r0 += k;
    }
    return;
  }
  if (last && pr.epi) {
    if (pr.cfg.a_in_place)
      return reinterpret_cast<EpilogueMicroKernelRows<T>>(const_cast<void *>(fn))(
          a, b, c, kc, pr.ldc, cols, pr.alpha, beta, pr.epi->ptrs, pr.epi->lds, row, col, pr.ars);
    return reinterpret_cast<EpilogueMicroKernel<T>>(const_cast<void *>(fn))(a, b, c, kc, pr.ldc, cols, pr.alpha, beta,
                                                                          pr.epi->ptrs, pr.epi->lds, row, col);
  }
  if (pr.cfg.a_in_place)
    return reinterpret_cast<MicroKernelRows<T>>(const_cast<void *>(fn))(a, b, c, kc, pr.ldc, cols, pr.alpha, beta,
                                                                       pr.ars);
  reinterpret_cast<MicroKernel<T>>(const_cast<void *>(fn))(a, b, c, kc, pr.ldc, cols, pr.alpha, beta);
}

// C rows [i0, i0 + mc) x panels [q0, q1) += the packed blocks' product. Ap:
// the packed A block, or with cfg.a_in_place op(A) at (i0, the k block's first column).
template <class T>
void macro_kernel(const Problem<T> &pr, const T *Ap, const T *Bp, int64_t i0, int64_t mc, int64_t q0, int64_t q1,
                  int64_t kc, T beta, bool last) {
  const int64_t nr = pr.cfg.nr();
  const int mr = pr.cfg.mr;
  const int64_t a_row = pr.cfg.a_in_place ? pr.ars : kc; // elements from one micro-panel's rows to the next
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t j0 = q * nr, cols = std::min<int64_t>(nr, pr.N - j0);
    const T *b = Bp + (q - q0) * kc * nr;
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const int rows = int(std::min<int64_t>(mr, mc - ir));
      call_micro_kernel(pr, last, rows, Ap + ir * a_row, b, i0 + ir, j0 - pr.q0 * nr, kc, cols, beta);
    }
  }
}

// One thread's share: rows [m0, m1) x panels [q0, q1).
template <class T> void run_range(const Problem<T> &pr, int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
  const Config &c = pr.cfg;
  const int64_t nr = c.nr(), kcmax = std::min(c.kc, pr.K), mcmax = std::min(c.mc, m1 - m0);
  const int64_t qstep = pr.packed ? q1 - q0 : c.nc / nr;
  const int64_t b_elems = pr.packed ? 0 : kcmax * std::min(qstep, q1 - q0) * nr;
  const int64_t a_elems = pr.ap.data || c.a_in_place ? 0 : mcmax * kcmax;
  T *scratch = static_cast<T *>(t_scratch.get(size_t(std::max<int64_t>(1, b_elems + a_elems)) * sizeof(T)));
  T *Ap = scratch + b_elems;
  for (int64_t jq = q0; jq < q1; jq += qstep) {
    const int64_t jq1 = std::min(q1, jq + qstep);
    for (int64_t pc = 0; pc < pr.K; pc += c.kc) {
      const int64_t kc = std::min(c.kc, pr.K - pc);
      const T *Bp = scratch;
      if (pr.packed) Bp = pr.packed->block(pc) + jq * kc * nr;
      else pack_b_block(pr.B, pr.brs, pr.bcs, pr.N, pc, kc, jq, jq1, nr, scratch);
      const T beta = pc == 0 ? pr.beta : T(1);
      for (int64_t ic = m0; ic < m1; ic += c.mc) {
        const int64_t mc = std::min(c.mc, m1 - ic);
        if (pr.ap.data) { // block pc at pc * ap.M, row i's panel at i * kc (see PackedARef)
          macro_kernel(pr, pr.ap.data + pc * pr.ap.M + (pr.ap.r0 + ic) * kc, Bp, ic, mc, jq, jq1, kc, beta, pc + kc >= pr.K);
          continue;
        }
        if (c.a_in_place) {
          macro_kernel(pr, pr.A + ic * pr.ars + pc, Bp, ic, mc, jq, jq1, kc, beta, pc + kc >= pr.K);
          continue;
        }
        pack_a(pr.A, pr.ars, pr.acs, ic, mc, pc, kc, c.mr, Ap);
        macro_kernel(pr, Ap, Bp, ic, mc, jq, jq1, kc, beta, pc + kc >= pr.K);
      }
    }
  }
}

// C = beta * C on an M x N block (BLAS: beta == 0 writes zeros without reading C).
template <class T> void scale_c(int64_t M, int64_t N, T beta, T *C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T *c = C + i * ldc;
    if (beta == T(0)) std::fill(c, c + N, T(0));
    else if (beta != T(1))
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
  }
}

// Below ~1 MFLOP a second thread costs more to wake than it saves.
constexpr int64_t kSplitFlops = int64_t(1) << 20;

template <class T> void run(const Problem<T> &pr, int threads) {
  KILN_CHECK(!pr.cfg.a_in_place || (pr.acs == 1 && !pr.ap.data),
             "gemm: kernels that read A in place need a row-major op(A) (column stride 1, no packed A), got column "
             "stride ",
             pr.acs, pr.ap.data ? " and a packed A" : "");
  const int64_t nr = pr.cfg.nr(), mr = pr.cfg.mr;
  const int64_t panels = (pr.N + nr - 1) / nr - pr.q0, mblocks = (pr.M + mr - 1) / mr;
  if (threads <= 0) threads = get_num_threads();
  int64_t parts = threads;
  if (threads < 2 || in_parallel_region() || 2 * pr.M * pr.N * pr.K < kSplitFlops) parts = 1;
  // Many row blocks: split M (each thread packs only its rows of A, and the
  // threads share B's blocks in L3). Few (M = 1..~400): split N when it has
  // panels for every thread, which keeps M = 128 and M = 1..64 balanced.
  const bool by_n = mblocks < 16 * parts && (panels >= mblocks || panels >= 2 * parts);
  parts = std::min(parts, by_n ? panels : mblocks);
  if (parts <= 1) return run_range(pr, 0, pr.M, pr.q0, pr.q0 + panels);
  const int64_t units = by_n ? panels : mblocks;
  // An N split needs all of op(A) on every thread: pack it once, each thread
  // its share of the rows, instead of every thread packing all of it.
  Problem<T> shared = pr;
  if (by_n && !pr.ap.data && !pr.cfg.a_in_place && shares_a<T>(pr.M, pr.K))
    shared.ap = {pack_a_rows<T>(pr.M, pr.K, pr.A, pr.ars, pr.acs, pr.cfg, int(parts)), pr.M, 0};
  // With A packed, a range of panels costs only a re-read of A: several
  // ranges per thread, claimed one at a time, so that a thread the OS starts
  // late (a loaded machine) leaves its share to the others instead of
  // holding up the call. 4 per thread, 2 when A is over half of L2.
  if (by_n && (shared.ap.data || pr.cfg.a_in_place) && parts == get_num_threads()) {
    const int64_t per_thread = pr.M * pr.K * int64_t(sizeof(T)) <= (int64_t(512) << 10) ? 4 : 2;
    const int64_t chunk = std::max<int64_t>(1, panels / (per_thread * parts));
    parallel_for_chunks(0, panels, chunk, [&](int64_t lo, int64_t hi) {
      run_range(shared, 0, pr.M, pr.q0 + lo, pr.q0 + hi);
    });
    return;
  }
  parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t u0 = units * t / parts, u1 = units * (t + 1) / parts;
      if (by_n) run_range(shared, 0, pr.M, pr.q0 + u0, pr.q0 + u1);
      else run_range(pr, u0 * mr, std::min(pr.M, u1 * mr), pr.q0, pr.q0 + panels);
    }
  });
}

void check_dims(const char *op, int64_t M, int64_t N, int64_t K) {
  KILN_CHECK(M >= 0 && N >= 0 && K >= 0, op, ": expected non-negative sizes, got M=", M, " N=", N, " K=", K);
}

void check_ld(const char *op, const char *arg, int64_t ld, int64_t rows, int64_t cols) {
  // A rows x cols row-major operand needs ld >= cols (BLAS: >= max(1, cols)).
  KILN_CHECK(ld >= std::max<int64_t>(1, cols), op, ": ", arg, " = ", ld, " is less than the ", cols,
             " columns of the ", rows, "x", cols, " operand");
}

template <class T> void check_config(const Config &c) {
  KILN_CHECK(c.mr >= 1 && c.nv >= 1 && c.lanes >= 1 && c.unroll >= 1 && c.kc >= 1 && c.mc >= c.mr &&
                 c.mc % c.mr == 0 && c.nc >= c.nr() && c.nc % c.nr() == 0,
             "gemm: invalid config ", c.to_string());
}

template <class T> bool quick_return(int64_t M, int64_t N, int64_t K, T alpha, T beta, T *C, int64_t ldc) {
  if (M == 0 || N == 0) return true;
  if (K > 0 && alpha != T(0)) return false;
  scale_c(M, N, beta, C, ldc);
  return true;
}

// Row counts of the kernels a problem of M rows uses: full tiles and the tail.
template <class T> const Kernels<T> &kernels_for(const Config &c, int64_t M) {
  return kernels<T>(c, M >= c.mr ? c.mr : 0, int(M % c.mr));
}

} // namespace

template <class T> int64_t PackedB<T>::bytes() const { return K * panels() * config.nr() * int64_t(sizeof(T)); }

template <class T>
PackedB<T> pack_b_strided(int64_t K, int64_t N, const T *B, int64_t rs, int64_t cs, const Config &config) {
  check_dims("gemm pack_b", 1, N, K);
  check_config<T>(config);
  KILN_CHECK(rs >= 0 && cs >= 0, "gemm pack_b: expected non-negative strides, got (", rs, ", ", cs, ")");
  PackedB<T> pb;
  pb.K = K, pb.N = N, pb.config = config;
  pb.config.a_in_place = false; // B's layout does not depend on it; gemm_packed reads A as its caller says
  const int64_t nr = config.nr(), elems = std::max<int64_t>(1, K * pb.panels() * nr);
  T *p = static_cast<T *>(alloc_packing(size_t(elems) * sizeof(T)));
  KILN_CHECK(p, "gemm pack_b: cannot allocate ", elems * int64_t(sizeof(T)), " bytes for ", K, "x", N, " weights");
  pb.data = std::shared_ptr<T>(p, [](T *q) { std::free(q); });
  // Packing is part of building a step (W5: 28 MB of weights, most of a warm
  // compile), so large weights are spread over kiln's pool: work items of up to
  // 16 panels of one k block, each writing its own part of the packing.
  const int64_t panels = pb.panels(), chunk = 16, per_block = (panels + chunk - 1) / chunk;
  const int64_t items = (K + config.kc - 1) / config.kc * per_block;
  auto pack = [&](int64_t lo, int64_t hi) {
    for (int64_t it = lo; it < hi; ++it) {
      const int64_t pc = it / per_block * config.kc, kc = std::min(config.kc, K - pc);
      const int64_t q0 = it % per_block * chunk, q1 = std::min(panels, q0 + chunk);
      pack_b_block(B, rs, cs, N, pc, kc, q0, q1, nr, p + pc * panels * nr + q0 * kc * nr);
    }
  };
  // Items claimed one at a time, so that a worker that gets its core late
  // leaves its share to the caller (`KILN_LOG=debug` prints each packing's time).
  if (elems < (int64_t(1) << 18)) pack(0, items);
  else kiln::parallel_for_chunks(0, items, 1, pack);
  return pb;
}

template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T *B, int64_t ldb, const Config &config) {
  check_dims("gemm pack_b", 1, N, K);
  check_ld("gemm pack_b", "ldb", ldb, trans_b ? N : K, trans_b ? K : N);
  return pack_b_strided(K, N, B, trans_b ? 1 : ldb, trans_b ? ldb : 1, config);
}

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t lda, const T *B,
          int64_t ldb, T beta, T *C, int64_t ldc, const Config &config) {
  check_dims("gemm", M, N, K);
  check_config<T>(config);
  check_ld("gemm", "lda", lda, trans_a ? K : M, trans_a ? M : K);
  check_ld("gemm", "ldb", ldb, trans_b ? N : K, trans_b ? K : N);
  check_ld("gemm", "ldc", ldc, M, N);
  if (quick_return(M, N, K, alpha, beta, C, ldc)) return;
  Problem<T> pr{M, N, K, alpha, beta, A, trans_a ? 1 : lda, trans_a ? lda : 1, B, trans_b ? 1 : ldb,
                trans_b ? ldb : 1, nullptr, C, ldc, config, kernels_for<T>(config, M).by_rows.data()};
  run(pr, config.threads);
}

template <class T>
void gemm_strided(int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
                  int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc, const Config &config) {
  check_dims("gemm_strided", M, N, K);
  check_config<T>(config);
  KILN_CHECK(ars >= 0 && acs >= 0 && brs >= 0 && bcs >= 0, "gemm_strided: expected non-negative strides, got A (",
             ars, ", ", acs, ") and B (", brs, ", ", bcs, ")");
  check_ld("gemm_strided", "ldc", ldc, M, N);
  if (quick_return(M, N, K, alpha, beta, C, ldc)) return;
  Problem<T> pr{M, N, K, alpha, beta, A, ars, acs, B, brs, bcs, nullptr, C, ldc, config, kernels_for<T>(config, M).by_rows.data()};
  run(pr, config.threads);
}

template <class T>
void gemm_packed(bool trans_a, int64_t M, T alpha, const T *A, int64_t lda, const PackedB<T> &B, T beta, T *C,
                 int64_t ldc, int threads) {
  const int64_t N = B.N, K = B.K;
  check_dims("gemm_packed", M, N, K);
  check_ld("gemm_packed", "lda", lda, trans_a ? K : M, trans_a ? M : K);
  check_ld("gemm_packed", "ldc", ldc, M, N);
  if (quick_return(M, N, K, alpha, beta, C, ldc)) return;
  Problem<T> pr{M, N, K, alpha, beta, A, trans_a ? 1 : lda, trans_a ? lda : 1, nullptr, 0, 0, &B, C, ldc,
                B.config, kernels_for<T>(B.config, M).by_rows.data()};
  run(pr, threads);
}

bool KernelSet::covers(int64_t M) const {
  if (M <= 0) return true;
  const int mr = config.mr;
  if (by_rows.size() != size_t(mr) + 1) return false;
  if (M >= mr && !by_rows[size_t(mr)]) return false;
  if (M % mr == 0 || by_rows[size_t(M % mr)]) return true;
  if (!config.a_in_place) return false; // a packed tail panel is laid out for its own row count
  // The tail as the largest resolved kernels, greedily (call_micro_kernel).
  for (int64_t rest = M % mr; rest > 0;) {
    int64_t k = rest;
    while (k > 0 && !by_rows[size_t(k)]) --k;
    if (k == 0) return false;
    rest -= k;
  }
  return true;
}

// Compiled by Jit::current() itself, not taken from the process-wide table:
// a kernel of a ScopedJit that is gone must not reach a plan built later.
template <class T> KernelSet resolve_kernels(const Config &config, const std::vector<int64_t> &rows) {
  check_config<T>(config);
  KernelSet ks;
  ks.config = config, ks.f64 = sizeof(T) == 8;
  ks.by_rows.assign(size_t(config.mr) + 1, nullptr);
  for (int64_t M : rows) {
    if (M <= 0) continue;
    for (int r : {M >= config.mr ? config.mr : 0, int(M % config.mr)}) {
      if (r <= 0 || ks.by_rows[size_t(r)]) continue;
      const TileConfig t = tile<T>(config, r);
      auto k = Jit::current().compile_module(t.key(), ukernel_builder(t));
      ks.by_rows[size_t(r)] = reinterpret_cast<const void *>(k->fn());
      ks.keep.push_back(std::move(k));
    }
  }
  return ks;
}

template <class T>
KernelSet resolve_epilogue_kernels(const Config &config, const Epilogue &epi, const std::vector<int64_t> &rows) {
  check_config<T>(config);
  KernelSet ks;
  ks.config = config, ks.f64 = sizeof(T) == 8;
  ks.by_rows.assign(size_t(config.mr) + 1, nullptr);
  const std::string ekey = epi.key();
  for (int64_t M : rows) {
    if (M <= 0) continue;
    for (int r : {M >= config.mr ? config.mr : 0, int(M % config.mr)}) {
      if (r <= 0 || ks.by_rows[size_t(r)]) continue;
      const TileConfig t = tile<T>(config, r);
      auto k = Jit::current().compile_module(t.key() + ";" + ekey, ukernel_builder(t, epi));
      ks.by_rows[size_t(r)] = reinterpret_cast<const void *>(k->fn());
      ks.keep.push_back(std::move(k));
    }
  }
  return ks;
}

namespace {
template <class T> void check_kernels(const char *op, const KernelSet &ks, int64_t M) {
  KILN_CHECK(ks.f64 == (sizeof(T) == 8) && ks.covers(M), op, ": the resolved kernels (", ks.config.to_string(),
             ") do not cover ", M, " rows of ", sizeof(T) == 8 ? "f64" : "f32");
}

// An epilogue reaches the micro-kernels only when every C element goes
// through one (K > 0, alpha != 0: no quick return) and its kernels match.
template <class T>
void check_epilogue_args(const char *op, const EpilogueArgs *epi, const KernelSet &ks, int64_t M, int64_t K, T alpha) {
  if (!epi) return;
  KILN_CHECK(K > 0 && alpha != T(0), op, ": an epilogue in registers needs K > 0 and alpha != 0, got K=", K);
  KILN_CHECK(epi->kernels && epi->ptrs && epi->lds, op, ": incomplete epilogue arguments");
  KILN_CHECK(epi->kernels->config.mr == ks.config.mr && epi->kernels->config.nr() == ks.config.nr() &&
                 epi->kernels->config.a_in_place == ks.config.a_in_place,
             op,
             ": epilogue kernels for ", epi->kernels->config.to_string(), ", product kernels for ",
             ks.config.to_string());
  check_kernels<T>(op, *epi->kernels, M);
}
} // namespace

namespace {
// A packed op(A) reference that covers rows [ap.r0, ap.r0 + M) of a K-deep operand for `config`.
template <class T> void check_ap(const char *op, const PackedARef<T> &ap, int64_t M, const Config &config) {
  KILN_CHECK(ap.r0 >= 0 && ap.r0 % config.mr == 0 && ap.r0 + M <= ap.M, op, ": rows [", ap.r0, ", ", ap.r0 + M,
             ") are not an mr-aligned range of the ", ap.M, " packed rows of A (mr = ", config.mr, ")");
}
} // namespace

template <class T>
const T *pack_a_shared(int64_t M, int64_t K, const T *A, int64_t ars, int64_t acs, const Config &config, int threads) {
  check_dims("gemm pack_a_shared", M, 1, K);
  check_config<T>(config);
  KILN_CHECK(ars >= 0 && acs >= 0, "gemm pack_a_shared: expected non-negative strides, got (", ars, ", ", acs, ")");
  KILN_CHECK(shares_a<T>(M, K), "gemm pack_a_shared: A [", M, ", ", K, "] is larger than ", kSharedABytes, " bytes");
  return pack_a_rows<T>(M, K, A, ars, acs, config, threads);
}

template <class T>
void gemm_strided(int64_t M, int64_t N, int64_t K, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
                  int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc, const KernelSet &ks, int threads,
                  const PackedARef<T> &ap, const EpilogueArgs *epi) {
  check_dims("gemm_strided", M, N, K);
  check_epilogue_args<T>("gemm_strided", epi, ks, M, K, alpha);
  KILN_CHECK(ars >= 0 && acs >= 0 && brs >= 0 && bcs >= 0, "gemm_strided: expected non-negative strides, got A (",
             ars, ", ", acs, ") and B (", brs, ", ", bcs, ")");
  check_ld("gemm_strided", "ldc", ldc, M, N);
  if (quick_return(M, N, K, alpha, beta, C, ldc)) return;
  check_kernels<T>("gemm_strided", ks, M);
  if (ap.data) check_ap("gemm_strided", ap, M, ks.config);
  Problem<T> pr{M, N, K, alpha, beta, A, ars, acs, B, brs, bcs, nullptr, C, ldc, ks.config, ks.by_rows.data(), 0, ap};
  pr.epi = epi;
  run(pr, threads);
}

template <class T>
void gemm_packed_cols(int64_t M, T alpha, const T *A, int64_t ars, int64_t acs, const PackedB<T> &B, int64_t j0,
                      int64_t n, T beta, T *C, int64_t ldc, const KernelSet &ks, int threads,
                      const PackedARef<T> &ap, const EpilogueArgs *epi) {
  const int64_t K = B.K, nr = B.config.nr();
  check_epilogue_args<T>("gemm_packed_cols", epi, ks, M, K, alpha);
  check_dims("gemm_packed_cols", M, n, K);
  KILN_CHECK(j0 >= 0 && j0 % nr == 0 && j0 + n <= B.N, "gemm_packed_cols: columns [", j0, ", ", j0 + n,
             ") are not a panel-aligned range of the ", B.N, " packed columns (nr = ", nr, ")");
  KILN_CHECK(ars >= 0 && acs >= 0, "gemm_packed_cols: expected non-negative A strides, got (", ars, ", ", acs, ")");
  KILN_CHECK(ks.config.mr == B.config.mr && ks.config.nr() == nr && ks.config.kc == B.config.kc,
             "gemm_packed_cols: kernels for ", ks.config.to_string(), " but B packed for ", B.config.to_string());
  check_ld("gemm_packed_cols", "ldc", ldc, M, n);
  if (quick_return(M, n, K, alpha, beta, C, ldc)) return;
  check_kernels<T>("gemm_packed_cols", ks, M);
  if (ap.data) check_ap("gemm_packed_cols", ap, M, B.config);
  Problem<T> pr{M, j0 + n, K, alpha, beta, A, ars, acs, nullptr, 0, 0, &B, C, ldc, B.config, ks.by_rows.data(),
                j0 / nr, ap};
  pr.cfg.a_in_place = ks.config.a_in_place;
  pr.epi = epi;
  run(pr, threads);
}

template <class T> MicroKernel<T> micro_kernel(const Config &config, int rows) {
  check_config<T>(config);
  KILN_CHECK(rows >= 1 && rows <= config.mr, "gemm micro_kernel: rows ", rows, " outside 1..", config.mr);
  KILN_CHECK(!config.a_in_place, "gemm micro_kernel: packed-A kernels only (", config.to_string(), ")");
  return reinterpret_cast<MicroKernel<T>>(const_cast<void *>(kernels<T>(config, rows, 0).by_rows[size_t(rows)]));
}

template <class T> int warm_up(const Config &config) {
  check_config<T>(config);
  int n = 0;
  for (int r = 1; r <= config.mr; ++r, ++n) kernels<T>(config, r, 0);
  return n;
}

// ------------------------------------------------------------------ FMA peak

namespace {
// CPU time of the calling thread: what a single-threaded probe gets when the
// machine is shared (wall time counts the other tenants' slices too).
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
} // namespace

double fma_peak_cpu_gflops(double ms) {
  const std::string isa = host_isa();
  const int lanes = isa == "avx512" ? 16 : isa == "avx2" ? 8 : 4, accs = isa == "avx512" ? 24 : 12;
  const std::string key = "gemm-fma-probe-v1;lanes=" + std::to_string(lanes) + ";accs=" + std::to_string(accs);
  auto k = Jit::current().compile_module(key, fma_probe_builder(lanes, accs));
  auto probe = reinterpret_cast<void (*)(int64_t, float *)>(reinterpret_cast<void *>(k->fn()));
  auto timed = [&](int64_t iters) {
    float io[2] = {0.999f, 1e-3f};
    const double t0 = thread_cpu_seconds();
    probe(iters, io);
    return thread_cpu_seconds() - t0;
  };
  int64_t iters = 1 << 16;
  while (timed(iters) < ms * 1e-4 && iters < (int64_t(1) << 40)) iters *= 4;
  const int64_t full = std::max<int64_t>(iters, int64_t(double(iters) * ms * 1e-3 / std::max(1e-9, timed(iters))));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, double(full) * accs * lanes * 2 / timed(full) * 1e-9);
  return best;
}

double fma_peak_gflops(int threads, double ms) {
  KILN_CHECK(threads >= 1, "fma_peak_gflops: threads must be >= 1, got ", threads);
  const std::string isa = host_isa();
  const int lanes = isa == "avx512" ? 16 : isa == "avx2" ? 8 : 4;
  const int accs = isa == "avx512" ? 24 : 12; // > 2 pipes x 4 cycles latency, within the register file
  const std::string key = "gemm-fma-probe-v1;lanes=" + std::to_string(lanes) + ";accs=" + std::to_string(accs);
  auto k = Jit::current().compile_module(key, fma_probe_builder(lanes, accs));
  auto probe = reinterpret_cast<void (*)(int64_t, float *)>(reinterpret_cast<void *>(k->fn()));
  using Clock = std::chrono::steady_clock;
  auto timed = [&](int64_t iters) {
    auto t0 = Clock::now();
    parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        float io[2] = {0.999f, 1e-3f};
        probe(iters, io);
      }
    });
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  int64_t iters = 1 << 16;
  while (timed(iters) < ms * 1e-4 && iters < (int64_t(1) << 40)) iters *= 4; // ~1/10 of the budget
  const int64_t full = std::max<int64_t>(iters, int64_t(double(iters) * ms * 1e-3 / std::max(1e-9, timed(iters))));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep)
    best = std::max(best, double(full) * accs * lanes * 2 * threads / timed(full) * 1e-9);
  return best;
}

template <class T> double ukernel_gflops(const Config &config, int64_t kc, double ms) {
  check_config<T>(config);
  KILN_CHECK(kc >= 1, "ukernel_gflops: kc must be >= 1, got ", kc);
  KILN_CHECK(!config.a_in_place, "ukernel_gflops: packed-A kernels only (", config.to_string(), ")");
  auto k = reinterpret_cast<MicroKernel<T>>(const_cast<void *>(kernels<T>(config, config.mr, 0).by_rows[config.mr]));
  const int64_t nr = config.nr();
  std::vector<T> a(size_t(config.mr * kc), T(0.5)), c(size_t(config.mr * nr), T(0));
  T *b = static_cast<T *>(std::aligned_alloc(64, size_t(kc * nr) * sizeof(T)));
  KILN_CHECK(b, "ukernel_gflops: cannot allocate B");
  std::fill(b, b + kc * nr, T(0.25));
  auto timed = [&](int64_t reps) {
    const double t0 = thread_cpu_seconds();
    for (int64_t r = 0; r < reps; ++r) k(a.data(), b, c.data(), kc, nr, nr, T(1), T(1));
    return thread_cpu_seconds() - t0;
  };
  int64_t reps = 64;
  while (timed(reps) < ms * 1e-4) reps *= 4;
  reps = std::max<int64_t>(reps, int64_t(double(reps) * ms * 1e-3 / std::max(1e-9, timed(reps))));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, 2.0 * config.mr * nr * kc * reps / timed(reps) * 1e-9);
  std::free(b);
  return best;
}

#define KILN_GEMM_INSTANTIATE(T)                                                                                \
  template Config default_config<T>();                                                                         \
  template Config product_config<T>(int64_t);                                                                   \
  template Config config_for_isa<T>(const std::string &);                                                      \
  template struct PackedB<T>;                                                                                  \
  template PackedB<T> pack_b<T>(bool, int64_t, int64_t, const T *, int64_t, const Config &);                  \
  template PackedB<T> pack_b_strided<T>(int64_t, int64_t, const T *, int64_t, int64_t, const Config &);        \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T *, int64_t, const T *, int64_t, T, T *, \
                        int64_t, const Config &);                                                              \
  template void gemm_strided<T>(int64_t, int64_t, int64_t, T, const T *, int64_t, int64_t, const T *, int64_t,   \
                                int64_t, T, T *, int64_t, const Config &);                                    \
  template void gemm_packed<T>(bool, int64_t, T, const T *, int64_t, const PackedB<T> &, T, T *, int64_t, int);  \
  template int warm_up<T>(const Config &);                                                                     \
  template KernelSet resolve_kernels<T>(const Config &, const std::vector<int64_t> &);                         \
  template void gemm_strided<T>(int64_t, int64_t, int64_t, T, const T *, int64_t, int64_t, const T *, int64_t,   \
                                int64_t, T, T *, int64_t, const KernelSet &, int, const PackedARef<T> &,      \
                                const EpilogueArgs *);                                                        \
  template void gemm_packed_cols<T>(int64_t, T, const T *, int64_t, int64_t, const PackedB<T> &, int64_t, int64_t, \
                                    T, T *, int64_t, const KernelSet &, int, const PackedARef<T> &,           \
                                    const EpilogueArgs *);                                                    \
  template const T *pack_a_shared<T>(int64_t, int64_t, const T *, int64_t, int64_t, const Config &, int);       \
  template KernelSet resolve_epilogue_kernels<T>(const Config &, const Epilogue &, const std::vector<int64_t> &); \
  template MicroKernel<T> micro_kernel<T>(const Config &, int);                                                \
  template double ukernel_gflops<T>(const Config &, int64_t, double);
KILN_GEMM_INSTANTIATE(float)
KILN_GEMM_INSTANTIATE(double)

} // namespace kiln::codegen::gemm
