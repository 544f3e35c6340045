// kiln's implicit-GEMM conv2d: see codegen/gemm/conv.h.
#include "codegen/gemm/conv.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "codegen/gemm/ukernel.h"
#include "codegen/gemm/winograd.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"

namespace kiln::codegen::gemm {

std::string ConvShape::str() const {
  char b[256];
  std::snprintf(b, sizeof b,
                "x[%lld, %lld, %lld, %lld] w[%lld, %lld, %lld, %lld] stride (%lld, %lld) pad (%lld, %lld) dilation "
                "(%lld, %lld) groups %lld",
                (long long)N, (long long)C, (long long)H, (long long)W, (long long)O, (long long)Cg(), (long long)kH,
                (long long)kW, (long long)sh, (long long)sw, (long long)ph, (long long)pw, (long long)dh,
                (long long)dw, (long long)groups);
  return b;
}

std::optional<std::string> conv_unsupported(const ConvShape &s) {
  if (s.groups < 1 || s.C % s.groups || s.O % s.groups) return "groups do not divide the channels";
  // As eager's rule (runtime/kernels/conv.cpp, is_depthwise): a GEMM per group
  // with K = kH * kW; the direct kernel there is faster (docs/performance.md).
  if (s.groups == s.C) return "depthwise (one input channel per group): the direct kernel of runtime/kernels/conv.cpp";
  if (s.N <= 0 || s.O <= 0 || s.Ho <= 0 || s.Wo <= 0 || s.K() <= 0) return "an empty conv";
  return std::nullopt;
}

namespace {

std::atomic<int64_t> g_conv_calls{0};
std::atomic<int64_t> g_heap_packs{0};
std::atomic<int64_t> g_register_calls{0};
std::atomic<int64_t> g_winograd_items{0};
std::atomic<int64_t> g_winograd_direct_items{0};

// The register epilogue's kernels must be the variants of the packed weight's
// tile for every row count of a group (its full tiles and its tail).
void check_epilogue(const ConvShape &s, const Config &c, const ConvEpilogue &e, bool f64) {
  KILN_CHECK(e.kernels && e.pointers && e.buffers <= kMaxConvEpilogueBuffers, "gemm conv2d: incomplete epilogue (",
             e.buffers, " buffers, at most ", kMaxConvEpilogueBuffers, ")");
  KILN_CHECK(e.kernels->f64 == f64 && e.kernels->config.mr == c.mr && e.kernels->config.nr() == c.nr() &&
                 e.kernels->covers(s.Og()),
             "gemm conv2d: the epilogue kernels (", e.kernels->config.to_string(), ") do not cover ", s.Og(),
             " rows of the conv's tile (", c.to_string(), ")");
}

// Measurement knobs (bench only): KILN_CONV_TILE=panels[,kc[,order]] with
// order 0 = channel panels outer (A panel in L1, B block streamed from L2),
// 1 = pixel panels outer (B micro-panel in L1, A block from L2).
struct Knobs {
  int64_t panels = 0, kc = 0;
  int order = 0;
};

const Knobs &knobs() {
  static const Knobs k = [] {
    Knobs k;
    const char *s = std::getenv("KILN_CONV_TILE");
    if (!s || !*s) return k;
    long v[3] = {0, 0, 0};
    if (std::sscanf(s, "%ld,%ld,%ld", &v[0], &v[1], &v[2]) < 1 || v[0] < 0 || v[1] < 0) {
      kiln::log()->warn("KILN_CONV_TILE='{}' is not PANELS[,KC[,ORDER]]: ignored", s);
      return k;
    }
    k.panels = v[0], k.kc = v[1], k.order = int(v[2]);
    return k;
  }();
  return k;
}

// The input rows one item reads, zero padded: rows [r0, r0 + R) of the padded
// image (padded row r is input row r - ph) of every channel, each Wp = W + 2 pw
// wide, contiguous ([C][R][Wp]). Built per item into the thread's scratch (it
// stays in L2 for the packing that follows), so the packing never tests for
// padding and reads any input strides (channels-last too) only here.
struct Window {
  int64_t r0 = 0, R = 0, Wp = 0;
};

Window window_of(const ConvShape &s, int64_t p0, int64_t p1) {
  Window w;
  w.r0 = p0 / s.Wo * s.sh;
  w.R = (p1 - 1) / s.Wo * s.sh + (s.kH - 1) * s.dh + 1 - w.r0;
  w.Wp = s.W + 2 * s.pw;
  return w;
}

template <class T>
void fill_window(const ConvShape &s, const T *x, const int64_t xs[4], int64_t n, const Window &w, T *xp) {
  const T *img = x + n * xs[0];
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t r = 0; r < w.R; ++r) {
      T *d = xp + (c * w.R + r) * w.Wp;
      const int64_t ih = w.r0 + r - s.ph;
      if (ih < 0 || ih >= s.H) {
        std::fill(d, d + w.Wp, T(0));
        continue;
      }
      std::fill(d, d + s.pw, T(0));
      const T *src = img + c * xs[1] + ih * xs[2];
      if (xs[3] == 1) std::copy_n(src, s.W, d + s.pw);
      else
        for (int64_t iw = 0; iw < s.W; ++iw) d[s.pw + iw] = src[iw * xs[3]];
      std::fill(d + s.pw + s.W, d + w.Wp, T(0));
    }
}

// d[0, len) = src[0, len) in whole 64-byte vectors: reads and writes up to one
// vector past len (the window and the B block have slack; a later copy or
// the zero tail overwrites what lands past a segment). No call per segment.
template <class T> inline void copy_vectors(const T *src, int64_t len, T *d) {
  constexpr int64_t L = 64 / int64_t(sizeof(T));
  for (int64_t j = 0; j < len; j += L) std::memcpy(d + j, src + j, 64);
}

// A run of output pixels within one output row: panel columns [dst, dst + len)
// are pixels (oh, ow .. ow + len).
struct Segment {
  int64_t dst, oh, ow, len;
};

// Grown once per thread, then reused: a steady-state call allocates nothing.
std::vector<Segment> &segments_scratch() {
  thread_local std::vector<Segment> v;
  return v;
}

// One item's B block: k rows [pc, pc + kc) of group g's im2col, output pixels
// [p0, p1) in panels of nr pixels, each panel kc x nr, k-major (the layout
// gemm.cpp's pack_b_block writes), zero past p1; read from the item's window.
// Panel by panel: its row segments are found once, then each k row is one
// vector copy per segment (stride 1) or a gather.
template <class T>
void pack_b_conv(const ConvShape &s, const Window &w, const T *xp, int64_t g, int64_t pc, int64_t kc, int64_t p0,
                 int64_t p1, int64_t nr, T *dst) {
  const int64_t taps = s.kH * s.kW;
  std::vector<Segment> &seg = segments_scratch();
  for (int64_t p = p0; p < p1; p += nr) {
    const int64_t cnt = std::min(nr, p1 - p);
    T *panel = dst + (p - p0) / nr * kc * nr;
    seg.clear();
    for (int64_t i = 0, oh = p / s.Wo, ow = p % s.Wo; i < cnt; ow = 0, ++oh) {
      const int64_t len = std::min(s.Wo - ow, cnt - i);
      // offset of the segment's first tap-(0, 0) element in a channel's window
      seg.push_back({i, (oh * s.sh - w.r0) * w.Wp + ow * s.sw, 0, len});
      i += len;
    }
    int64_t c = g * s.Cg() + pc / taps, kh = pc % taps / s.kW, kw = pc % s.kW;
    for (int64_t kk = 0; kk < kc; ++kk) {
      T *d = panel + kk * nr;
      const T *base = xp + c * w.R * w.Wp + kh * s.dh * w.Wp + kw * s.dw;
      for (const Segment &sg : seg) {
        if (s.sw == 1) copy_vectors(base + sg.oh, sg.len, d + sg.dst);
        else
          for (int64_t j = 0; j < sg.len; ++j) d[sg.dst + j] = base[sg.oh + j * s.sw];
      }
      if (cnt < nr) std::fill(d + cnt, d + nr, T(0));
      if (++kw == s.kW) kw = 0, kh = kh + 1 == s.kH ? (++c, 0) : kh + 1; // the next k = (c, kh, kw)
    }
  }
}

// The pixel panels per item: a B block (kc x panels x nr) of about 160 KiB,
// within L2 beside the A block, and the item's C block (O x its pixels) in
// L2 for the epilogue; fewer when the items would not keep every thread busy.
int64_t item_panels(const ConvShape &s, const Config &c, int64_t elem, int threads) {
  if (knobs().panels > 0) return knobs().panels;
  const int64_t panels = (s.pixels() + c.nr() - 1) / c.nr();
  int64_t pp = std::max<int64_t>(1, (160 << 10) / (std::min(c.kc, s.K()) * c.nr() * elem));
  pp = std::min(pp, std::max<int64_t>(1, (384 << 10) / (s.O * c.nr() * elem)));
  pp = std::min(pp, panels);
  while (pp > 1 && s.N * ((panels + pp - 1) / pp) < 4 * threads) pp = (pp + 1) / 2;
  return pp;
}

template <class T> struct Item {
  const ConvShape &s;
  const T *x;
  const int64_t *xs;
  const PackedConvWeight<T> &w;
  const T *bias;
  T *y;
  ConvBlockCallback after;
  void *ctx;
  const ConvEpilogue *epi;

  // Image n, output pixels [p0, p1) in panels of nr from p0; Bp the B
  // block scratch, xp the window's.
  void run(int64_t n, int64_t p0, int64_t p1, T *Bp, T *xp) const {
    const Config &c = w.config;
    const int64_t nr = c.nr(), P = s.pixels(), K = s.K(), Og = s.Og(), mr = c.mr;
    const int64_t np = p1 - p0, panels = (np + nr - 1) / nr;
    T *yn = y + n * s.O * P;
    if (bias)
      for (int64_t o = 0; o < s.O; ++o) std::fill(yn + o * P + p0, yn + o * P + p0 + np, bias[o]);
    const Window win = window_of(s, p0, p0 + np);
    fill_window(s, x, xs, n, win, xp);
    // The register epilogue's buffers at (channel 0, pixel p0) of image n.
    const void *eptrs[kMaxConvEpilogueBuffers];
    int64_t elds[kMaxConvEpilogueBuffers];
    if (epi) epi->pointers(epi->ctx, n, p0, eptrs, elds);
    for (int64_t g = 0; g < s.groups; ++g)
      for (int64_t pc = 0; pc < K; pc += c.kc) {
        const int64_t kc = std::min(c.kc, K - pc);
        pack_b_conv(s, win, xp, g, pc, kc, p0, p1, nr, Bp);
        const T beta = pc == 0 && !bias ? T(0) : T(1);
        // Group g's channels are final after its last k block: the epilogue runs there.
        const bool last = epi && pc + kc >= K;
        auto tile = [&](int64_t i0, int64_t q) {
          const int rows = int(std::min<int64_t>(mr, Og - i0));
          const int64_t j0 = p0 + q * nr, cols = std::min(nr, p1 - j0), row = g * Og + i0;
          const T *a = w.panel(g, pc, i0), *b = Bp + q * kc * nr;
          T *cp = yn + row * P + j0;
          if (last) {
            auto e = reinterpret_cast<EpilogueMicroKernel<T>>(const_cast<void *>(epi->kernels->by_rows[size_t(rows)]));
            return e(a, b, cp, kc, P, cols, T(1), beta, eptrs, elds, row, j0 - p0);
          }
          typename PackedConvWeight<T>::Kernel k = rows == mr ? w.full : w.tail;
          k(a, b, cp, kc, P, cols, T(1), beta);
        };
        if (knobs().order == 1) {
          for (int64_t q = 0; q < panels; ++q)
            for (int64_t i0 = 0; i0 < Og; i0 += mr) tile(i0, q);
        } else {
          for (int64_t i0 = 0; i0 < Og; i0 += mr)
            for (int64_t q = 0; q < panels; ++q) tile(i0, q);
        }
      }
    if (after) after(ctx, n, p0, np);
  }

  // Image n, tile rows [t0, t1) of a Winograd-shaped conv (output rows
  // [2 t0, 2 t1)): through Winograd where its values allow, else direct.
  // The register epilogue then runs on the block's output in L2, as a
  // micro-kernel call per tile whose product is zero (0 x 0 over one k step)
  // and beta 1: the same compiled code and operands as the direct path's.
  void run_winograd(int64_t n, int64_t t0, int64_t t1, T *Bp, T *xp, T *ws) const {
    const int64_t p0 = 2 * t0 * s.Wo, p1 = std::min(s.Ho, 2 * t1) * s.Wo;
    if (!w.winograd_weight_ok || !run_winograd_item<T>(s, w, x, xs, bias, y, n, t0, t1, ws)) {
      g_winograd_direct_items.fetch_add(1, std::memory_order_relaxed);
      return run(n, p0, p1, Bp, xp);
    }
    g_winograd_items.fetch_add(1, std::memory_order_relaxed);
    if (epi) register_epilogue_pass(n, p0, p1);
    if (after) after(ctx, n, p0, p1 - p0);
  }

  void register_epilogue_pass(int64_t n, int64_t p0, int64_t p1) const {
    alignas(64) static const T zeros[256] = {};
    const void *eptrs[kMaxConvEpilogueBuffers];
    int64_t elds[kMaxConvEpilogueBuffers];
    epi->pointers(epi->ctx, n, p0, eptrs, elds);
    const int64_t nr = w.config.nr(), mr = w.config.mr, P = s.pixels();
    T *yn = y + n * s.O * P;
    for (int64_t i0 = 0; i0 < s.O; i0 += mr) {
      const int rows = int(std::min<int64_t>(mr, s.O - i0));
      auto e = reinterpret_cast<EpilogueMicroKernel<T>>(const_cast<void *>(epi->kernels->by_rows[size_t(rows)]));
      for (int64_t j0 = p0; j0 < p1; j0 += nr)
        e(zeros, zeros, yn + i0 * P + j0, 1, P, std::min(nr, p1 - j0), T(1), T(1), eptrs, elds, i0, j0 - p0);
    }
  }
};

} // namespace

template <class T> Config conv_config(const ConvShape &s) {
  Config c = default_config<T>();
  // kc balanced over K (576 = 3 x 192 rather than 256 + 256 + 64): every k
  // block then does the same work per packed B element.
  const int64_t kc_max = knobs().kc > 0 ? knobs().kc : c.kc;
  const int64_t blocks = (s.K() + kc_max - 1) / kc_max;
  c.kc = std::max<int64_t>(1, (s.K() + blocks - 1) / blocks);
  return c;
}

template <class T> int64_t PackedConvWeight<T>::bytes() const {
  return (direct_elems() + (winograd ? winograd_weight_elems(shape) : 0)) * int64_t(sizeof(T));
}

template <class T> PackedConvWeight<T> conv_kernels(const ConvShape &s) {
  if (std::optional<std::string> why = conv_unsupported(s))
    throw Error("gemm conv2d: " + s.str() + " is not covered: " + *why);
  PackedConvWeight<T> w;
  w.shape = s;
  w.config = conv_config<T>(s);
  const int mr = w.config.mr;
  w.full = s.Og() >= mr ? micro_kernel<T>(w.config, mr) : nullptr;
  w.tail = s.Og() % mr ? micro_kernel<T>(w.config, int(s.Og() % mr)) : nullptr;
  w.winograd = winograd_shape(s, w.config.nr());
  return w;
}

template <class T>
PackedConvWeight<T> pack_conv_weight_into(const PackedConvWeight<T> &kernels, const T *W, const int64_t ws[4], T *dst) {
  PackedConvWeight<T> pw = kernels;
  pw.data = dst;
  const ConvShape &s = pw.shape;
  const Config &c = pw.config;
  const int64_t Og = s.Og(), K = s.K(), taps = s.kH * s.kW, mr = c.mr;
  for (int64_t g = 0; g < s.groups; ++g)
    for (int64_t pc = 0; pc < K; pc += c.kc) {
      const int64_t kc = std::min(c.kc, K - pc);
      for (int64_t i0 = 0; i0 < Og; i0 += mr) {
        const int64_t rows = std::min(mr, Og - i0);
        T *d = dst + (pw.panel(g, pc, i0) - pw.data);
        for (int64_t p = 0; p < kc; ++p) {
          const int64_t k = pc + p, ci = k / taps, kh = k % taps / s.kW, kw = k % s.kW;
          for (int64_t i = 0; i < rows; ++i)
            d[p * rows + i] = W[(g * Og + i0 + i) * ws[0] + ci * ws[1] + kh * ws[2] + kw * ws[3]];
        }
      }
    }
  if (pw.winograd) pw.winograd_weight_ok = winograd_pack_weight<T>(s, c.mr, W, ws, dst + pw.direct_elems());
  return pw;
}

template <class T>
std::shared_ptr<const PackedConvWeight<T>> pack_conv_weight(const ConvShape &s, const T *W, const int64_t ws[4]) {
  const PackedConvWeight<T> kernels = conv_kernels<T>(s);
  const size_t bytes = (size_t(std::max<int64_t>(1, kernels.bytes())) + 63) & ~size_t(63);
  std::shared_ptr<T> owned(static_cast<T *>(alloc_packing(bytes)), std::free);
  KILN_CHECK(owned, "gemm conv2d: cannot allocate ", bytes, " bytes for the packed weight of ", s.str());
  auto pw = std::make_shared<PackedConvWeight<T>>(pack_conv_weight_into<T>(kernels, W, ws, owned.get()));
  pw->owned = std::move(owned);
  g_heap_packs.fetch_add(1, std::memory_order_relaxed);
  return pw;
}

template <class T> int64_t conv_block_pixels(const ConvShape &s, int threads) {
  const Config c = conv_config<T>(s);
  threads = threads > 0 ? threads : get_num_threads();
  if (winograd_shape(s, c.nr())) return std::min(s.Ho, 2 * winograd_item_tile_rows(s, c.nr(), threads)) * s.Wo;
  return item_panels(s, c, int64_t(sizeof(T)), threads) * c.nr();
}

template <class T>
void conv2d(const ConvShape &s, const T *x, const int64_t xs[4], const PackedConvWeight<T> &w, const T *bias, T *y,
            ConvBlockCallback after, void *ctx, int64_t block_pixels, int threads, const ConvEpilogue *epi) {
  KILN_CHECK(!conv_unsupported(s), "gemm conv2d: ", s.str(), " is not covered: ", *conv_unsupported(s));
  const ConvShape &ps = w.shape;
  KILN_CHECK(ps.C == s.C && ps.O == s.O && ps.kH == s.kH && ps.kW == s.kW && ps.groups == s.groups,
             "gemm conv2d: the weight was packed for ", ps.str(), ", called with ", s.str());
  if (epi) check_epilogue(s, w.config, *epi, sizeof(T) == 8);
  KILN_CHECK(!w.winograd || winograd_eligible(s), "gemm conv2d: Winograd panels for ", s.str(),
             ", which is not a stride-1 undilated ungrouped 3x3 conv");
  KILN_CHECK(!w.winograd || w.config.nr() <= kWinogradMaxNr, "gemm conv2d: Winograd with panels of ",
             w.config.nr(), " columns (at most ", kWinogradMaxNr, ")");
  g_conv_calls.fetch_add(1, std::memory_order_relaxed);
  if (epi) g_register_calls.fetch_add(1, std::memory_order_relaxed);
  if (threads <= 0) threads = get_num_threads();
  const Config &c = w.config;
  const int64_t nr = c.nr(), panels = (s.pixels() + nr - 1) / nr;
  const Item<T> item{s, x, xs, w, bias, y, after, ctx, epi};
  // Items of pp panels of pixels, or (Winograd) of tr tile rows: output rows
  // [2 t0, 2 t0 + 2 tr), whose pixels the direct fallback takes in panels too.
  int64_t pp = 0, tr = 0, blocks = 0;
  if (w.winograd) {
    const int64_t th = winograd_tile_rows(s);
    tr = block_pixels > 0 ? std::min(th, (block_pixels + 2 * s.Wo - 1) / (2 * s.Wo))
                          : winograd_item_tile_rows(s, nr, threads);
    blocks = (th + tr - 1) / tr;
    pp = (std::min(s.Ho, 2 * tr) * s.Wo + nr - 1) / nr;
  } else {
    pp = std::min(panels, block_pixels > 0 ? (block_pixels + nr - 1) / nr
                                           : item_panels(s, c, int64_t(sizeof(T)), threads));
    blocks = (panels + pp - 1) / pp;
  }
  // B block plus a vector of slack (copy_vectors), then the largest window of an item.
  const size_t b_elems = size_t(std::min(c.kc, s.K()) * pp * nr + 64);
  // A block of pp * nr pixels spans at most this many output rows.
  const int64_t rows = std::min(s.Ho, (pp * nr + s.Wo - 2) / s.Wo + 1);
  // (Whole 64-byte lines: Winograd's scratch follows, 64-byte aligned.)
  const int64_t win_elems = (s.C * ((rows - 1) * s.sh + (s.kH - 1) * s.dh + 1) * (s.W + 2 * s.pw) + 64 + 15) / 16 * 16;
  const int64_t wino_elems = w.winograd ? winograd_scratch_elems(s, nr, tr) : 0;
  auto work = [&](int64_t lo, int64_t hi) {
    T *Bp = static_cast<T *>(
        thread_scratch(ScratchSlot::ConvColumns, (b_elems + size_t(win_elems + wino_elems)) * sizeof(T)));
    T *xp = Bp + b_elems;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t n = i / blocks, b = i % blocks;
      if (w.winograd) {
        item.run_winograd(n, b * tr, std::min(winograd_tile_rows(s), (b + 1) * tr), Bp, xp, xp + win_elems);
        continue;
      }
      item.run(n, b * pp * nr, std::min(s.pixels(), (b + 1) * pp * nr), Bp, xp);
    }
  };
  const int64_t items = s.N * blocks;
  if (threads > 1 && items > 1 && !in_parallel_region()) parallel_for(0, items, 1, work);
  else work(0, items);
}

int64_t conv_calls() { return g_conv_calls.load(std::memory_order_relaxed); }
int64_t conv_register_epilogue_calls() { return g_register_calls.load(std::memory_order_relaxed); }
int64_t conv_winograd_items() { return g_winograd_items.load(std::memory_order_relaxed); }
int64_t conv_winograd_direct_items() { return g_winograd_direct_items.load(std::memory_order_relaxed); }
int64_t conv_weight_heap_packs() { return g_heap_packs.load(std::memory_order_relaxed); }

#define KILN_CONV_INSTANTIATE(T)                                                                                  \
  template struct PackedConvWeight<T>;                                                                           \
  template Config conv_config<T>(const ConvShape &);                                                             \
  template PackedConvWeight<T> conv_kernels<T>(const ConvShape &);                                              \
  template PackedConvWeight<T> pack_conv_weight_into<T>(const PackedConvWeight<T> &, const T *, const int64_t[4], \
                                                        T *);                                                    \
  template std::shared_ptr<const PackedConvWeight<T>> pack_conv_weight<T>(const ConvShape &, const T *,          \
                                                                          const int64_t[4]);                     \
  template void conv2d<T>(const ConvShape &, const T *, const int64_t[4], const PackedConvWeight<T> &, const T *, \
                          T *, ConvBlockCallback, void *, int64_t, int, const ConvEpilogue *);                   \
  template int64_t conv_block_pixels<T>(const ConvShape &, int);
KILN_CONV_INSTANTIATE(float)
KILN_CONV_INSTANTIATE(double)

} // namespace kiln::codegen::gemm
