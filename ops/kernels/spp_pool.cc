// SPP's chained max-pools (YOLOX's 5/9/13 pools as 5x5 pools applied one after another,
// stride 1, windows clipped at the border) and their concatenation with the input, for
// MindSpore's CPU `ops.Custom(func_type="aot")`: forward and gradient.
//
// Why: in YOLOX-nano's training step at 320 px, MindSpore 2.10's three CPU MaxPoolGrad
// operators over SPP's [8, 128, 10, 10] planes took 7.2 ms and the pools 1.2 ms,
// for tensors of 400 KB; the concatenation and its gradient's slices add
// more operators. Here the forward pass is one operator writing the concatenated tensor,
// and the backward pass one operator.
//
// Same values as MindSpore's operators, by construction:
// - forward: a maximum is exact; each 5x5 maximum is a 5-wide maximum along the row, then a
//   5-high maximum of those along the column. Both scans keep the first of equal values
//   (a later one replaces it only if greater), so the value kept is the window's first
//   maximum in row-major order, the element MindSpore's MaxPool keeps (this matters for
//   +0.0 against -0.0 only).
// - gradient: each output's gradient goes to the first input of its window, in row-major
//   order, that equals the output: MindSpore's MaxPoolGrad routes ties the same way
//   (tests/ops/test_spp_pool.py). The gradients routed into one input are added in float32
//   in row-major order of the outputs, onto zero, and then added to the gradient that input
//   received from the concatenation, as the operators' graph does; whether MindSpore's
//   MaxPoolGrad adds in the same order the test measures.
//
// Layouts (float32, contiguous): x [N, C, H, W], y [N, (L + 1) C, H, W] holding x, then the
// L pool levels, each pooling the one before. The (image, channel) planes are split over
// msdet_threads() threads (threads.h). Entry points have MindSpore's aot signature: params
// holds the inputs, then the output.

#include <cstdint>
#include <cstring>
#include <vector>

#include "aot.h"
#include "threads.h"

namespace {

constexpr int64_t kRadius = 2;  // 5x5 windows

inline int64_t lo_of(int64_t i) { return i - kRadius < 0 ? 0 : i - kRadius; }
inline int64_t hi_of(int64_t i, int64_t n) { return i + kRadius >= n ? n - 1 : i + kRadius; }

// Each row's 5-wide maxima: out[r][j] = the first maximum of in[r][lo(j) .. hi(j)].
void row_max(const float *in, float *out, int64_t h, int64_t w) {
  for (int64_t r = 0; r < h; ++r) {
    const float *p = in + r * w;
    float *q = out + r * w;
    for (int64_t j = 0; j < w; ++j) {
      const int64_t lo = lo_of(j), hi = hi_of(j, w);
      float m = p[lo];
      for (int64_t c = lo + 1; c <= hi; ++c) m = p[c] > m ? p[c] : m;
      q[j] = m;
    }
  }
}

// Each column's 5-high maxima of the row maxima: the 5x5 pool of the plane row_max read.
void column_max(const float *rows, float *out, int64_t h, int64_t w) {
  for (int64_t i = 0; i < h; ++i) {
    const int64_t lo = lo_of(i), hi = hi_of(i, h);
    float *q = out + i * w;
    std::memcpy(q, rows + lo * w, sizeof(float) * w);
    for (int64_t r = lo + 1; r <= hi; ++r) {
      const float *p = rows + r * w;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) q[j] = p[j] > q[j] ? p[j] : q[j];
    }
  }
}

struct Geometry {
  int64_t n, c, levels, h, w;
  int64_t plane() const { return h * w; }
  // The plane of image b, level l, channel k in y (level 0 is x).
  int64_t offset(int64_t b, int64_t l, int64_t k) const {
    return ((b * (levels + 1) + l) * c + k) * plane();
  }
};

void forward(const float *x, float *y, const Geometry &g) {
  const int64_t hw = g.plane();
#pragma omp parallel num_threads(msdet_threads())
  {
    std::vector<float> rows(hw);
#pragma omp for schedule(static)
    for (int64_t p = 0; p < g.n * g.c; ++p) {
      const int64_t b = p / g.c, k = p % g.c;
      std::memcpy(y + g.offset(b, 0, k), x + p * hw, sizeof(float) * hw);
      for (int64_t l = 1; l <= g.levels; ++l) {
        row_max(y + g.offset(b, l - 1, k), rows.data(), g.h, g.w);
        column_max(rows.data(), y + g.offset(b, l, k), g.h, g.w);
      }
    }
  }
}

// Adds each gradient of `out` (a pool of `in`) onto the first input of its window that
// equals it, into `routed` (zeroed here); `rows` holds in's row maxima on return.
void route(const float *in, const float *out, const float *dout, float *routed, float *rows,
           int64_t h, int64_t w) {
  row_max(in, rows, h, w);
  std::memset(routed, 0, sizeof(float) * h * w);
  for (int64_t i = 0; i < h; ++i) {
    const int64_t r_lo = lo_of(i), r_hi = hi_of(i, h);
    for (int64_t j = 0; j < w; ++j) {
      const float m = out[i * w + j];
      int64_t r = r_lo;
      while (r <= r_hi && !(rows[r * w + j] == m)) ++r;
      if (r > r_hi) continue;  // NaN: no input equals it
      const int64_t c_hi = hi_of(j, w);
      int64_t c = lo_of(j);
      while (c < c_hi && !(in[r * w + c] == m)) ++c;
      routed[r * w + c] += dout[i * w + j];
    }
  }
}

void backward(const float *y, const float *dy, float *dx, const Geometry &g) {
  const int64_t hw = g.plane();
#pragma omp parallel num_threads(msdet_threads())
  {
    std::vector<float> grad(hw), routed(hw), rows(hw);
#pragma omp for schedule(static)
    for (int64_t p = 0; p < g.n * g.c; ++p) {
      const int64_t b = p / g.c, k = p % g.c;
      std::memcpy(grad.data(), dy + g.offset(b, g.levels, k), sizeof(float) * hw);
      for (int64_t l = g.levels; l >= 1; --l) {
        route(y + g.offset(b, l - 1, k), y + g.offset(b, l, k), grad.data(), routed.data(),
              rows.data(), g.h, g.w);
        const float *own = dy + g.offset(b, l - 1, k);
        float *into = l == 1 ? dx + p * hw : grad.data();
#pragma omp simd
        for (int64_t q = 0; q < hw; ++q) into[q] = own[q] + routed[q];
      }
    }
  }
}

// x [N, C, H, W] against y [N, (L + 1) C, H, W] with L >= 1; fills g.
bool geometry(int nparam, int *ndims, const char **dtypes, const int64_t *x, const int64_t *y,
              Geometry *g) {
  for (int i = 0; i < nparam; ++i) {
    if (ndims[i] != 4) return false;
  }
  if (!all_float32(nparam, dtypes)) return false;
  if (x[1] < 1 || y[0] != x[0] || y[1] % x[1] != 0 || y[1] / x[1] < 2 || y[2] != x[2] ||
      y[3] != x[3] || x[2] < 1 || x[3] < 1)
    return false;
  *g = Geometry{x[0], x[1], y[1] / x[1] - 1, x[2], x[3]};
  return true;
}

}  // namespace

// Input: x; output y.
extern "C" int SppPoolForward(int nparam, void **params, int *ndims, int64_t **shapes,
                              const char **dtypes, void *, void *) {
  Geometry g;
  if (nparam != 2 || !geometry(nparam, ndims, dtypes, shapes[0], shapes[1], &g)) return 1;
  forward(static_cast<const float *>(params[0]), static_cast<float *>(params[1]), g);
  return 0;
}

// Inputs: y, dy; output dx.
extern "C" int SppPoolGrad(int nparam, void **params, int *ndims, int64_t **shapes,
                           const char **dtypes, void *, void *) {
  Geometry g;
  if (nparam != 3 || !geometry(nparam, ndims, dtypes, shapes[2], shapes[0], &g)) return 1;
  for (int d = 0; d < 4; ++d) {
    if (shapes[1][d] != shapes[0][d]) return 1;
  }
  backward(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]),
           static_cast<float *>(params[2]), g);
  return 0;
}
