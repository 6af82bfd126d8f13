// YOLOX's Focus stem for MindSpore's CPU `ops.Custom(func_type="aot")`: the space-to-depth
// of the image and the 3x3 convolution after it (stride 1, padding 1) as one operator, and
// that convolution's weight gradient.
//
// Why: the stem is the training step's largest layer. On MindSpore's operators it is the
// phases (a one-hot 2x2 stride-2 convolution), then a 12-channel convolution at half the
// image's side, whose forward and weight gradient oneDNN (held to AVX2, engine/device.py)
// runs as im2col + GEMM: 1.7 + 6.3 + 8.3 ms per YOLOX-nano step at 320 px on a Zen 5 EPYC.
// Here the phases are read straight from the image into a padded buffer
// per image, and both passes are register-blocked loops in this CPU's vector width.
//
// Layouts (float32, contiguous): x [N, C, H, W] with H, W even; the phases F [4C, H/2, W/2]
// in YOLOX's order, channel (column phase * 2 + row phase) * C + c, i.e.
// F[(dx * 2 + dy) * C + c, i, j] = x[c, 2i + dy, 2j + dx]; weight w [O, 4C, 3, 3];
// y [N, O, H/2, W/2], y[o, p, q] = sum over k, a, b of w[o, k, a, b] F[k, p + a - 1, q + b - 1]
// (zero outside F). The gradient of x is not computed here (ops/focus_conv.py; the image
// needs none in training).
//
// Arithmetic: float32 multiply-adds. The forward sums its 36C products per output in one
// order (as a convolution does, in its own order); the weight gradient sums each weight's
// products over an image in vector lanes, the lanes and the images in double, and rounds once.
// Images are split over msdet_threads() threads (threads.h); the weight gradient's
// per-thread sums are added in thread order, so a result depends only on the thread count.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <omp.h>

#include "aot.h"
#include "threads.h"

namespace {

#ifdef __AVX512F__
constexpr int kLanes = 16;  // floats per vector
constexpr int kGradOut = 2;  // output channels per weight-gradient pass: 18 accumulators
#else
constexpr int kLanes = 8;
constexpr int kGradOut = 1;  // 9 accumulators of 16 vector registers
#endif
constexpr int kFwdOut = 8;  // output channels per forward block: 8 accumulators
typedef float vec __attribute__((vector_size(kLanes * sizeof(float))));

inline vec load(const float *p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

struct Geometry {
  int64_t n, c, h, w, o;  // x [n, c, h, w], w [o, 4c, 3, 3]
  int64_t k() const { return 4 * c; }
  int64_t h2() const { return h / 2; }
  int64_t w2() const { return w / 2; }
  // The phases' padded row: one zero column left, the row, zeros to a whole number of
  // vectors plus the two columns a vector at the last block reads beyond.
  int64_t row() const { return (w2() + kLanes - 1) / kLanes * kLanes + 2; }
  int64_t rows() const { return h2() + 2; }  // one zero row above and below
  int64_t phases_size() const { return k() * rows() * row(); }
};

// The phases of one image into f [4C, H/2 + 2, row] with a zero border.
void phases(const float *x, float *f, const Geometry &g) {
  const int64_t h2 = g.h2(), w2 = g.w2(), row = g.row(), rows = g.rows();
  std::memset(f, 0, sizeof(float) * g.phases_size());
  for (int64_t dx = 0; dx < 2; ++dx) {
    for (int64_t dy = 0; dy < 2; ++dy) {
      for (int64_t c = 0; c < g.c; ++c) {
        float *fk = f + ((dx * 2 + dy) * g.c + c) * rows * row;
        for (int64_t i = 0; i < h2; ++i) {
          const float *xr = x + (c * g.h + 2 * i + dy) * g.w + dx;
          float *fr = fk + (i + 1) * row + 1;
          for (int64_t j = 0; j < w2; ++j) fr[j] = xr[2 * j];
        }
      }
    }
  }
}

// w [O, K * 9] -> blocks of kFwdOut output channels, [block][K * 9][kFwdOut], zero-padded.
std::vector<float> pack_weight(const float *w, const Geometry &g) {
  const int64_t taps = g.k() * 9, blocks = (g.o + kFwdOut - 1) / kFwdOut;
  std::vector<float> packed(blocks * taps * kFwdOut, 0.0f);
  for (int64_t o = 0; o < g.o; ++o) {
    for (int64_t t = 0; t < taps; ++t) {
      packed[((o / kFwdOut) * taps + t) * kFwdOut + o % kFwdOut] = w[o * taps + t];
    }
  }
  return packed;
}

// y [O, H/2, W/2] of one image from its phases f.
void convolve(const float *f, const float *packed, float *y, const Geometry &g) {
  const int64_t h2 = g.h2(), w2 = g.w2(), row = g.row(), rows = g.rows(), k = g.k();
  for (int64_t p = 0; p < h2; ++p) {
    for (int64_t o0 = 0; o0 < g.o; o0 += kFwdOut) {
      const int64_t outs = std::min<int64_t>(kFwdOut, g.o - o0);
      const float *block = packed + (o0 / kFwdOut) * k * 9 * kFwdOut;
      for (int64_t q0 = 0; q0 < w2; q0 += kLanes) {
        vec acc[kFwdOut] = {};
        const float *wt = block;
        for (int64_t ch = 0; ch < k; ++ch) {
          for (int64_t a = 0; a < 3; ++a) {
            const float *fr = f + (ch * rows + p + a) * row + q0;
            for (int64_t b = 0; b < 3; ++b, wt += kFwdOut) {
              const vec v = load(fr + b);
#pragma GCC unroll 8
              for (int i = 0; i < kFwdOut; ++i) acc[i] += wt[i] * v;
            }
          }
        }
        const int64_t cols = std::min<int64_t>(kLanes, w2 - q0);
        for (int64_t i = 0; i < outs; ++i) {
          std::memcpy(y + ((o0 + i) * h2 + p) * w2 + q0, &acc[i], sizeof(float) * cols);
        }
      }
    }
  }
}

// dw[o, ch, a, b] += sum over the image's pixels of dy[o, p, q] f[ch, p + a, q + b] (f's
// padded indices), for OUTS output channels from o0 (`outs` of them real).
template <int OUTS>
void weight_grad(const float *f, const float *dy, double *dw, const Geometry &g, int64_t o0,
                 int64_t outs) {
  const int64_t h2 = g.h2(), w2 = g.w2(), row = g.row(), rows = g.rows(), k = g.k();
  const int64_t whole = w2 / kLanes * kLanes;
  const float *d[OUTS];
  for (int i = 0; i < OUTS; ++i) d[i] = dy + (o0 + std::min<int64_t>(i, outs - 1)) * h2 * w2;
  for (int64_t ch = 0; ch < k; ++ch) {
    vec acc[OUTS][9] = {};
    double rest[OUTS][9] = {};
    for (int64_t p = 0; p < h2; ++p) {
      const float *r[3];
      r[0] = f + (ch * rows + p) * row;
      r[1] = r[0] + row;
      r[2] = r[1] + row;
      for (int64_t q0 = 0; q0 < whole; q0 += kLanes) {
        vec dv[OUTS];
        for (int i = 0; i < OUTS; ++i) dv[i] = load(d[i] + p * w2 + q0);
#pragma GCC unroll 3
        for (int a = 0; a < 3; ++a) {
#pragma GCC unroll 3
          for (int b = 0; b < 3; ++b) {
            const vec v = load(r[a] + q0 + b);
            for (int i = 0; i < OUTS; ++i) acc[i][a * 3 + b] += dv[i] * v;
          }
        }
      }
      for (int64_t q = whole; q < w2; ++q) {
        for (int a = 0; a < 3; ++a) {
          for (int b = 0; b < 3; ++b) {
            for (int i = 0; i < OUTS; ++i) {
              rest[i][a * 3 + b] += static_cast<double>(d[i][p * w2 + q]) * r[a][q + b];
            }
          }
        }
      }
    }
    for (int64_t i = 0; i < std::min<int64_t>(OUTS, outs); ++i) {
      for (int t = 0; t < 9; ++t) {
        double sum = rest[i][t];
        for (int lane = 0; lane < kLanes; ++lane) sum += acc[i][t][lane];
        dw[((o0 + i) * k + ch) * 9 + t] += sum;
      }
    }
  }
}

// Per-thread scratch for one image's phases, kept between calls (OpenMP reuses its threads).
float *scratch(int64_t size) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(size);
  return buffer.data();
}

void forward(const float *x, const float *w, float *y, const Geometry &g) {
  const std::vector<float> packed = pack_weight(w, g);
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t n = 0; n < g.n; ++n) {
    float *f = scratch(g.phases_size());
    phases(x + n * g.c * g.h * g.w, f, g);
    convolve(f, packed.data(), y + n * g.o * g.h2() * g.w2(), g);
  }
}

void weight_gradient(const float *x, const float *dy, float *dw, const Geometry &g) {
  const int64_t size = g.o * g.k() * 9;
  const int threads = std::max(1, msdet_threads());
  std::vector<double> sums(threads * size, 0.0);
#pragma omp parallel num_threads(threads)
  {
    double *mine = sums.data() + static_cast<int64_t>(omp_get_thread_num()) * size;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.n; ++n) {
      float *f = scratch(g.phases_size());
      phases(x + n * g.c * g.h * g.w, f, g);
      const float *dyn = dy + n * g.o * g.h2() * g.w2();
      for (int64_t o0 = 0; o0 < g.o; o0 += kGradOut) {
        weight_grad<kGradOut>(f, dyn, mine, g, o0, std::min<int64_t>(kGradOut, g.o - o0));
      }
    }
  }
  for (int64_t i = 0; i < size; ++i) {
    double total = 0.0;
    for (int t = 0; t < threads; ++t) total += sums[t * size + i];
    dw[i] = static_cast<float>(total);
  }
}

// x [N, C, H, W] (H, W even, both >= 2) and w [O, 4C, 3, 3]; fills g.
bool geometry(const int64_t *x, const int64_t *w, Geometry *g) {
  if (x[0] < 1 || x[1] < 1 || x[2] < 2 || x[3] < 2 || x[2] % 2 != 0 || x[3] % 2 != 0) return false;
  if (w[0] < 1 || w[1] != 4 * x[1] || w[2] != 3 || w[3] != 3) return false;
  *g = Geometry{x[0], x[1], x[2], x[3], w[0]};
  return true;
}

// y (or dy) [N, O, H/2, W/2] for geometry g.
bool output_shape(const int64_t *y, const Geometry &g) {
  return y[0] == g.n && y[1] == g.o && y[2] == g.h2() && y[3] == g.w2();
}

bool four_dim_float32(int nparam, int *ndims, const char **dtypes) {
  for (int i = 0; i < nparam; ++i) {
    if (ndims[i] != 4) return false;
  }
  return all_float32(nparam, dtypes);
}

}  // namespace

// Inputs: x, w; output y.
extern "C" int FocusConvForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                const char **dtypes, void *, void *) {
  Geometry g;
  if (nparam != 3 || !four_dim_float32(nparam, ndims, dtypes)) return 1;
  if (!geometry(shapes[0], shapes[1], &g) || !output_shape(shapes[2], g)) return 1;
  forward(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]),
          static_cast<float *>(params[2]), g);
  return 0;
}

// Inputs: x, dy, w (for its shape); output dw.
extern "C" int FocusConvWeightGrad(int nparam, void **params, int *ndims, int64_t **shapes,
                                   const char **dtypes, void *, void *) {
  Geometry g;
  if (nparam != 4 || !four_dim_float32(nparam, ndims, dtypes)) return 1;
  if (!geometry(shapes[0], shapes[2], &g) || !output_shape(shapes[1], g)) return 1;
  for (int d = 0; d < 4; ++d) {
    if (shapes[3][d] != shapes[2][d]) return 1;
  }
  weight_gradient(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]),
                  static_cast<float *>(params[3]), g);
  return 0;
}
