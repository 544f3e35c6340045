// Winograd F(2x2, 3x3) for kiln's conv2d: see codegen/gemm/winograd.h.
#include "codegen/gemm/winograd.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "codegen/gemm/ukernel.h"
#include "runtime/log.h"

namespace kiln::codegen::gemm {

namespace {

// KILN_CONV_WINOGRAD=0 keeps every conv on the direct implicit GEMM (A/B runs).
bool winograd_allowed() {
  static const bool allowed = [] {
    const char *s = std::getenv("KILN_CONV_WINOGRAD");
    if (!s || !*s || std::strcmp(s, "1") == 0) return true;
    if (std::strcmp(s, "0") == 0) return false;
    kiln::log()->warn("KILN_CONV_WINOGRAD='{}' is not 0 or 1: Winograd stays on", s);
    return true;
  }();
  return allowed;
}

// The tiles the micro-kernels compute for `s` per image, with items of `r`
// tile rows: each item's tiles rounded up to whole panels of nr.
int64_t padded_tiles(const ConvShape &s, int64_t nr, int64_t r) {
  const int64_t th = winograd_tile_rows(s), tw = winograd_tile_cols(s);
  int64_t padded = 0;
  for (int64_t t0 = 0; t0 < th; t0 += r) {
    const int64_t tiles = std::min(r, th - t0) * tw;
    padded += (tiles + nr - 1) / nr * nr;
  }
  return padded;
}

// The input window of tile rows [t0, t1): padded rows [2 t0, 2 t1 + 2) of each
// channel (padded row r is input row r - ph), each 2 tw + 2 wide (padded
// column q is input column q - pw), zeros outside the input. False when a
// value is not finite or exceeds kWinogradLimit.
template <class T>
bool fill_window(const ConvShape &s, const T *img, const int64_t xs[4], int64_t t0, int64_t t1, T *win) {
  const int64_t R = 2 * (t1 - t0) + 2, Wp = 2 * winograd_tile_cols(s) + 2;
  const int64_t right = std::max<int64_t>(0, Wp - s.pw - s.W); // zero columns past the input
  const int64_t cols = std::min(s.W, Wp - s.pw);
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t r = 0; r < R; ++r) {
      T *d = win + (c * R + r) * Wp;
      const int64_t ih = 2 * t0 + r - s.ph;
      if (ih < 0 || ih >= s.H) {
        std::fill(d, d + Wp, T(0));
        continue;
      }
      std::fill(d, d + s.pw, T(0));
      const T *src = img + c * xs[1] + ih * xs[2];
      if (xs[3] == 1) std::copy_n(src, cols, d + s.pw);
      else
        for (int64_t iw = 0; iw < cols; ++iw) d[s.pw + iw] = src[iw * xs[3]];
      std::fill(d + s.pw + cols, d + s.pw + cols + right, T(0));
    }
  // One pass over the whole window (its zeros pass): one reduction, not one per row.
  int bad = 0;
  for (int64_t i = 0, n = s.C * R * Wp; i < n; ++i) bad |= !(std::abs(win[i]) <= T(kWinogradLimit));
  return !bad;
}

// A run of tiles within one tile row: panel columns [dst, dst + len) are
// tiles (th, tc .. tc + len) (th relative to the item's first tile row).
struct Run {
  int64_t dst, th, tc, len;
};

// The runs of the panel whose tiles are the item's [j0, j0 + cnt).
int runs_of(int64_t j0, int64_t cnt, int64_t tw, Run *out) {
  int n = 0;
  for (int64_t i = 0, th = j0 / tw, tc = j0 % tw; i < cnt; tc = 0, ++th) {
    const int64_t len = std::min(tw - tc, cnt - i);
    out[n++] = {i, th, tc, len};
    i += len;
  }
  return n;
}

constexpr int64_t kMaxNr = kWinogradMaxNr;

// V = B^T d B for the panel's tiles, into 16 blocks of C x nr (B-panel layout).
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
template <class T>
void input_transform(const ConvShape &s, const T *win, int64_t R, int64_t Wp, const Run *runs, int nruns,
                     int64_t cnt, int64_t nr, T *V) {
  const int64_t blk = s.C * nr;
  for (int64_t c = 0; c < s.C; ++c) {
    for (int ri = 0; ri < nruns; ++ri) {
      const Run &run = runs[ri];
      T t[4][4][kMaxNr]; // row i of the patch, transformed along its columns: t[i][b][k]
      for (int i = 0; i < 4; ++i) {
        const T *p = win + (c * R + 2 * run.th + i) * Wp + 2 * run.tc;
        for (int64_t k = 0; k < run.len; ++k) {
          const T d0 = p[2 * k], d1 = p[2 * k + 1], d2 = p[2 * k + 2], d3 = p[2 * k + 3];
          t[i][0][k] = d0 - d2, t[i][1][k] = d1 + d2, t[i][2][k] = d2 - d1, t[i][3][k] = d1 - d3;
        }
      }
      T *v = V + c * nr + run.dst;
      for (int b = 0; b < 4; ++b)
        for (int64_t k = 0; k < run.len; ++k) {
          v[(0 + b) * blk + k] = t[0][b][k] - t[2][b][k];
          v[(4 + b) * blk + k] = t[1][b][k] + t[2][b][k];
          v[(8 + b) * blk + k] = t[2][b][k] - t[1][b][k];
          v[(12 + b) * blk + k] = t[1][b][k] - t[3][b][k];
        }
    }
    if (cnt < nr)
      for (int xi = 0; xi < 16; ++xi) std::fill(V + xi * blk + c * nr + cnt, V + xi * blk + c * nr + nr, T(0));
  }
}

// y's 2x2 blocks = A^T m A (+ bias) from the 16 blocks of O x nr in M.
// A^T = [1 1 1 0; 0 1 -1 -1].
template <class T>
void output_transform(const ConvShape &s, const T *M, const Run *runs, int nruns, int64_t nr, const T *bias,
                      T *yn, int64_t t0) {
  const int64_t blk = s.O * nr, P = s.pixels();
  for (int64_t o = 0; o < s.O; ++o) {
    const T b0 = bias ? bias[o] : T(0);
    for (int ri = 0; ri < nruns; ++ri) {
      const Run &run = runs[ri];
      const T *m = M + o * nr + run.dst;
      T y[4][kMaxNr]; // y[2 u + v][k]: output (2 th + u, 2 (tc + k) + v)
      for (int64_t k = 0; k < run.len; ++k) {
        T r[2][4];
        for (int b = 0; b < 4; ++b) {
          const T m0 = m[(0 + b) * blk + k], m1 = m[(4 + b) * blk + k], m2 = m[(8 + b) * blk + k],
                  m3 = m[(12 + b) * blk + k];
          r[0][b] = m0 + m1 + m2, r[1][b] = m1 - m2 - m3;
        }
        for (int u = 0; u < 2; ++u) {
          y[2 * u][k] = b0 + (r[u][0] + r[u][1] + r[u][2]);
          y[2 * u + 1][k] = b0 + (r[u][1] - r[u][2] - r[u][3]);
        }
      }
      const int64_t oh = 2 * (t0 + run.th), ow = 2 * run.tc;
      // Tiles whose two columns are both outputs, then a last half tile (odd Wo).
      const int64_t full = std::min(run.len, (s.Wo - ow) / 2);
      for (int u = 0; u < 2 && oh + u < s.Ho; ++u) {
        T *row = yn + o * P + (oh + u) * s.Wo + ow;
        for (int64_t k = 0; k < full; ++k) row[2 * k] = y[2 * u][k], row[2 * k + 1] = y[2 * u + 1][k];
        if (full < run.len) row[2 * full] = y[2 * u][full];
      }
    }
  }
}

} // namespace

bool winograd_eligible(const ConvShape &s) {
  return s.kH == 3 && s.kW == 3 && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 && s.groups == 1 &&
         s.N > 0 && s.C > 0 && s.O > 0 && s.Ho > 0 && s.Wo > 0;
}

bool winograd_shape(const ConvShape &s, int64_t nr) {
  if (!winograd_eligible(s) || nr > kWinogradMaxNr) return false;
  // Below 16 channels either way the transforms cost more than the multiplies they save.
  if (s.C < 16 || s.O < 16) return false;
  // Multiplies per image as the micro-kernels run them, padded panels
  // included: 16 per tile against 9 per pixel. Small images pad most: at
  // 512 x 7 x 7 (16 tiles in a panel of 48) Winograd's products were 0.89 of
  // the direct conv's and it ran slower; at 256 x 14 x 14 (0.71) faster
  // (docs/performance.md). Winograd needs a quarter fewer.
  const int64_t wino = 16 * padded_tiles(s, nr, winograd_tile_rows(s));
  const int64_t direct = 9 * (s.pixels() + nr - 1) / nr * nr;
  if (4 * wino > 3 * direct) return false;
  return winograd_allowed();
}

int64_t winograd_item_tile_rows(const ConvShape &s, int64_t nr, int threads) {
  const int64_t th = winograd_tile_rows(s), tw = winograd_tile_cols(s);
  // At most 4 panels of tiles per item (its window and V and M blocks in L2),
  // and enough items to keep every thread busy where the conv has them.
  const int64_t most = std::max<int64_t>(1, std::min(th, 4 * nr / tw));
  int64_t best = 1, best_padded = padded_tiles(s, nr, 1);
  for (int64_t r = 2; r <= most; ++r) {
    if (s.N * ((th + r - 1) / r) < 4 * threads) break;
    const int64_t p = padded_tiles(s, nr, r);
    if (p <= best_padded) best = r, best_padded = p;
  }
  return best;
}

// Elements rounded up to whole 64-byte lines (V and M are the micro-kernels'
// B panels and C tiles: 64-byte aligned, as packed panels are).
int64_t lines(int64_t elems) { return (elems + 15) / 16 * 16; }

int64_t winograd_scratch_elems(const ConvShape &s, int64_t nr, int64_t tile_rows) {
  const int64_t window = s.C * (2 * tile_rows + 2) * (2 * winograd_tile_cols(s) + 2);
  return lines(window) + 16 * s.C * nr + 16 * s.O * nr + 16;
}

template <class T> bool winograd_pack_weight(const ConvShape &s, int mr, const T *W, const int64_t ws[4], T *dst) {
  const int64_t O = s.O, C = s.C;
  bool ok = true;
  for (int64_t o = 0; o < O; ++o) {
    const int64_t i0 = o / mr * mr, rows = std::min<int64_t>(mr, O - i0), i = o - i0;
    for (int64_t c = 0; c < C; ++c) {
      double g[3][3], gt[4][3], u[4][4];
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          const T v = W[o * ws[0] + c * ws[1] + a * ws[2] + b * ws[3]];
          ok = ok && std::abs(v) <= T(kWinogradLimit);
          g[a][b] = double(v);
        }
      // G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], rows then columns.
      for (int b = 0; b < 3; ++b) {
        gt[0][b] = g[0][b], gt[1][b] = 0.5 * (g[0][b] + g[1][b] + g[2][b]);
        gt[2][b] = 0.5 * (g[0][b] - g[1][b] + g[2][b]), gt[3][b] = g[2][b];
      }
      for (int a = 0; a < 4; ++a) {
        u[a][0] = gt[a][0], u[a][1] = 0.5 * (gt[a][0] + gt[a][1] + gt[a][2]);
        u[a][2] = 0.5 * (gt[a][0] - gt[a][1] + gt[a][2]), u[a][3] = gt[a][2];
      }
      for (int xi = 0; xi < 16; ++xi) dst[(xi * O + i0) * C + c * rows + i] = T(u[xi / 4][xi % 4]);
    }
  }
  return ok;
}

template <class T>
bool run_winograd_item(const ConvShape &s, const PackedConvWeight<T> &w, const T *x, const int64_t xs[4],
                       const T *bias, T *y, int64_t n, int64_t t0, int64_t t1, T *scratch) {
  const Config &c = w.config;
  const int64_t nr = c.nr(), mr = c.mr, tw = winograd_tile_cols(s);
  const int64_t R = 2 * (t1 - t0) + 2, Wp = 2 * tw + 2;
  T *win = scratch;
  T *V = win + lines(s.C * R * Wp);
  T *M = V + 16 * s.C * nr;
  if (!fill_window(s, x + n * xs[0], xs, t0, t1, win)) return false;
  T *yn = y + n * s.O * s.pixels();
  const int64_t tiles = (t1 - t0) * tw, kc_max = std::max<int64_t>(1, c.kc);
  Run runs[kMaxNr];
  for (int64_t j0 = 0; j0 < tiles; j0 += nr) {
    const int64_t cnt = std::min(nr, tiles - j0);
    const int nruns = runs_of(j0, cnt, tw, runs);
    input_transform(s, win, R, Wp, runs, nruns, cnt, nr, V);
    for (int64_t xi = 0; xi < 16; ++xi)
      for (int64_t i0 = 0; i0 < s.O; i0 += mr) {
        const int64_t rows = std::min(mr, s.O - i0);
        typename PackedConvWeight<T>::Kernel k = rows == mr ? w.full : w.tail;
        const T *a = w.winograd_panel(xi, i0);
        const T *b = V + xi * s.C * nr;
        T *m = M + (xi * s.O + i0) * nr;
        for (int64_t pc = 0; pc < s.C; pc += kc_max) {
          const int64_t kc = std::min(kc_max, s.C - pc);
          k(a + pc * rows, b + pc * nr, m, kc, nr, nr, T(1), pc == 0 ? T(0) : T(1));
        }
      }
    output_transform(s, M, runs, nruns, nr, bias, yn, t0);
  }
  return true;
}

#define KILN_WINOGRAD_INSTANTIATE(T)                                                                            \
  template bool winograd_pack_weight<T>(const ConvShape &, int, const T *, const int64_t[4], T *);             \
  template bool run_winograd_item<T>(const ConvShape &, const PackedConvWeight<T> &, const T *, const int64_t[4], \
                                     const T *, T *, int64_t, int64_t, int64_t, T *);
KILN_WINOGRAD_INSTANTIATE(float)
KILN_WINOGRAD_INSTANTIATE(double)

} // namespace kiln::codegen::gemm
