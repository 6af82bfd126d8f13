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
// 3x3 filters at stride 1 (most of YOLOX's) take a faster path for the forward pass and the
// input gradient: each plane is first copied into a zero-padded buffer, so every output
// is one register sum of nine products with no border tests, written once, instead of nine
// read-modify-write passes over the output row. The nine products are added in the order
// the general loops add them (padding contributes exact zeros), so both paths give the
// same bits: tests/ops/test_depthwise.py compares them, switched by MsdetDepthwiseGeneral.
//
// Layouts (all float32, contiguous): x [N, C, H, W], w [C, 1, K, K], y [N, C, Ho, Wo],
// Ho = (H + 2p - K) / s + 1. Every entry point has MindSpore's aot signature:
// params holds the inputs, then the output.

#include <cstdint>
#include <cstring>
#include <vector>

#include "aot.h"
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

// Set by MsdetDepthwiseGeneral: stride-1 3x3 filters take the general loops too (tests,
// benchmarks).
bool g_general_only = false;

// One plane [h, w] into buf [(h + 2), (w + 2)] with a zero border of one pixel.
void pad_plane(const float *src, int64_t h, int64_t w, float *buf) {
  const int64_t pw = w + 2;
  std::memset(buf, 0, sizeof(float) * pw);
  std::memset(buf + (h + 1) * pw, 0, sizeof(float) * pw);
  for (int64_t i = 0; i < h; ++i) {
    float *row = buf + (i + 1) * pw;
    row[0] = 0.0f;
    row[w + 1] = 0.0f;
    std::memcpy(row + 1, src + i * w, sizeof(float) * w);
  }
}

// A stride-1 3x3 pass over zero-padded planes, for the forward pass (Gradient false: in =
// x, out = y) and the input gradient (true: in = dy, out = dx), as nine products per output
// added in the order the general loops add them:
// - forward: y[oh, ow] gets w[kh, kw] * x[oh - 1 + kh, ow - 1 + kw], kh then kw ascending;
// - gradient: the scatter of grad_input<1> gives dx[ih, iw] w[kh, kw] * dy[ih + 1 - kh,
//   iw + 1 - kw] by output rows ascending (kh descending), then kw ascending.
// At stride 1 the output plane has the input's size.
template <bool Gradient>
void stencil3(const float *in, const float *wt, float *out, const Geometry &g) {
  const int64_t planes = g.n * g.c;
  const int64_t pw = g.w + 2;
  constexpr int first = Gradient ? 2 : 0;  // column offset of each row's first term
  constexpr int last = 2 - first;
#pragma omp parallel num_threads(msdet_threads())
  {
    std::vector<float> buf((g.h + 2) * pw);
#pragma omp for schedule(static)
    for (int64_t p = 0; p < planes; ++p) {
      pad_plane(in + p * g.h * g.w, g.h, g.w, buf.data());
      const float *k = wt + (p % g.c) * 9;
      float t[9];  // the weights in the order of the terms: padded row r, then term j
      for (int r = 0; r < 3; ++r) {
        for (int j = 0; j < 3; ++j) t[r * 3 + j] = k[(Gradient ? 2 - r : r) * 3 + j];
      }
      float *op = out + p * g.h * g.w;
      for (int64_t row = 0; row < g.h; ++row) {
        const float *r0 = buf.data() + row * pw;  // padded rows row .. row + 2
        const float *r1 = r0 + pw;
        const float *r2 = r1 + pw;
        float *orow = op + row * g.w;
#pragma omp simd
        for (int64_t col = 0; col < g.w; ++col) {
          float acc = 0.0f;
          acc += t[0] * r0[col + first];
          acc += t[1] * r0[col + 1];
          acc += t[2] * r0[col + last];
          acc += t[3] * r1[col + first];
          acc += t[4] * r1[col + 1];
          acc += t[5] * r1[col + last];
          acc += t[6] * r2[col + first];
          acc += t[7] * r2[col + 1];
          acc += t[8] * r2[col + last];
          orow[col] = acc;
        }
      }
    }
  }
}

template <int S>
void forward(const float *x, const float *wt, float *y, const Geometry &g) {
  if (S == 1 && g.k == 3 && !g_general_only) return stencil3<false>(x, wt, y, g);
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
  if (S == 1 && g.k == 3 && !g_general_only) return stencil3<true>(dy, wt, dx, g);
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

// 1: stride-1 3x3 filters take the general loops as every other case does; 0: their fast path.
extern "C" void MsdetDepthwiseGeneral(int on) { g_general_only = on != 0; }

MSDET_DW_FORWARD(DepthwiseConvForwardS1, 1)
MSDET_DW_FORWARD(DepthwiseConvForwardS2, 2)
MSDET_DW_GRAD_INPUT(DepthwiseConvGradInputS1, 1)
MSDET_DW_GRAD_INPUT(DepthwiseConvGradInputS2, 2)
MSDET_DW_GRAD_WEIGHT(DepthwiseConvGradWeightS1, 1)
MSDET_DW_GRAD_WEIGHT(DepthwiseConvGradWeightS2, 2)
