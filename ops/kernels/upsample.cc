// Nearest-neighbour 2x upsampling (PyTorch's nn.Upsample(scale_factor=2)) for MindSpore's
// CPU `ops.Custom(func_type="aot")`: forward and gradient.
//
// Why: msdet's portable upsampling is a reshape + `Tile` (models/layers.py), whose CPU
// kernel writes under 1 GB/s on the AMD EPYC, and whose gradient MindSpore expands into a
// `ReduceSum` over the two tiled axes. Here each direction is one pass.
//
// Same bits as the `Tile` path, by construction:
// - forward: a copy (y[2i + a, 2j + b] = x[i, j]);
// - gradient: dx[i, j] = the four dy it was copied to, summed in double and rounded once to
//   float32. MindSpore's CPU ReduceSum gives that value (its float32 sums of four equal the
//   double sum rounded: tests/ops/test_upsample.py compares the two gradients bit for bit),
//   and four floats whose exponents lie within 27 bits of each other sum exactly in double,
//   so the order of the additions does not matter.
//
// Layouts (float32, contiguous): x [N, C, H, W], y [N, C, 2H, 2W]. The planes (N * C) are
// split over msdet_threads() threads (threads.h). Entry points have MindSpore's aot
// signature: params holds the inputs, then the output.

#include <cstdint>
#include <cstring>

#include "threads.h"

namespace {

bool float32_planes(int nparam, int *ndims, const char **dtypes) {
  for (int i = 0; i < nparam; ++i) {
    if (ndims[i] != 4 || std::strcmp(dtypes[i], "float32") != 0) return false;
  }
  return true;
}

// The input's [N, C, H, W] (shape `small`) matches the output's [N, C, 2H, 2W] (`big`).
bool doubled(const int64_t *small, const int64_t *big) {
  return small[0] == big[0] && small[1] == big[1] && big[2] == 2 * small[2] &&
         big[3] == 2 * small[3];
}

void forward(const float *x, float *y, int64_t planes, int64_t h, int64_t w) {
  const int64_t w2 = 2 * w;
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t p = 0; p < planes; ++p) {
    const float *xp = x + p * h * w;
    float *yp = y + p * 4 * h * w;
    for (int64_t i = 0; i < h; ++i) {
      const float *xrow = xp + i * w;
      float *top = yp + 2 * i * w2;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        top[2 * j] = xrow[j];
        top[2 * j + 1] = xrow[j];
      }
      std::memcpy(top + w2, top, sizeof(float) * w2);
    }
  }
}

void grad(const float *dy, float *dx, int64_t planes, int64_t h, int64_t w) {
  const int64_t w2 = 2 * w;
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t p = 0; p < planes; ++p) {
    const float *dyp = dy + p * 4 * h * w;
    float *dxp = dx + p * h * w;
    for (int64_t i = 0; i < h; ++i) {
      const float *top = dyp + 2 * i * w2;
      const float *bottom = top + w2;
      float *dxrow = dxp + i * w;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        const double s = (static_cast<double>(top[2 * j]) + top[2 * j + 1]) +
                         (static_cast<double>(bottom[2 * j]) + bottom[2 * j + 1]);
        dxrow[j] = static_cast<float>(s);
      }
    }
  }
}

}  // namespace

// Input: x; output y.
extern "C" int Upsample2xForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                 const char **dtypes, void *, void *) {
  if (nparam != 2 || !float32_planes(nparam, ndims, dtypes) || !doubled(shapes[0], shapes[1]))
    return 1;
  forward(static_cast<const float *>(params[0]), static_cast<float *>(params[1]),
          shapes[0][0] * shapes[0][1], shapes[0][2], shapes[0][3]);
  return 0;
}

// Input: dy; output dx.
extern "C" int Upsample2xGrad(int nparam, void **params, int *ndims, int64_t **shapes,
                              const char **dtypes, void *, void *) {
  if (nparam != 2 || !float32_planes(nparam, ndims, dtypes) || !doubled(shapes[1], shapes[0]))
    return 1;
  grad(static_cast<const float *>(params[0]), static_cast<float *>(params[1]),
       shapes[1][0] * shapes[1][1], shapes[1][2], shapes[1][3]);
  return 0;
}
