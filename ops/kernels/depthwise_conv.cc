// Depthwise 2-D convolution (one k x k filter per channel, zero padding (k - 1) / 2, no
// bias) for MindSpore's CPU `ops.Custom(func_type="aot")`: forward, gradient w.r.t. the
// input and gradient w.r.t. the weight, each for stride 1 and stride 2.
//
// Why: MindSpore 2.10's CPU Conv2D runs a depthwise convolution through im2col + GEMM
// (oneDNN `x64:gemm:jit`), which does k*k times the memory traffic a direct loop needs;
// its forward + backward is ~7x slower than PyTorch's direct `jit_dw` kernels. The loops
// below are direct, one (image, channel) plane at a time, and the innermost loops run over
// contiguous output columns so the compiler vectorises them (`omp simd`).
// The outer loop (planes, or channels for the weight gradient) is split over
// msdet_threads() threads (threads.h says why an OpenMP team is safe beside MindSpore's pool).
//
// Layouts (all float32, contiguous): x [N, C, H, W], w [C, 1, K, K], y [N, C, Ho, Wo],
// Ho = (H + 2p - K) / s + 1. Every entry point has MindSpore's aot signature:
// params holds the inputs, then the output.

#include <cstdint>
#include <cstring>
#include <vector>

#include "threads.h"

namespace {

struct Geometry {
  int64_t n, c, h, w, k, pad, ho, wo;
};

// Output columns [lo, hi) whose input column ow * S - pad + kw lies inside [0, w).
template <int S>
inline void valid_cols(int64_t kw, const Geometry &g, int64_t *lo, int64_t *hi) {
  const int64_t off = kw - g.pad;  // input column = ow * S + off
  int64_t first = off >= 0 ? 0 : (-off + S - 1) / S;
  int64_t last = (g.w - 1 - off) >= 0 ? (g.w - 1 - off) / S + 1 : 0;  // exclusive
  *lo = first;
  *hi = last < g.wo ? last : g.wo;
}

template <int S>
void forward(const float *x, const float *wt, float *y, const Geometry &g) {
  const int64_t planes = g.n * g.c;
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t p = 0; p < planes; ++p) {
    const float *xp = x + p * g.h * g.w;
    const float *wp = wt + (p % g.c) * g.k * g.k;
    float *yp = y + p * g.ho * g.wo;
    std::memset(yp, 0, sizeof(float) * g.ho * g.wo);
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      float *yrow = yp + oh * g.wo;
      for (int64_t kh = 0; kh < g.k; ++kh) {
        const int64_t ih = oh * S - g.pad + kh;
        if (ih < 0 || ih >= g.h) continue;
        const float *xrow = xp + ih * g.w;
        for (int64_t kw = 0; kw < g.k; ++kw) {
          const float wv = wp[kh * g.k + kw];
          int64_t lo, hi;
          valid_cols<S>(kw, g, &lo, &hi);
          const float *xs = xrow + kw - g.pad;
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += wv * xs[ow * S];
        }
      }
    }
  }
}

// dx[ih, iw] = sum over (kh, kw) of w[kh, kw] * dy[oh, ow] with ih = oh*S - pad + kh,
// computed as a scatter from each output row so the inner loop stays contiguous in dy.
template <int S>
void grad_input(const float *dy, const float *wt, float *dx, const Geometry &g) {
  const int64_t planes = g.n * g.c;
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t p = 0; p < planes; ++p) {
    const float *dyp = dy + p * g.ho * g.wo;
    const float *wp = wt + (p % g.c) * g.k * g.k;
    float *dxp = dx + p * g.h * g.w;
    std::memset(dxp, 0, sizeof(float) * g.h * g.w);
    for (int64_t oh = 0; oh < g.ho; ++oh) {
      const float *dyrow = dyp + oh * g.wo;
      for (int64_t kh = 0; kh < g.k; ++kh) {
        const int64_t ih = oh * S - g.pad + kh;
        if (ih < 0 || ih >= g.h) continue;
        float *dxrow = dxp + ih * g.w;
        for (int64_t kw = 0; kw < g.k; ++kw) {
          const float wv = wp[kh * g.k + kw];
          int64_t lo, hi;
          valid_cols<S>(kw, g, &lo, &hi);
          float *ds = dxrow + kw - g.pad;
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) ds[ow * S] += wv * dyrow[ow];
        }
      }
    }
  }
}

// dw[c, kh, kw] = sum over images and output pixels of dy * the input pixel under the tap.
// One row's dot product in float, rows accumulated in double to keep the long sum
// (N * Ho * Wo terms) within float32 rounding of a reference.
template <int S>
void grad_weight(const float *x, const float *dy, float *dw, const Geometry &g) {
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t ch = 0; ch < g.c; ++ch) {
    std::vector<double> acc(g.k * g.k, 0.0);
    for (int64_t img = 0; img < g.n; ++img) {
      const int64_t p = img * g.c + ch;
      const float *xp = x + p * g.h * g.w;
      const float *dyp = dy + p * g.ho * g.wo;
      for (int64_t kh = 0; kh < g.k; ++kh) {
        for (int64_t kw = 0; kw < g.k; ++kw) {
          int64_t lo, hi;
          valid_cols<S>(kw, g, &lo, &hi);
          double tap = 0.0;
          for (int64_t oh = 0; oh < g.ho; ++oh) {
            const int64_t ih = oh * S - g.pad + kh;
            if (ih < 0 || ih >= g.h) continue;
            const float *xs = xp + ih * g.w + kw - g.pad;
            const float *dyrow = dyp + oh * g.wo;
            float row = 0.0f;
#pragma omp simd reduction(+ : row)
            for (int64_t ow = lo; ow < hi; ++ow) row += dyrow[ow] * xs[ow * S];
            tap += row;
          }
          acc[kh * g.k + kw] += tap;
        }
      }
    }
    for (int64_t i = 0; i < g.k * g.k; ++i) dw[ch * g.k * g.k + i] = static_cast<float>(acc[i]);
  }
}

// Shapes come from the op's inputs: the image tensor (x or a tensor of x's shape) and the
// weight; the output map size from the output tensor.
bool geometry(const int *ndims, int64_t **shapes, int image, int weight, int out_map, Geometry *g) {
  if (ndims[image] != 4 || ndims[weight] != 4 || ndims[out_map] != 4) return false;
  g->n = shapes[image][0];
  g->c = shapes[image][1];
  g->h = shapes[image][2];
  g->w = shapes[image][3];
  g->k = shapes[weight][2];
  if (shapes[weight][0] != g->c || shapes[weight][1] != 1 || shapes[weight][3] != g->k) return false;
  if (g->k % 2 != 1) return false;
  g->pad = (g->k - 1) / 2;
  g->ho = shapes[out_map][2];
  g->wo = shapes[out_map][3];
  return true;
}

bool all_float32(int nparam, const char **dtypes) {
  for (int i = 0; i < nparam; ++i) {
    if (std::strcmp(dtypes[i], "float32") != 0) return false;
  }
  return true;
}

}  // namespace

#define MSDET_DW_FORWARD(NAME, S)                                                           \
  extern "C" int NAME(int nparam, void **params, int *ndims, int64_t **shapes,            \
                      const char **dtypes, void *, void *) {                              \
    Geometry g;                                                                           \
    if (nparam != 3 || !all_float32(nparam, dtypes) || !geometry(ndims, shapes, 0, 1, 2, &g)) \
      return 1;                                                                           \
    forward<S>(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]), \
               static_cast<float *>(params[2]), g);                                       \
    return 0;                                                                             \
  }

// Inputs: x (for its shape only), dy, w; output dx.
#define MSDET_DW_GRAD_INPUT(NAME, S)                                                        \
  extern "C" int NAME(int nparam, void **params, int *ndims, int64_t **shapes,            \
                      const char **dtypes, void *, void *) {                              \
    Geometry g;                                                                           \
    if (nparam != 4 || !all_float32(nparam, dtypes) || !geometry(ndims, shapes, 0, 2, 1, &g)) \
      return 1;                                                                           \
    grad_input<S>(static_cast<const float *>(params[1]), static_cast<const float *>(params[2]), \
                  static_cast<float *>(params[3]), g);                                    \
    return 0;                                                                             \
  }

// Inputs: x, dy, w (for its shape only); output dw.
#define MSDET_DW_GRAD_WEIGHT(NAME, S)                                                       \
  extern "C" int NAME(int nparam, void **params, int *ndims, int64_t **shapes,            \
                      const char **dtypes, void *, void *) {                              \
    Geometry g;                                                                           \
    if (nparam != 4 || !all_float32(nparam, dtypes) || !geometry(ndims, shapes, 0, 2, 1, &g)) \
      return 1;                                                                           \
    grad_weight<S>(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]), \
                   static_cast<float *>(params[3]), g);                                   \
    return 0;                                                                             \
  }

MSDET_DW_FORWARD(DepthwiseConvForwardS1, 1)
MSDET_DW_FORWARD(DepthwiseConvForwardS2, 2)
MSDET_DW_GRAD_INPUT(DepthwiseConvGradInputS1, 1)
MSDET_DW_GRAD_INPUT(DepthwiseConvGradInputS2, 2)
MSDET_DW_GRAD_WEIGHT(DepthwiseConvGradWeightS1, 1)
MSDET_DW_GRAD_WEIGHT(DepthwiseConvGradWeightS2, 2)
