// Linear algebra: mm, bmm, matmul, addmm, linear (libtorch semantics).
//
// Floating-point products go to OpenBLAS. Operands are passed as views: a
// row-major or transposed 2-D slice becomes a BLAS operand with a transpose
// flag, broadcast batch dims are walked with stride 0, and only a slice whose
// strides BLAS cannot describe is packed.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/kernels/linalg_internal.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"
#include "runtime/trace_hook.h"

extern "C" void openblas_set_num_threads(int);

namespace kiln {
namespace detail::nn {

// ------------------------------------------------------------------ threads

namespace {
// OpenBLAS's thread count is process-wide, and OpenBLAS 0.3.21 does not support
// changing it while another thread is inside it, which concurrent callers of a
// compiled function would do. So OpenBLAS runs single-threaded for the whole
// process, set once before kiln's first BLAS call, and kiln spreads large
// products over its own pool instead (gemm_blas).
void blas_single_threaded() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}
} // namespace

bool batch_parallel(int64_t nbatch, int64_t flops_each) {
  const int threads = get_num_threads();
  if (nbatch < 2 || threads < 2 || in_parallel_region()) return false;
  return nbatch >= threads || flops_each < (int64_t(1) << 21);
}

// ------------------------------------------------------------------ checks

void check_floating(const Tensor &t, const char *op, const char *arg) {
  KILN_CHECK(is_floating(t.dtype()), op, ": expected ", arg, " to be a floating-point tensor, got ", t.dtype());
}

void check_same_dtype(const Tensor &t, DType want, const char *op, const char *arg, const char *ref_arg) {
  KILN_CHECK(t.dtype() == want, op, ": expected ", arg, " to have dtype ", want, " (as ", ref_arg, "), got ",
             t.dtype());
}

void check_num_inputs(const std::vector<Tensor> &in, size_t n, const char *op) {
  KILN_CHECK(in.size() == n, op, ": expected ", n, " inputs, got ", in.size());
}

// ------------------------------------------------------------------ packing

namespace {
// Calls f(src_offset, dst_index) for every element of a strided view, in order.
template <class F> void for_each_offset(IntArrayRef sizes, IntArrayRef strides, F &&f) {
  const size_t nd = sizes.size();
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (numel == 0) return;
  if (nd == 0) {
    f(0, 0);
    return;
  }
  Dims idx;
  idx.resize(nd, 0);
  const int64_t inner = sizes[nd - 1], inner_stride = strides[nd - 1];
  int64_t off = 0;
  for (int64_t i = 0; i < numel; i += inner) {
    for (int64_t j = 0; j < inner; ++j) f(off + j * inner_stride, i + j);
    for (size_t d = nd - 1; d-- > 0;) { // odometer over the outer dims
      if (++idx[d] < sizes[d]) {
        off += strides[d];
        break;
      }
      off -= (sizes[d] - 1) * strides[d];
      idx[d] = 0;
    }
  }
}
} // namespace

Tensor packed(const Tensor &x, DType dtype) {
  if (x.dtype() == dtype && (x.is_meta() || x.is_contiguous())) return x;
  Tensor out = make_tensor(x.sizes(), dtype, x.is_meta());
  if (out.is_meta()) return out;
  dispatch_storage_dtype(x.dtype(), [&]<class S>() {
    dispatch_storage_dtype(dtype, [&]<class D>() {
      const S *src = static_cast<const S *>(x.raw_data());
      D *dst = static_cast<D *>(out.raw_data());
      for_each_offset(x.sizes(), x.strides(), [&](int64_t so, int64_t di) { dst[di] = static_cast<D>(src[so]); });
    });
  });
  return out;
}

// ------------------------------------------------------------------ gemm

namespace {
struct BlasOperand {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

// How BLAS (row-major) can read a rows x cols operand with the given strides:
// as is (unit column stride), transposed (unit row stride), or not at all.
// A size-1 dim's stride never matters.
BlasOperand blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  BlasOperand r;
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= cols)) {
    r = {true, false, rows == 1 ? std::max<int64_t>(cols, 1) : rs};
  } else if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) {
    r = {true, true, cols == 1 ? std::max<int64_t>(rows, 1) : cs};
  }
  if (r.ok && r.ld > INT_MAX) r.ok = false;
  return r;
}

template <class T>
void blas_call(bool ta, bool tb, int m, int n, int k, T alpha, const T *A, int lda, const T *B, int ldb, T beta,
               T *C, int ldc) {
  auto flag = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, flag(ta), flag(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, flag(ta), flag(tb), m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// A rows x cols strided operand copied row-major into buf.
template <class T> const T *pack_operand(const T *p, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                         std::vector<T> &buf) {
  buf.resize(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) buf[size_t(i * cols + j)] = p[i * rs + j * cs];
  return buf.data();
}

template <class T> void scale_c(int64_t m, int64_t n, T beta, T *C, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

// Products of at least this many multiply-adds, called outside a parallel
// region, are split over kiln's threads: OpenBLAS's own threshold for threading
// (SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD in its interface/gemm.c).
constexpr int64_t kSplitMacs = int64_t(1) << 18;
// Split points fall on multiples of this many rows or columns (a multiple of
// every OpenBLAS micro-kernel's register block), so no part gets a ragged edge
// that a single call would not have had.
constexpr int64_t kSplitAlign = 16;

// How many parts to split an m x n x k product into over `threads` threads.
int64_t split_parts(int64_t m, int64_t n, int64_t k, int threads) {
  if (threads < 2 || in_parallel_region() || m * n * k < kSplitMacs) return 1;
  const int64_t blocks = (std::max(m, n) + kSplitAlign - 1) / kSplitAlign;
  return std::min<int64_t>(threads, blocks);
}

template <class T>
void gemm_blas(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
               int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc) {
  KILN_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && ldc <= INT_MAX,
             "matmul: matrix dimensions ", m, "x", k, " and ", k, "x", n, " are too large for BLAS");
  blas_single_threaded();
  std::vector<T> abuf, bbuf;
  BlasOperand la = blas_layout(m, k, ars, acs);
  if (!la.ok) {
    A = pack_operand(A, m, k, ars, acs, abuf);
    la = {true, false, std::max<int64_t>(k, 1)};
  }
  BlasOperand lb = blas_layout(k, n, brs, bcs);
  if (!lb.ok) {
    B = pack_operand(B, k, n, brs, bcs, bbuf);
    lb = {true, false, std::max<int64_t>(n, 1)};
  }
  ldc = std::max<int64_t>(ldc, 1);
  // Rows [i0, i0 + mi) x columns [j0, j0 + nj) of C: one single-threaded BLAS call.
  auto part = [&](int64_t i0, int64_t mi, int64_t j0, int64_t nj) {
    const T *a = A + (la.trans ? i0 : i0 * la.ld);
    const T *b = B + (lb.trans ? j0 * lb.ld : j0);
    blas_call<T>(la.trans, lb.trans, int(mi), int(nj), int(k), alpha, a, int(la.ld), b, int(lb.ld), beta,
                 C + i0 * ldc + j0, int(ldc));
  };
  const int64_t parts = split_parts(m, n, k, get_num_threads());
  if (parts == 1) return part(0, m, 0, n);
  // Split the longer side: each part packs all of the other operand, so the
  // packing done twice is the smaller one.
  const bool by_rows = m >= n;
  const int64_t len = by_rows ? m : n;
  const int64_t blocks = (len + kSplitAlign - 1) / kSplitAlign;
  parallel_for(0, blocks, (blocks + parts - 1) / parts, [&](int64_t lo, int64_t hi) {
    const int64_t s = lo * kSplitAlign, e = std::min(hi * kSplitAlign, len);
    if (by_rows) part(s, e - s, 0, n);
    else part(0, m, s, e - s);
  });
}

// Floating products of at most this many multiply-adds whose B rows are
// contiguous run as i-p-j loops: a BLAS call packs its operands first, which
// for W6's backward ([64, 1] x [1, 64] weight gradients, [1, 64] x [64, 64])
// costs more than the arithmetic.
constexpr int64_t kLoopMacs = 8192;

template <class T>
void gemm_small(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
                int64_t brs, T beta, T *C, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    T *c = C + i * ldc;
    for (int64_t j = 0; j < n; ++j) c[j] = beta == T(0) ? T(0) : beta * c[j];
    for (int64_t p = 0; p < k; ++p) {
      const T a = alpha * A[i * ars + p * acs];
      const T *b = B + p * brs;
      for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
    }
  }
}

// Integer (and any non-BLAS) product: i-p-j loops, unsigned arithmetic so that
// overflow wraps as in torch instead of being undefined.
template <class T>
void gemm_loops(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
                int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc) {
  using U = wrap_uint_t<T>;
  for (int64_t i = 0; i < m; ++i) {
    T *c = C + i * ldc;
    for (int64_t j = 0; j < n; ++j) c[j] = beta == T(0) ? T(0) : T(U(beta) * U(c[j]));
    for (int64_t p = 0; p < k; ++p) {
      const U a = U(alpha) * U(A[i * ars + p * acs]);
      const T *b = B + p * brs;
      for (int64_t j = 0; j < n; ++j) c[j] = T(U(c[j]) + a * U(b[j * bcs]));
    }
  }
}
} // namespace

template <class T>
void gemm(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t ars, int64_t acs, const T *B,
          int64_t brs, int64_t bcs, T beta, T *C, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) { // BLAS may read A/B or skip beta scaling here: do it ourselves
    scale_c(m, n, beta, C, ldc);
    return;
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (m * n * k <= kLoopMacs && (bcs == 1 || n == 1))
      return gemm_small(m, n, k, alpha, A, ars, acs, B, brs, beta, C, ldc);
    gemm_blas(m, n, k, alpha, A, ars, acs, B, brs, bcs, beta, C, ldc);
  }
  else
    gemm_loops(m, n, k, alpha, A, ars, acs, B, brs, bcs, beta, C, ldc);
}

template void gemm<float>(int64_t, int64_t, int64_t, float, const float *, int64_t, int64_t, const float *,
                          int64_t, int64_t, float, float *, int64_t);
template void gemm<double>(int64_t, int64_t, int64_t, double, const double *, int64_t, int64_t, const double *,
                           int64_t, int64_t, double, double *, int64_t);
template void gemm<int32_t>(int64_t, int64_t, int64_t, int32_t, const int32_t *, int64_t, int64_t,
                            const int32_t *, int64_t, int64_t, int32_t, int32_t *, int64_t);
template void gemm<int64_t>(int64_t, int64_t, int64_t, int64_t, const int64_t *, int64_t, int64_t,
                            const int64_t *, int64_t, int64_t, int64_t, int64_t *, int64_t);

} // namespace detail::nn

// ==================================================================== ops

namespace {
using namespace detail::nn;

// One operand of a batched product: element [b..., i, j] of a [batch..., rows,
// cols] view sits at base + sum(b_d * batch_stride_d) + i * rs + j * cs. A
// broadcast batch dim has stride 0, so expanded operands are never copied.
struct Operand {
  const char *base = nullptr;
  Dims batch_strides; // aligned with the output batch dims
  int64_t rs = 0, cs = 0;
};

// t is [tb..., rows, cols] with tb broadcastable to `batch`.
Operand make_operand(const Tensor &t, IntArrayRef batch) {
  Operand o;
  const int64_t nd = t.dim();
  o.rs = t.stride(nd - 2);
  o.cs = t.stride(nd - 1);
  const int64_t tb = nd - 2, ob = int64_t(batch.size());
  o.batch_strides.resize(size_t(ob), 0);
  for (int64_t d = 0; d < tb; ++d) {
    int64_t od = ob - tb + d;
    o.batch_strides[size_t(od)] = t.size(d) == 1 ? 0 : t.stride(d);
  }
  if (!t.is_meta()) o.base = static_cast<const char *>(t.raw_data());
  return o;
}

// Element offsets (in elements) of each batch's matrix, in row-major batch order.
std::vector<int64_t> batch_offsets(IntArrayRef batch, const Dims &strides) {
  int64_t nb = 1;
  for (int64_t s : batch) nb *= s;
  std::vector<int64_t> offs(size_t(std::max<int64_t>(nb, 0)), 0);
  Dims idx;
  idx.resize(batch.size(), 0);
  int64_t off = 0;
  for (int64_t b = 0; b < nb; ++b) {
    offs[size_t(b)] = off;
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) {
        off += strides[d];
        break;
      }
      off -= (batch[d] - 1) * strides[d];
      idx[d] = 0;
    }
  }
  return offs;
}

// Batches smaller than this many multiply-adds run together in one chunk.
constexpr int64_t kGemmGrainFlops = int64_t(1) << 18;

// out (contiguous [batch..., m, n]) = alpha * A @ B + beta * out.
void batched_gemm(IntArrayRef batch, int64_t m, int64_t n, int64_t k, const Operand &A, const Operand &B,
                  const Tensor &out, const Scalar &alpha, const Scalar &beta) {
  if (m == 0 || n == 0) return;
  // A single matrix (mm, addmm, linear) needs no offset tables: small products
  // (W6-like 1x64x64) are dominated by per-call overhead.
  static const int64_t kZero = 0;
  std::vector<int64_t> av, bv;
  const int64_t *aoff = &kZero, *boff = &kZero;
  int64_t nb = 1;
  if (!batch.empty()) {
    av = batch_offsets(batch, A.batch_strides);
    bv = batch_offsets(batch, B.batch_strides);
    aoff = av.data(), boff = bv.data(), nb = int64_t(av.size());
  }
  if (nb == 0) return;
  dispatch_dtype(out.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      KILN_FAIL("matmul: bool tensors are not supported");
    } else {
      const T *a = reinterpret_cast<const T *>(A.base);
      const T *b = reinterpret_cast<const T *>(B.base);
      T *c = static_cast<T *>(out.raw_data());
      const T al = alpha.to<T>(), be = beta.to<T>();
      auto run = [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          gemm<T>(m, n, k, al, a + aoff[i], A.rs, A.cs, b + boff[i], B.rs, B.cs, be,
                  c + i * m * n, n);
      };
      // Several batches: one BLAS call per batch, batches spread over kiln's
      // pool. Otherwise each call spreads its own product (gemm_blas).
      if (batch_parallel(nb, m * n * k)) {
        const int64_t grain = std::max<int64_t>(1, kGemmGrainFlops / std::max<int64_t>(m * n * k, 1));
        parallel_for(0, nb, grain, run);
        return;
      }
      run(0, nb);
    }
  });
}

void check_matmul_dtypes(const Tensor &a, const Tensor &b, const char *op, const char *an, const char *bn) {
  KILN_CHECK(a.dtype() == b.dtype(), op, ": expected ", an, " and ", bn, " to have the same dtype, but got ",
             a.dtype(), " != ", b.dtype());
  KILN_CHECK(a.dtype() != kBool, op, ": bool tensors are not supported");
}

// True when `from` broadcasts to exactly `to`.
bool broadcasts_to(IntArrayRef from, IntArrayRef to) {
  if (from.size() > to.size()) return false;
  const size_t off = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1 && from[d] != to[off + d]) return false;
  return true;
}

std::string mat_str(int64_t r, int64_t c) { return detail::concat(r, "x", c); }

// Copies `src` (broadcastable to out's [m, n] shape) into contiguous out.
void broadcast_into(const Tensor &src, const Tensor &out) {
  const int64_t m = out.size(0), n = out.size(1);
  Dims st;
  st.resize(2, 0);
  const int64_t sd = src.dim();
  for (int64_t d = 0; d < sd; ++d) {
    int64_t od = 2 - sd + d;
    st[size_t(od)] = src.size(d) == 1 ? 0 : src.stride(d);
  }
  dispatch_dtype(out.dtype(), [&]<class T>() {
    const T *s = static_cast<const T *>(src.raw_data());
    T *o = static_cast<T *>(out.raw_data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) o[i * n + j] = s[i * st[0] + j * st[1]];
  });
}

// x [..., rows, k] as a single [R, k] matrix: the row stride when x's leading
// dims nest into one (always for contiguous x), otherwise nullopt.
std::optional<int64_t> fold_row_stride(const Tensor &x) {
  int64_t first = -1, prev = -1; // innermost and last seen non-trivial row dims
  for (int64_t d = x.dim() - 2; d >= 0; --d) {
    if (x.size(d) == 1) continue;
    if (prev >= 0 && x.stride(d) != x.stride(prev) * x.size(prev)) return std::nullopt;
    if (first < 0) first = d;
    prev = d;
  }
  return first < 0 ? std::max<int64_t>(x.size(-1), 1) : x.stride(first);
}

int64_t leading_rows(const Tensor &x) {
  int64_t r = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) r *= x.size(d);
  return r;
}
} // namespace

Tensor mm(const Tensor &a, const Tensor &b) {
  detail::check_defined(a, "mm", "mat1");
  detail::check_defined(b, "mm", "mat2");
  KILN_CHECK(a.dim() == 2, "mm: mat1 must be a matrix, got shape ", shape_str(a.sizes()));
  KILN_CHECK(b.dim() == 2, "mm: mat2 must be a matrix, got shape ", shape_str(b.sizes()));
  KILN_CHECK(a.size(1) == b.size(0), "mm: mat1 and mat2 shapes cannot be multiplied (",
             mat_str(a.size(0), a.size(1)), " and ", mat_str(b.size(0), b.size(1)), ")");
  check_matmul_dtypes(a, b, "mm", "mat1", "mat2");
  KILN_TRACE(Mm, KILN_NN_INPUTS(a, b));
  Tensor out = detail::make_result({a.size(0), b.size(1)}, a.dtype(), {&a, &b});
  if (out.is_meta()) return out;
  batched_gemm({}, a.size(0), b.size(1), a.size(1), make_operand(a, {}), make_operand(b, {}), out, 1, 0);
  return out;
}

Tensor bmm(const Tensor &a, const Tensor &b) {
  detail::check_defined(a, "bmm", "self");
  detail::check_defined(b, "bmm", "mat2");
  KILN_CHECK(a.dim() == 3, "bmm: batch1 must be a 3-D tensor, got shape ", shape_str(a.sizes()));
  KILN_CHECK(b.dim() == 3, "bmm: batch2 must be a 3-D tensor, got shape ", shape_str(b.sizes()));
  KILN_CHECK(a.size(0) == b.size(0), "bmm: batch1 and batch2 must have the same batch size, got shapes ",
             shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  KILN_CHECK(a.size(2) == b.size(1), "bmm: batch1 and batch2 shapes cannot be multiplied (",
             shape_str(a.sizes()), " and ", shape_str(b.sizes()), ")");
  check_matmul_dtypes(a, b, "bmm", "batch1", "batch2");
  KILN_TRACE(Bmm, KILN_NN_INPUTS(a, b));
  Tensor out = detail::make_result({a.size(0), a.size(1), b.size(2)}, a.dtype(), {&a, &b});
  if (out.is_meta()) return out;
  const int64_t batch[1] = {a.size(0)};
  IntArrayRef bs(batch, 1);
  batched_gemm(bs, a.size(1), b.size(2), a.size(2), make_operand(a, bs), make_operand(b, bs), out, 1, 0);
  return out;
}

Tensor matmul(const Tensor &a, const Tensor &b) {
  detail::check_defined(a, "matmul", "self");
  detail::check_defined(b, "matmul", "other");
  const int64_t da = a.dim(), db = b.dim();
  KILN_CHECK(da >= 1 && db >= 1, "matmul: both arguments need to be at least 1D, but they are ", da, "D and ",
             db, "D");
  check_matmul_dtypes(a, b, "matmul", "self", "other");
  // A 1-D operand acts as a row (left) or column (right) vector whose dim is dropped.
  const int64_t n = da == 1 ? 1 : a.size(-2), k = a.size(-1);
  const int64_t k2 = db == 1 ? b.size(0) : b.size(-2), p = db == 1 ? 1 : b.size(-1);
  KILN_CHECK(k == k2, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied (", mat_str(n, k), " and ", mat_str(k2, p), ")");
  IntArrayRef ab(a.sizes().data(), size_t(std::max<int64_t>(da - 2, 0)));
  IntArrayRef bb(b.sizes().data(), size_t(std::max<int64_t>(db - 2, 0)));
  Dims batch = detail::broadcast_shapes(ab, bb, "matmul");
  KILN_TRACE(Matmul, KILN_NN_INPUTS(a, b));

  Dims out_shape = batch;
  if (da > 1) out_shape.push_back(n);
  if (db > 1) out_shape.push_back(p);
  Tensor out = detail::make_result(out_shape, a.dtype(), {&a, &b});
  if (out.is_meta()) return out;
  // Views are safe here: tracing has returned above.
  Tensor A = da == 1 ? a.unsqueeze(0) : a;
  Tensor B = db == 1 ? b.unsqueeze(1) : b;
  // [batch..., n, k] @ [k, p]: fold the batch into the rows, one large GEMM.
  if (da >= 3 && db <= 2) {
    if (auto rs = fold_row_stride(A)) {
      Operand oa{static_cast<const char *>(A.raw_data()), {}, *rs, A.stride(-1)};
      batched_gemm({}, leading_rows(A), p, k, oa, make_operand(B, {}), out, 1, 0);
      return out;
    }
  }
  batched_gemm(batch, n, p, k, make_operand(A, batch), make_operand(B, batch), out, 1, 0);
  return out;
}

Tensor addmm(const Tensor &input, const Tensor &mat1, const Tensor &mat2, const Scalar &beta,
             const Scalar &alpha) {
  detail::check_defined(input, "addmm", "self");
  detail::check_defined(mat1, "addmm", "mat1");
  detail::check_defined(mat2, "addmm", "mat2");
  KILN_CHECK(mat1.dim() == 2, "addmm: mat1 must be a matrix, got shape ", shape_str(mat1.sizes()));
  KILN_CHECK(mat2.dim() == 2, "addmm: mat2 must be a matrix, got shape ", shape_str(mat2.sizes()));
  KILN_CHECK(mat1.size(1) == mat2.size(0), "addmm: mat1 and mat2 shapes cannot be multiplied (",
             mat_str(mat1.size(0), mat1.size(1)), " and ", mat_str(mat2.size(0), mat2.size(1)), ")");
  check_matmul_dtypes(mat1, mat2, "addmm", "mat1", "mat2");
  check_matmul_dtypes(input, mat1, "addmm", "self", "mat1");
  const int64_t m = mat1.size(0), n = mat2.size(1);
  const int64_t mn[2] = {m, n};
  KILN_CHECK(broadcasts_to(input.sizes(), IntArrayRef(mn, 2)),
             "addmm: self of shape ", shape_str(input.sizes()), " cannot be broadcast to ",
             shape_str(IntArrayRef(mn, 2)));
  if (is_integral(input.dtype())) {
    KILN_CHECK(!beta.is_floating_point() && !alpha.is_floating_point(),
               "addmm: for integral input tensors, beta and alpha must not be floating-point numbers");
  }
  KILN_TRACE(Addmm, KILN_NN_INPUTS(input, mat1, mat2), .beta = beta, .alpha = alpha);
  Tensor out = detail::make_result(IntArrayRef(mn, 2), input.dtype(), {&input, &mat1, &mat2});
  if (out.is_meta()) return out;
  const bool use_input = beta.toDouble() != 0.0; // beta == 0: input ignored, NaN included (torch)
  if (use_input) broadcast_into(input, out);
  batched_gemm({}, m, n, mat1.size(1), make_operand(mat1, {}), make_operand(mat2, {}), out, alpha,
               use_input ? beta : Scalar(0));
  return out;
}

Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias) {
  detail::check_defined(x, "linear", "input");
  detail::check_defined(weight, "linear", "weight");
  KILN_CHECK(x.dim() >= 1, "linear: input must have at least 1 dimension, got shape ", shape_str(x.sizes()));
  KILN_CHECK(weight.dim() == 2, "linear: weight must be 2-D [out_features, in_features], got shape ",
             shape_str(weight.sizes()));
  const int64_t in_f = weight.size(1), out_f = weight.size(0);
  KILN_CHECK(x.size(-1) == in_f, "linear: input and weight shapes cannot be multiplied (input ",
             shape_str(x.sizes()), ", weight ", shape_str(weight.sizes()), ")");
  check_matmul_dtypes(x, weight, "linear", "input", "weight");
  if (bias.defined()) {
    KILN_CHECK(bias.dtype() == x.dtype(), "linear: expected bias to have dtype ", x.dtype(), ", got ",
               bias.dtype());
    KILN_CHECK(bias.dim() == 0 || (bias.dim() == 1 && (bias.size(0) == out_f || bias.size(0) == 1)),
               "linear: bias of shape ", shape_str(bias.sizes()), " does not match out_features ", out_f,
               " (weight ", shape_str(weight.sizes()), ")");
  }
  KILN_TRACE(Linear, KILN_NN_INPUTS(x, weight, bias));
  Dims out_shape(x.sizes());
  out_shape[out_shape.size() - 1] = out_f;
  Tensor out = detail::make_result(out_shape, x.dtype(), {&x, &weight, &bias});
  if (out.is_meta()) return out;

  Tensor x2 = x.dim() == 1 ? x.unsqueeze(0) : x;
  const int64_t rows = leading_rows(x2);
  std::optional<int64_t> rs = fold_row_stride(x2);
  if (!rs) { // leading dims that do not nest: one packed copy
    x2 = packed(x2);
    rs = in_f;
  }
  const bool has_bias = bias.defined();
  if (has_bias) {
    Tensor o2 = out.view({rows, out_f});
    broadcast_into(bias, o2);
  }
  // w^T is a transposed view of weight: BLAS reads it with a transpose flag.
  Operand oa{static_cast<const char *>(x2.raw_data()), {}, *rs, x2.stride(-1)};
  Operand ow{static_cast<const char *>(weight.raw_data()), {}, weight.stride(1), weight.stride(0)};
  batched_gemm({}, rows, out_f, in_f, oa, ow, out, 1, has_bias ? 1 : 0);
  return out;
}

// ------------------------------------------------------------------ adapters

namespace adapters {
std::vector<Tensor> Mm(const std::vector<Tensor> &in, const Attrs &) {
  check_num_inputs(in, 2, "mm");
  return {mm(in[0], in[1])};
}
std::vector<Tensor> Bmm(const std::vector<Tensor> &in, const Attrs &) {
  check_num_inputs(in, 2, "bmm");
  return {bmm(in[0], in[1])};
}
std::vector<Tensor> Matmul(const std::vector<Tensor> &in, const Attrs &) {
  check_num_inputs(in, 2, "matmul");
  return {matmul(in[0], in[1])};
}
std::vector<Tensor> Addmm(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Addmm at{a};
  check_num_inputs(in, 3, "addmm");
  return {addmm(in[0], in[1], in[2], at.beta(), at.alpha())};
}
std::vector<Tensor> Linear(const std::vector<Tensor> &in, const Attrs &) {
  check_num_inputs(in, 3, "linear");
  return {linear(in[0], in[1], in[2])};
}
} // namespace adapters

} // namespace kiln
