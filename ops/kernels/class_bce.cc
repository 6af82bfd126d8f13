// The class term of the YOLOX loss over every anchor, as one operator each way, for
// MindSpore's CPU `ops.Custom(func_type="aot")`.
//
// Why: msdet's static shapes evaluate the class BCE on all B x A anchors (the original only
// on the foreground ones), and MindSpore builds it from ~12 element-wise operators over
// [B, A, C] (the one-hot target, the IoU tiled over the classes, the six of the stable BCE)
// and a ReduceSum over the classes that alone takes ~2 ms at [8, 2100, 80].
// Here the forward reads the logits once and writes one value per anchor, and the backward
// reads them once and writes the gradient.
//
// Semantics (ops/bce.py, the operators' path it replaces): for anchor r with matched class
// g = cls[r], IoU target u = iou[r] and weight w = weight[r] (1 on foreground anchors),
//   forward  loss[r] = w * sum_c bce(x[r, c], t_c),  t_c = u if c == g else 0,
//            bce(x, t) = max(x, 0) - x * t + log(1 + exp(-|x|)),
//   backward dx[r, c] = (sigmoid(x[r, c]) - t_c) * (dloss[r] * w),
// the sum over the classes taken in double and rounded once, as MindSpore's CPU ReduceSum
// gives it. exp and log1p are fast_math.h's, within a few float ulps of the exact values,
// as MindSpore's own CPU Exp and Log1p are (they are not the C library's either): the
// forward matches the operators' path to ~1e-6 relative, not bit for bit.
//
// Layouts (contiguous): x, dx [R, C] float32 (R = B * A); cls [R] int32; iou, weight, loss,
// dloss [R] float32. Rows are split over msdet_threads() threads (threads.h).

#include <cstdint>

#include "aot.h"
#include "fast_math.h"
#include "threads.h"

namespace {

// The inputs shared by both directions: x [..., C] float32, cls, iou, weight [...] (the
// leading shape of x) int32 / float32 / float32. Sets rows and classes.
bool check_inputs(int *ndims, int64_t **shapes, const char **dtypes, int64_t *rows,
                  int64_t *classes) {
  if (ndims[0] < 1 || !dtype_is(dtypes[0], "float32") || !dtype_is(dtypes[1], "int32") ||
      !dtype_is(dtypes[2], "float32") || !dtype_is(dtypes[3], "float32"))
    return false;
  *classes = shapes[0][ndims[0] - 1];
  *rows = elements(ndims[0] - 1, shapes[0]);
  for (int k = 1; k <= 3; ++k) {
    if (ndims[k] != ndims[0] - 1 || elements(ndims[k], shapes[k]) != *rows) return false;
  }
  return *classes > 0;
}

}  // namespace

// Inputs: x, cls, iou, weight; output loss [R].
extern "C" int ClassBceForward(int nparam, void **params, int *ndims, int64_t **shapes,
                               const char **dtypes, void *, void *) {
  int64_t rows = 0, classes = 0;
  if (nparam != 5 || !check_inputs(ndims, shapes, dtypes, &rows, &classes) ||
      !dtype_is(dtypes[4], "float32") || elements(ndims[4], shapes[4]) != rows)
    return 1;
  const float *x = static_cast<const float *>(params[0]);
  const int32_t *cls = static_cast<const int32_t *>(params[1]);
  const float *iou = static_cast<const float *>(params[2]);
  const float *weight = static_cast<const float *>(params[3]);
  float *loss = static_cast<float *>(params[4]);
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * classes;
    const int32_t g = cls[r];
    const float u = iou[r];
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < classes; ++c) {
      const float v = xr[c];
      const float t = c == g ? u : 0.0f;
      const float abs_v = v < 0.0f ? -v : v;
      const float bce = ((v > 0.0f ? v : 0.0f) - v * t) + log1p_unit(exp_f32(-abs_v));
      sum += static_cast<double>(bce);
    }
    loss[r] = static_cast<float>(sum) * weight[r];
  }
  return 0;
}

// Inputs: x, cls, iou, weight, dloss; output dx [R, C].
extern "C" int ClassBceGrad(int nparam, void **params, int *ndims, int64_t **shapes,
                            const char **dtypes, void *, void *) {
  int64_t rows = 0, classes = 0;
  if (nparam != 6 || !check_inputs(ndims, shapes, dtypes, &rows, &classes) ||
      !dtype_is(dtypes[4], "float32") || elements(ndims[4], shapes[4]) != rows ||
      !dtype_is(dtypes[5], "float32") || elements(ndims[5], shapes[5]) != rows * classes)
    return 1;
  const float *x = static_cast<const float *>(params[0]);
  const int32_t *cls = static_cast<const int32_t *>(params[1]);
  const float *iou = static_cast<const float *>(params[2]);
  const float *weight = static_cast<const float *>(params[3]);
  const float *dloss = static_cast<const float *>(params[4]);
  float *dx = static_cast<float *>(params[5]);
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * classes;
    float *dxr = dx + r * classes;
    const int32_t g = cls[r];
    const float u = iou[r];
    const float scale = dloss[r] * weight[r];
#pragma omp simd
    for (int64_t c = 0; c < classes; ++c) {
      const float t = c == g ? u : 0.0f;
      dxr[c] = (sigmoid(xr[c]) - t) * scale;
    }
  }
  return 0;
}
