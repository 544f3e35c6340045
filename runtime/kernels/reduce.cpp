// Reductions: sum, mean, prod, amax/amin, max/min (full and over a dim),
// argmax/argmin, var/std and norm, with libtorch's semantics.
//
// Every op runs through one engine (reduce_run). The input's dims are split into
// kept dims (the output, always a fresh contiguous tensor) and reduced dims; size-1
// dims are dropped and neighbours that step through memory as one are merged.
// Then one of two loop shapes runs:
//   rows     per output element, walk the reduced dims; the innermost reduced dim
//            is one 1-D "row" call, vectorized when it is contiguous (dim=-1 on a
//            contiguous tensor, full reductions).
//   columns  when the output's innermost dim is contiguous in the input and the
//            reduction is not (dim=0 on [N, C]), each reduced index folds one
//            contiguous input row into a contiguous accumulator row: strided
//            accumulation, no transposed copy.
// Tasks are decided by the shape only, never by the thread count, and partial
// results are combined in a fixed order: results do not depend on set_num_threads.
//
// Accuracy: float32 sums run in float32 lanes over blocks of 1024 elements (32
// lanes, 32 adds each), every block folded into a double; float64 sums, products,
// means, var/std and norms accumulate in double lanes; integer and bool sums and
// products in wrapping 64-bit integers (as torch's int64 arithmetic).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/kernels/loops.h"
#include "runtime/kernels/reduce_rows.h"
#include "runtime/parallel.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

constexpr int64_t kGrain = 32768;   // input elements per parallel task (docs/ops.md)
// Accumulator row width of the columns loop: each reduced step reads this many
// contiguous elements (whole 4 KiB pages, so the prefetcher keeps streaming; 256
// columns of a [4096, 1024] float tensor ran 10x slower), and a row of double
// accumulators (8 KiB) stays in L1.
constexpr int64_t kColBlock = 1024;
constexpr int64_t kMinColWidth = 4; // narrower outputs reduce as strided rows instead

using namespace reduce_rows;

// ---------------------------------------------------------------- argument checks

std::string in_shape(const Tensor &x) { return " (input shape " + shape_str(x.sizes()) + ")"; }

// detail::wrap_dim, with the input's shape added to its message.
int64_t wrap(int64_t dim, const Tensor &x, const char *op) {
  try {
    return detail::wrap_dim(dim, x.dim(), op);
  } catch (const Error &e) {
    throw Error(e.what() + in_shape(x));
  }
}

// Which dims to reduce, as the tracer records them, and the result shape.
struct ReducePlan {
  bool mask[kMaxDims + 1] = {}; // mask[d]: dim d is reduced
  Dims dims;                    // the dims given, wrapped, in the order given
  Dims out_shape;
  int64_t count = 1; // elements folded into each output
};

// An empty dim list reduces every dim (torch's dim=None).
ReducePlan plan_dims(const Tensor &x, IntArrayRef dims, bool keepdim, const char *op) {
  ReducePlan p;
  for (int64_t d : dims) {
    int64_t w = wrap(d, x, op);
    KILN_CHECK(!p.mask[w], op, ": dim ", w, " appears multiple times in the list of dims ", shape_str(dims),
               in_shape(x));
    p.mask[w] = true;
    p.dims.push_back(w);
  }
  for (int64_t i = 0; i < x.dim(); ++i) {
    p.mask[i] = dims.empty() || p.mask[i];
    int64_t size = x.sizes()[i];
    if (!p.mask[i]) p.out_shape.push_back(size);
    else {
      p.count *= size;
      if (keepdim) p.out_shape.push_back(1);
    }
  }
  return p;
}

// max/min/amax/amin/argmax have no identity: an empty reduction is an error, as in torch.
void check_nonempty(const Tensor &x, const ReducePlan &p, bool dims_given, const char *op) {
  if (!dims_given) {
    KILN_CHECK(x.numel() != 0, op, ": Expected reduction dim to be specified for input.numel() == 0",
               in_shape(x));
    return;
  }
  for (int64_t d : p.dims)
    KILN_CHECK(x.dim() == 0 || x.sizes()[d] != 0, op, ": Expected reduction dim ", d,
               " to have non-zero size", in_shape(x));
}

void check_floating(const Tensor &x, const char *op) {
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating point input, got ", x.dtype(), in_shape(x));
}

// A float16 / bfloat16 dtype argument: torch converts the input to it first, and the
// op then computes in float32 as on any 16-bit tensor.
bool convert_first(const Tensor &x, std::optional<DType> dtype) {
  return dtype && is_reduced_float(*dtype) && x.dtype() != *dtype;
}

// sum/prod: the given dtype, else int64 for integer and bool inputs, else the input's.
DType accumulate_dtype(const Tensor &x, std::optional<DType> dtype) {
  if (dtype) return *dtype;
  return is_integral(x.dtype(), /*include_bool=*/true) ? kInt64 : x.dtype();
}

// ---------------------------------------------------------------- geometry

// The reduction after dropping size-1 dims and merging neighbours: kept dims in
// logical order (the output's order), reduced dims with the innermost last.
struct Geom {
  Dims osz, ost; // kept sizes, input strides
  Dims rsz, rst; // reduced sizes, input strides; never empty
  int64_t n_out = 1, n_red = 1;
};

// Merges dim i into its outer neighbour when stepping the pair is one stride.
void coalesce(Dims &sz, Dims &st) {
  Dims s, t;
  for (size_t i = 0; i < sz.size(); ++i) {
    size_t last = s.size() - 1;
    if (!s.empty() && t[last] == st[i] * sz[i]) {
      s[last] *= sz[i];
      t[last] = st[i];
      continue;
    }
    s.push_back(sz[i]);
    t.push_back(st[i]);
  }
  sz = s;
  st = t;
}

// reorder: walk reduced dims in memory order (largest stride outermost). Only for
// ops whose result does not depend on the visiting order beyond rounding; index
// ops keep the logical order, which is what their indices count.
Geom make_geom(const Tensor &x, const bool *mask, bool reorder) {
  Geom g;
  std::pair<int64_t, int64_t> red[kMaxDims];
  size_t nred = 0;
  for (int64_t i = 0; i < x.dim(); ++i) {
    int64_t size = x.sizes()[i], stride = x.strides()[i];
    if (mask[i]) g.n_red *= size;
    else g.n_out *= size;
    if (size == 1) continue;
    if (mask[i]) red[nred++] = {size, stride};
    else {
      g.osz.push_back(size);
      g.ost.push_back(stride);
    }
  }
  coalesce(g.osz, g.ost);
  if (g.n_red == 0) {
    g.rsz = {0};
    g.rst = {0};
    return g;
  }
  if (reorder)
    std::stable_sort(red, red + nred, [](auto a, auto b) { return std::abs(a.second) > std::abs(b.second); });
  for (size_t i = 0; i < nred; ++i) {
    g.rsz.push_back(red[i].first);
    g.rst.push_back(red[i].second);
  }
  coalesce(g.rsz, g.rst);
  if (g.rsz.empty()) { // nothing to reduce: each output folds its one element
    g.rsz = {1};
    g.rst = {0};
  }
  return g;
}

// Walks the first n dims of (sz, st) in row-major order, tracking the offset.
struct Counter {
  Counter(const Dims &sz, const Dims &st, size_t n) : sz_(sz), st_(st), n_(n) {}
  void seek(int64_t linear) {
    offset = 0;
    for (size_t d = n_; d-- > 0;) {
      idx_[d] = linear % sz_[d];
      linear /= sz_[d];
      offset += idx_[d] * st_[d];
    }
  }
  void next() {
    for (size_t d = n_; d-- > 0;) {
      offset += st_[d];
      if (++idx_[d] < sz_[d]) return;
      offset -= st_[d] * sz_[d];
      idx_[d] = 0;
    }
  }
  int64_t offset = 0;

private:
  const Dims &sz_, &st_;
  size_t n_;
  int64_t idx_[kMaxDims] = {};
};

// ---------------------------------------------------------------- engine
//
// An Op has: In, Acc, init(), row(acc, p, n, stride, r, o) folding n elements
// p[i*stride] whose reduced index starts at r into the accumulator of output o,
// cols(acc, p, w, r, o0) folding p[j] into acc[j] (outputs o0 + j) for reduced
// index r, combine(a, b) folding a later partial b into a, store(o, acc).

// Accumulator storage (not std::vector: vector<bool> has no data()).
template <class Acc> std::unique_ptr<Acc[]> acc_buffer(int64_t n, Acc init) {
  std::unique_ptr<Acc[]> b(new Acc[size_t(n)]);
  std::fill(b.get(), b.get() + n, init);
  return b;
}

// Folds reduced elements [r0, r1) of one output, segment by segment.
template <class Op>
void fold_rows(const Geom &g, const typename Op::In *base, int64_t r0, int64_t r1, typename Op::Acc &acc,
               const Op &op, int64_t o) {
  if (r1 <= r0) return;
  size_t m = g.rsz.size();
  int64_t inner = g.rsz[m - 1], istride = g.rst[m - 1];
  if (m == 1) { // the common case: one row, no counter (it costs more than a short row)
    op.row(acc, base + r0 * istride, r1 - r0, istride, r0, o);
    return;
  }
  Counter c(g.rsz, g.rst, m - 1);
  c.seek(r0 / inner);
  int64_t j = r0 % inner;
  for (int64_t r = r0; r < r1; c.next()) {
    int64_t len = std::min(inner - j, r1 - r);
    op.row(acc, base + c.offset + j * istride, len, istride, r, o);
    r += len;
    j = 0;
  }
}

// A few outputs over long reductions: split the reduction as well, into chunks of
// about kGrain elements (at most 64 chunks: enough to keep many threads busy, few
// enough that the partial results stay small).
int64_t reduction_chunks(int64_t groups, int64_t n_red, int64_t width) {
  if (groups >= 64 || n_red * width < 2 * kGrain) return 1;
  return std::min({n_red, (n_red * width + kGrain - 1) / kGrain, int64_t(64)});
}

template <class Op> void run_rows(const Geom &g, const typename Op::In *in, const Op &op) {
  using Acc = typename Op::Acc;
  int64_t chunks = reduction_chunks(g.n_out, g.n_red, 1);
  if (chunks == 1) {
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(g.n_red, 1));
    parallel_for(0, g.n_out, grain, [&](int64_t b, int64_t e) {
      Counter oc(g.osz, g.ost, g.osz.size());
      oc.seek(b);
      for (int64_t o = b; o < e; ++o, oc.next()) {
        Acc acc = op.init();
        fold_rows(g, in + oc.offset, 0, g.n_red, acc, op, o);
        op.store(o, acc);
      }
    });
    return;
  }
  int64_t len = (g.n_red + chunks - 1) / chunks;
  auto part = acc_buffer<Acc>(g.n_out * chunks, op.init());
  parallel_for(0, g.n_out * chunks, 1, [&](int64_t b, int64_t e) {
    Counter oc(g.osz, g.ost, g.osz.size());
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / chunks, c = t % chunks;
      oc.seek(o);
      Acc acc = op.init();
      fold_rows(g, in + oc.offset, c * len, std::min(g.n_red, (c + 1) * len), acc, op, o);
      part[size_t(t)] = acc;
    }
  });
  for (int64_t o = 0; o < g.n_out; ++o) {
    Acc acc = part[size_t(o * chunks)];
    for (int64_t c = 1; c < chunks; ++c) op.combine(acc, part[size_t(o * chunks + c)]);
    op.store(o, acc);
  }
}

template <class Op> void run_cols(const Geom &g, const typename Op::In *in, const Op &op) {
  using Acc = typename Op::Acc;
  size_t k = g.osz.size();
  int64_t width = g.osz[k - 1], outer = g.n_out / width;
  int64_t cb = std::min(width, kColBlock), nb = (width + cb - 1) / cb, groups = outer * nb;
  int64_t chunks = reduction_chunks(groups, g.n_red, cb);
  int64_t len = chunks == 1 ? g.n_red : (g.n_red + chunks - 1) / chunks;
  // Folds reduced indices [r0, r1) of column block grp into acc; returns its first output.
  auto fold = [&](int64_t grp, int64_t r0, int64_t r1, Acc *acc, int64_t &w) {
    int64_t og = grp / nb, j0 = (grp % nb) * cb;
    w = std::min(cb, width - j0);
    Counter oc(g.osz, g.ost, k - 1);
    oc.seek(og);
    const typename Op::In *base = in + oc.offset + j0;
    for (int64_t j = 0; j < w; ++j) acc[j] = op.init();
    if (r1 <= r0) return og * width + j0;
    Counter rc(g.rsz, g.rst, g.rsz.size());
    rc.seek(r0);
    for (int64_t r = r0; r < r1; ++r, rc.next()) op.cols(acc, base + rc.offset, w, r, og * width + j0);
    return og * width + j0;
  };
  if (chunks == 1) {
    int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(g.n_red * cb, 1));
    parallel_for(0, groups, grain, [&](int64_t b, int64_t e) {
      auto acc = acc_buffer<Acc>(cb, op.init());
      for (int64_t grp = b; grp < e; ++grp) {
        int64_t w = 0, o0 = fold(grp, 0, g.n_red, acc.get(), w);
        for (int64_t j = 0; j < w; ++j) op.store(o0 + j, acc[size_t(j)]);
      }
    });
    return;
  }
  auto part = acc_buffer<Acc>(groups * chunks * cb, op.init());
  parallel_for(0, groups * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t grp = t / chunks, c = t % chunks, w = 0;
      fold(grp, c * len, std::min(g.n_red, (c + 1) * len), &part[size_t(t * cb)], w);
    }
  });
  // Chunk by chunk, in order, into chunk 0's row: contiguous rows, not strided columns.
  for (int64_t grp = 0; grp < groups; ++grp) {
    int64_t j0 = (grp % nb) * cb, o0 = (grp / nb) * width + j0, w = std::min(cb, width - j0);
    Acc *acc = &part[size_t(grp * chunks * cb)];
    for (int64_t c = 1; c < chunks; ++c) {
      const Acc *later = &part[size_t((grp * chunks + c) * cb)];
      for (int64_t j = 0; j < w; ++j) op.combine(acc[j], later[j]);
    }
    for (int64_t j = 0; j < w; ++j) op.store(o0 + j, acc[j]);
  }
}

template <class Op> void reduce_run(const Geom &g, const typename Op::In *in, const Op &op) {
  if (g.n_out == 0) return;
  size_t k = g.osz.size();
  bool cols = k > 0 && g.ost[k - 1] == 1 && g.osz[k - 1] >= kMinColWidth && g.rst[g.rsz.size() - 1] != 1;
  if (cols) run_cols(g, in, op);
  else run_rows(g, in, op);
}

// ---------------------------------------------------------------- ops

// Sum (Comb = Plus), product (Times) and mean (div = count) of elements cast to O
// first, as torch does with a dtype argument.
template <class T, class O, class Comb> struct FoldOp {
  using In = T;
  using Acc = std::conditional_t<kIsFloat<O>, double, uint64_t>; // integers wrap as torch's
  O *out;
  double div = 1;
  static constexpr bool kSum = std::is_same_v<Comb, Plus>;

  static Acc load(T v) {
    if constexpr (kIsFloat<O>) return Acc(detail::convert_value<O>(v));
    else return Acc(int64_t(detail::convert_value<O>(v))); // sign-extends negatives
  }
  Acc init() const { return kSum ? Acc(0) : Acc(1); }
  void row(Acc &acc, const T *p, int64_t n, int64_t s, int64_t, int64_t) const {
    // float32 lanes only for float32 results: dtype=float64 asks for double sums.
    if constexpr (kSum && std::is_same_v<T, float> && std::is_same_v<O, float>) {
      if (s == 1) {
        acc += sum_f32(p, n);
        return;
      }
    }
    Acc part = s == 1 ? lane_reduce<Acc>(n, init(), [p](int64_t i) { return load(p[i]); }, Comb{})
                      : lane_reduce<Acc>(n, init(), [p, s](int64_t i) { return load(p[i * s]); }, Comb{});
    acc = Comb{}(acc, part);
  }
  void cols(Acc *acc, const T *p, int64_t w, int64_t, int64_t) const {
    for (int64_t j = 0; j < w; ++j) acc[j] = Comb{}(acc[j], load(p[j]));
  }
  void combine(Acc &a, const Acc &b) const { a = Comb{}(a, b); }
  void store(int64_t o, Acc acc) const {
    if constexpr (kIsFloat<O>) out[o] = O(acc / div);
    else if constexpr (std::is_same_v<O, bool>) out[o] = acc != 0;
    else out[o] = O(int64_t(acc)); // modular, as torch's int32 arithmetic
  }
};

// amax / amin (values only).
template <class T, bool IsMax> struct ExtremeOp {
  using In = T;
  using Acc = T;
  T *out;

  T init() const {
    if constexpr (kIsFloat<T>) return IsMax ? -INFINITY : INFINITY;
    else return IsMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
  void row(T &acc, const T *p, int64_t n, int64_t s, int64_t, int64_t) const {
    T part = s == 1 ? extreme_contig<IsMax>(p, n, init())
                    : lane_reduce<T>(n, init(), [p, s](int64_t i) { return p[i * s]; }, Pick<IsMax>{});
    acc = Pick<IsMax>{}(acc, part);
  }
  void cols(T *acc, const T *p, int64_t w, int64_t, int64_t) const {
    for (int64_t j = 0; j < w; ++j) acc[j] = Pick<IsMax>{}(acc[j], p[j]);
  }
  void combine(T &a, const T &b) const { a = Pick<IsMax>{}(a, b); }
  void store(int64_t o, T acc) const { out[o] = acc; }
};

// max/min over a dim (values and indices) and argmax/argmin (values == nullptr).
template <class T, bool IsMax> struct ArgOp {
  using In = T;
  struct Acc {
    T v;
    int64_t i; // -1: nothing seen yet
  };
  T *values;
  int64_t *indices;

  static void take(Acc &a, T v, int64_t i) {
    if (a.i < 0 || better<IsMax>(v, a.v)) a = {v, i};
  }
  Acc init() const { return {T(), -1}; }
  void row(Acc &acc, const T *p, int64_t n, int64_t s, int64_t r, int64_t) const {
    if (n == 0) return;
    if (s != 1) {
      for (int64_t i = 0; i < n; ++i) take(acc, p[i * s], r + i);
      return;
    }
    // Contiguous: the extreme value with vector lanes, then its first position.
    T m = extreme_contig<IsMax>(p, n, p[0]);
    take(acc, m, r + find_first(p, n, m));
  }
  void cols(Acc *acc, const T *p, int64_t w, int64_t r, int64_t) const {
    for (int64_t j = 0; j < w; ++j) {
      bool t = (acc[j].i < 0) | better<IsMax>(p[j], acc[j].v);
      acc[j].v = t ? p[j] : acc[j].v;
      acc[j].i = t ? r : acc[j].i;
    }
  }
  void combine(Acc &a, const Acc &b) const { // b comes later: ties keep a
    if (b.i >= 0) take(a, b.v, b.i);
  }
  void store(int64_t o, const Acc &acc) const {
    if (values) values[o] = acc.v;
    indices[o] = acc.i;
  }
};

// Second pass of var/std: squared deviations from each output's mean.
template <class T> struct SqDevOp {
  using In = T;
  using Acc = double;
  const double *mean;
  T *out;
  double divisor; // count - correction, or 0 (torch gives inf or nan then)
  bool take_sqrt;

  double init() const { return 0; }
  void row(double &acc, const T *p, int64_t n, int64_t s, int64_t, int64_t o) const {
    double m = mean[o];
    auto dev = [m](T v) {
      double d = double(v) - m;
      return d * d;
    };
    acc += s == 1 ? lane_reduce<double>(n, 0.0, [p, dev](int64_t i) { return dev(p[i]); }, Plus{})
                  : lane_reduce<double>(n, 0.0, [p, s, dev](int64_t i) { return dev(p[i * s]); }, Plus{});
  }
  void cols(double *acc, const T *p, int64_t w, int64_t, int64_t o0) const {
    for (int64_t j = 0; j < w; ++j) {
      double d = double(p[j]) - mean[o0 + j];
      acc[j] += d * d;
    }
  }
  void combine(double &a, const double &b) const { a += b; }
  void store(int64_t o, double acc) const {
    double v = acc / divisor;
    out[o] = T(take_sqrt ? std::sqrt(v) : v);
  }
};

enum class NormKind { L2, L1, Inf, NegInf, L0, P };

template <class T, NormKind K> struct NormOp {
  using In = T;
  using Acc = double;
  T *out;
  double p;

  struct Comb {
    double operator()(double a, double b) const {
      if constexpr (K == NormKind::Inf) return Pick<true>{}(a, b);
      else if constexpr (K == NormKind::NegInf) return Pick<false>{}(a, b);
      else return a + b;
    }
  };
  double load(T v) const {
    double a = std::abs(double(v));
    if constexpr (K == NormKind::L2) return a * a;
    else if constexpr (K == NormKind::L0) return v != T(0) ? 1.0 : 0.0;
    else if constexpr (K == NormKind::P) return std::pow(a, p);
    else return a;
  }
  double init() const { return K == NormKind::NegInf ? INFINITY : 0.0; }
  void row(double &acc, const T *p_, int64_t n, int64_t s, int64_t, int64_t) const {
    double part = s == 1 ? lane_reduce<double>(n, init(), [&](int64_t i) { return load(p_[i]); }, Comb{})
                         : lane_reduce<double>(n, init(), [&](int64_t i) { return load(p_[i * s]); }, Comb{});
    acc = Comb{}(acc, part);
  }
  void cols(double *acc, const T *p_, int64_t w, int64_t, int64_t) const {
    for (int64_t j = 0; j < w; ++j) acc[j] = Comb{}(acc[j], load(p_[j]));
  }
  void combine(double &a, const double &b) const { a = Comb{}(a, b); }
  void store(int64_t o, double acc) const {
    if constexpr (K == NormKind::L2) acc = std::sqrt(acc);
    else if constexpr (K == NormKind::P) acc = std::pow(acc, 1.0 / p);
    out[o] = T(acc);
  }
};

// ---------------------------------------------------------------- shared drivers

template <class T> const T *in_data(const Tensor &x) { return static_cast<const T *>(x.raw_data()); }
template <class T> T *out_data(const Tensor &t) { return static_cast<T *>(t.raw_data()); }

// sum / mean / prod of x into out (whose dtype is the accumulation dtype).
template <class Comb> void run_fold(const Tensor &x, const ReducePlan &p, const Tensor &out, double div) {
  Geom g = make_geom(x, p.mask, /*reorder=*/true);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    dispatch_dtype(out.dtype(), [&]<class O>() {
      reduce_run(g, in_data<T>(x), FoldOp<T, O, Comb>{out_data<O>(out), div});
    });
  });
}

template <class Comb>
Tensor fold_reduce(const Tensor &x, const ReducePlan &p, DType dt, double div) {
  Tensor out = detail::make_result(p.out_shape, dt, {&x});
  if (out.is_meta()) return out;
  run_fold<Comb>(x, p, out, div);
  return out;
}

Tensor prod_impl(const Tensor &x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  detail::check_defined(x, "prod", "self");
  if (convert_first(x, dtype)) return prod_impl(to(x, *dtype), dims, keepdim, std::nullopt);
  ReducePlan p = plan_dims(x, dims, keepdim, "prod");
  DType dt = accumulate_dtype(x, dtype);
  KILN_TRACE(Prod, {x}, .dims = IntArrayRef(p.dims), .keepdim = keepdim, .dtype = dtype);
  return fold_reduce<Times>(x, p, dt, 1.0);
}

template <bool IsMax>
Tensor extreme_impl(const Tensor &x, IntArrayRef dims, bool keepdim, const char *op) {
  detail::check_defined(x, op, "self");
  ReducePlan p = plan_dims(x, dims, keepdim, op);
  check_nonempty(x, p, !dims.empty(), op);
  if constexpr (IsMax) {
    KILN_TRACE(Amax, {x}, .dims = IntArrayRef(p.dims), .keepdim = keepdim);
  } else {
    KILN_TRACE(Amin, {x}, .dims = IntArrayRef(p.dims), .keepdim = keepdim);
  }
  Tensor out = detail::make_result(p.out_shape, x.dtype(), {&x});
  if (out.is_meta()) return out;
  Geom g = make_geom(x, p.mask, /*reorder=*/true);
  dispatch_dtype(x.dtype(), [&]<class T>() { reduce_run(g, in_data<T>(x), ExtremeOp<T, IsMax>{out_data<T>(out)}); });
  return out;
}

// Values (when wanted) and int64 indices of the first max/min along p's dims,
// counted in x's logical row-major order over those dims.
template <bool IsMax> void run_arg(const Tensor &x, const ReducePlan &p, const Tensor &values, const Tensor &indices) {
  Geom g = make_geom(x, p.mask, /*reorder=*/false);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    T *v = values.defined() ? out_data<T>(values) : nullptr;
    reduce_run(g, in_data<T>(x), ArgOp<T, IsMax>{v, out_data<int64_t>(indices)});
  });
}

template <bool IsMax> std::tuple<Tensor, Tensor> extreme_dim(const Tensor &x, int64_t dim, bool keepdim) {
  const char *op = IsMax ? "max" : "min";
  detail::check_defined(x, op, "self");
  ReducePlan p = plan_dims(x, dim, keepdim, op);
  check_nonempty(x, p, true, op);
  if constexpr (IsMax) {
    KILN_TRACE(MaxDim, {x}, .dim = p.dims[0], .keepdim = keepdim);
  } else {
    KILN_TRACE(MinDim, {x}, .dim = p.dims[0], .keepdim = keepdim);
  }
  Tensor values = detail::make_result(p.out_shape, x.dtype(), {&x});
  Tensor indices = detail::make_result(p.out_shape, kInt64, {&x});
  if (values.is_meta()) return {values, indices};
  run_arg<IsMax>(x, p, values, indices);
  return {values, indices};
}

template <bool IsMax> Tensor arg_impl(const Tensor &x, std::optional<int64_t> dim, bool keepdim) {
  const char *op = IsMax ? "argmax" : "argmin";
  detail::check_defined(x, op, "self");
  KILN_CHECK(x.dtype() != kBool, op, ": not implemented for bool input", in_shape(x));
  ReducePlan p = dim ? plan_dims(x, *dim, keepdim, op) : plan_dims(x, IntArrayRef{}, keepdim, op);
  check_nonempty(x, p, dim.has_value(), op);
  std::optional<int64_t> wrapped;
  if (dim) wrapped = p.dims[0];
  if constexpr (IsMax) {
    KILN_TRACE(Argmax, {x}, .dim = wrapped, .keepdim = keepdim);
  } else {
    KILN_TRACE(Argmin, {x}, .dim = wrapped, .keepdim = keepdim);
  }
  Tensor indices = detail::make_result(p.out_shape, kInt64, {&x});
  if (indices.is_meta()) return indices;
  run_arg<IsMax>(x, p, Tensor(), indices);
  return indices;
}

Tensor var_impl(const Tensor &x, IntArrayRef dims, std::optional<double> correction, bool keepdim, bool take_sqrt) {
  const char *op = take_sqrt ? "std" : "var";
  detail::check_defined(x, op, "self");
  KILN_CHECK(x.is_floating_point(), op, ": std and var only support floating point dtypes, got ", x.dtype(),
             in_shape(x));
  ReducePlan p = plan_dims(x, dims, keepdim, op);
  if (take_sqrt) {
    KILN_TRACE(Std, {x}, .dims = IntArrayRef(p.dims), .correction = correction, .keepdim = keepdim);
  } else {
    KILN_TRACE(Var, {x}, .dims = IntArrayRef(p.dims), .correction = correction, .keepdim = keepdim);
  }
  Tensor out = detail::make_result(p.out_shape, x.dtype(), {&x});
  if (out.is_meta()) return out;
  // Two passes (mean, then squared deviations): stable where E[x^2] - E[x]^2 is not.
  Geom g = make_geom(x, p.mask, /*reorder=*/true);
  std::vector<double> mean(size_t(std::max<int64_t>(g.n_out, 0)));
  double count = double(p.count), c = correction.value_or(1.0);
  double divisor = count > c ? count - c : 0.0;
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (kIsFloat<T>) {
      reduce_run(g, in_data<T>(x), FoldOp<T, double, Plus>{mean.data(), count});
      reduce_run(g, in_data<T>(x), SqDevOp<T>{mean.data(), out_data<T>(out), divisor, take_sqrt});
    }
  });
  return out;
}

NormKind norm_kind(double p) {
  if (p == 2) return NormKind::L2;
  if (p == 1) return NormKind::L1;
  if (p == INFINITY) return NormKind::Inf;
  if (p == -INFINITY) return NormKind::NegInf;
  if (p == 0) return NormKind::L0;
  return NormKind::P;
}

template <class T> void run_norm(const Geom &g, const T *in, T *out, double p) {
  switch (norm_kind(p)) {
  case NormKind::L2: return reduce_run(g, in, NormOp<T, NormKind::L2>{out, p});
  case NormKind::L1: return reduce_run(g, in, NormOp<T, NormKind::L1>{out, p});
  case NormKind::Inf: return reduce_run(g, in, NormOp<T, NormKind::Inf>{out, p});
  case NormKind::NegInf: return reduce_run(g, in, NormOp<T, NormKind::NegInf>{out, p});
  case NormKind::L0: return reduce_run(g, in, NormOp<T, NormKind::L0>{out, p});
  case NormKind::P: return reduce_run(g, in, NormOp<T, NormKind::P>{out, p});
  }
}

const Tensor &only_input(const std::vector<Tensor> &in, const char *op) {
  KILN_CHECK(in.size() == 1, op, ": expected 1 input, got ", in.size());
  return in[0];
}

} // namespace

// ---------------------------------------------------------------- public ops

Tensor sum(const Tensor &x, IntArrayRef dim, bool keepdim, std::optional<DType> dtype) {
  detail::check_defined(x, "sum", "self");
  if (convert_first(x, dtype)) return sum(to(x, *dtype), dim, keepdim, std::nullopt);
  ReducePlan p = plan_dims(x, dim, keepdim, "sum");
  DType dt = accumulate_dtype(x, dtype);
  KILN_TRACE(Sum, {x}, .dims = IntArrayRef(p.dims), .keepdim = keepdim, .dtype = dtype);
  return fold_reduce<Plus>(x, p, dt, 1.0);
}

Tensor sum(const Tensor &x, std::optional<DType> dtype) { return sum(x, IntArrayRef{}, false, dtype); }

Tensor mean(const Tensor &x, IntArrayRef dim, bool keepdim, std::optional<DType> dtype) {
  detail::check_defined(x, "mean", "self");
  if (dtype)
    KILN_CHECK(is_floating(*dtype), "mean: could not infer output dtype. Optional dtype must be either a ",
               "floating point or complex dtype. Got: ", *dtype, in_shape(x));
  else
    KILN_CHECK(x.is_floating_point(), "mean: could not infer output dtype. Input dtype must be either a ",
               "floating point or complex dtype. Got: ", x.dtype(), in_shape(x));
  if (convert_first(x, dtype)) return mean(to(x, *dtype), dim, keepdim, std::nullopt);
  ReducePlan p = plan_dims(x, dim, keepdim, "mean");
  KILN_TRACE(Mean, {x}, .dims = IntArrayRef(p.dims), .keepdim = keepdim, .dtype = dtype);
  return fold_reduce<Plus>(x, p, dtype.value_or(x.dtype()), double(p.count)); // 0 / 0 = nan when empty
}

Tensor mean(const Tensor &x, std::optional<DType> dtype) { return mean(x, IntArrayRef{}, false, dtype); }

Tensor prod(const Tensor &x, std::optional<DType> dtype) { return prod_impl(x, IntArrayRef{}, false, dtype); }

Tensor prod(const Tensor &x, int64_t dim, bool keepdim, std::optional<DType> dtype) {
  return prod_impl(x, dim, keepdim, dtype);
}

Tensor amax(const Tensor &x, IntArrayRef dim, bool keepdim) { return extreme_impl<true>(x, dim, keepdim, "amax"); }
Tensor amin(const Tensor &x, IntArrayRef dim, bool keepdim) { return extreme_impl<false>(x, dim, keepdim, "amin"); }
// Full max/min record Amax/Amin over all dims (the same op in a graph).
Tensor max(const Tensor &x) { return extreme_impl<true>(x, IntArrayRef{}, false, "max"); }
Tensor min(const Tensor &x) { return extreme_impl<false>(x, IntArrayRef{}, false, "min"); }

std::tuple<Tensor, Tensor> max(const Tensor &x, int64_t dim, bool keepdim) { return extreme_dim<true>(x, dim, keepdim); }
std::tuple<Tensor, Tensor> min(const Tensor &x, int64_t dim, bool keepdim) {
  return extreme_dim<false>(x, dim, keepdim);
}

Tensor argmax(const Tensor &x, std::optional<int64_t> dim, bool keepdim) { return arg_impl<true>(x, dim, keepdim); }
Tensor argmin(const Tensor &x, std::optional<int64_t> dim, bool keepdim) { return arg_impl<false>(x, dim, keepdim); }

Tensor var(const Tensor &x, IntArrayRef dim, std::optional<double> correction, bool keepdim) {
  return var_impl(x, dim, correction, keepdim, false);
}

Tensor std(const Tensor &x, IntArrayRef dim, std::optional<double> correction, bool keepdim) {
  return var_impl(x, dim, correction, keepdim, true);
}

Tensor norm(const Tensor &x, const Scalar &p, IntArrayRef dim, bool keepdim) {
  detail::check_defined(x, "norm", "self");
  check_floating(x, "norm");
  ReducePlan rp = plan_dims(x, dim, keepdim, "norm");
  double pv = p.toDouble();
  // inf and negative orders have no identity: torch refuses them on empty reductions.
  KILN_CHECK(rp.count != 0 || (pv >= 0 && pv != INFINITY), "norm: cannot compute the ", p,
             " norm on an empty tensor because the operation does not have an identity", in_shape(x));
  KILN_TRACE(Norm, {x}, .p = p, .dims = IntArrayRef(rp.dims), .keepdim = keepdim);
  Tensor out = detail::make_result(rp.out_shape, x.dtype(), {&x});
  if (out.is_meta()) return out;
  Geom g = make_geom(x, rp.mask, /*reorder=*/true);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (kIsFloat<T>) run_norm<T>(g, in_data<T>(x), out_data<T>(out), pv);
  });
  return out;
}

// ---------------------------------------------------------------- uniform adapters

namespace adapters {

std::vector<Tensor> Sum(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Sum at{a};
  return {sum(only_input(in, "sum"), at.dims(), at.keepdim(), at.dtype())};
}

std::vector<Tensor> Mean(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Mean at{a};
  return {mean(only_input(in, "mean"), at.dims(), at.keepdim(), at.dtype())};
}

// prod(x) records dims [] and prod(x, d) records [d]; nothing else is traced.
std::vector<Tensor> Prod(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Prod at{a};
  const Tensor &x = only_input(in, "prod");
  const std::vector<int64_t> &dims = at.dims();
  bool keepdim = at.keepdim();
  if (dims.empty() && !keepdim) return {prod(x, at.dtype())};
  KILN_CHECK(dims.size() == 1, "prod: expects one dim, or none with keepdim=false; got dims ", shape_str(dims),
             " keepdim=", keepdim);
  return {prod(x, dims[0], keepdim, at.dtype())};
}

std::vector<Tensor> Amax(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Amax at{a};
  return {amax(only_input(in, "amax"), at.dims(), at.keepdim())};
}

std::vector<Tensor> Amin(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Amin at{a};
  return {amin(only_input(in, "amin"), at.dims(), at.keepdim())};
}

std::vector<Tensor> MaxDim(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::MaxDim at{a};
  auto [values, indices] = max(only_input(in, "max"), at.dim(), at.keepdim());
  return {values, indices};
}

std::vector<Tensor> MinDim(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::MinDim at{a};
  auto [values, indices] = min(only_input(in, "min"), at.dim(), at.keepdim());
  return {values, indices};
}

std::vector<Tensor> Argmax(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Argmax at{a};
  return {argmax(only_input(in, "argmax"), at.dim(), at.keepdim())};
}

std::vector<Tensor> Argmin(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Argmin at{a};
  return {argmin(only_input(in, "argmin"), at.dim(), at.keepdim())};
}

std::vector<Tensor> Var(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Var at{a};
  return {var(only_input(in, "var"), at.dims(), at.correction(), at.keepdim())};
}

std::vector<Tensor> Std(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Std at{a};
  return {std(only_input(in, "std"), at.dims(), at.correction(), at.keepdim())};
}

std::vector<Tensor> Norm(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Norm at{a};
  return {norm(only_input(in, "norm"), at.p(), at.dims(), at.keepdim())};
}

} // namespace adapters
} // namespace kiln
