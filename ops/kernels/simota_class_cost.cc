// SimOTA's class cost (ops/assigner.py, step 2) for MindSpore's CPU
// `ops.Custom(func_type="aot")`: for every ground truth m and anchor a of an image, the
// binary cross entropy of the anchor's score sqrt(sigmoid(cls) * sigmoid(obj)) against the
// one-hot of the ground truth's class, summed over the classes.
//
// Why: with MindSpore's operators this is ~18 operators over [B, A, C] (two sigmoids, the
// objectness tiled over the classes, sqrt, the two clamped logs of four operators each,
// a ReduceSum over the classes that alone takes ~2 ms at [8, 2100, 80]) and a batched
// matmul with the one-hot classes, ~6 ms a step. Here one pass per image.
//
// Semantics (the operator path in ops/assigner.py): with p_c = sqrt(sigmoid(x_c) *
// sigmoid(o)), nlq_c = -clog(1 - p_c), nlp_c = -clog(p_c), clog(v) = log(v) for v >= the
// smallest normal float and -100 below (torch's clamp),
//   cost[m, a] = sum_c nlq_c + (nlp_g - nlq_g),  g = the class of ground truth m,
// with the sum taken in double and rounded once (as MindSpore's CPU ReduceSum gives it), and
// cost[m, a] = sum_c nlq_c for a class outside [0, C) (the one-hot row is then all zero).
// sigmoid and log are fast_math.h's, within a few float ulps of the exact values, as
// MindSpore's own CPU Sigmoid and Log are (neither is the C library's): costs match the
// operator path to ~1e-6 relative, not bit for bit (tests/ops/test_simota_class_cost.py).
//
// Layouts (contiguous): cls_logits [B, A, C] float32, obj_logits [B, A] float32,
// gt_classes [B, M] int32; output cost [B, M, A] float32. Images are split over
// msdet_threads() threads (threads.h).

#include <cstdint>
#include <cstring>
#include <vector>

#include "aot.h"
#include "fast_math.h"
#include "threads.h"

namespace {

constexpr float kTiny = 1.17549435e-38f;  // the smallest normal float32
constexpr float kLogClamp = -100.0f;

inline float clamped_log(float v) { return v >= kTiny ? log_f32(v) : kLogClamp; }

// One image: per anchor the sum over classes (sum) and the per-class difference nlp - nlq
// (diff [A, C]), then each ground truth's row.
void image(const float *x, const float *obj, const int32_t *classes, float *cost, int64_t a_n,
           int64_t m_n, int64_t c_n, float *sum, float *diff) {
  for (int64_t a = 0; a < a_n; ++a) {
    const float so = sigmoid(obj[a]);
    const float *xa = x + a * c_n;
    float *da = diff + a * c_n;
    double total = 0.0;
#pragma omp simd reduction(+ : total)
    for (int64_t c = 0; c < c_n; ++c) {
      const float p = __builtin_sqrtf(sigmoid(xa[c]) * so);
      const float nlq = -clamped_log(1.0f - p);
      const float nlp = -clamped_log(p);
      da[c] = nlp - nlq;
      total += static_cast<double>(nlq);
    }
    sum[a] = static_cast<float>(total);
  }
  for (int64_t m = 0; m < m_n; ++m) {
    const int32_t g = classes[m];
    float *row = cost + m * a_n;
    if (g < 0 || g >= c_n) {
      std::memcpy(row, sum, sizeof(float) * a_n);
      continue;
    }
    for (int64_t a = 0; a < a_n; ++a) row[a] = sum[a] + diff[a * c_n + g];
  }
}

}  // namespace

// Inputs: cls_logits, obj_logits, gt_classes; output cost.
extern "C" int SimotaClassCost(int nparam, void **params, int *ndims, int64_t **shapes,
                               const char **dtypes, void *, void *) {
  if (nparam != 4 || ndims[0] != 3 || ndims[1] != 2 || ndims[2] != 2 || ndims[3] != 3 ||
      !dtype_is(dtypes[0], "float32") || !dtype_is(dtypes[1], "float32") ||
      !dtype_is(dtypes[2], "int32") || !dtype_is(dtypes[3], "float32"))
    return 1;
  const int64_t b_n = shapes[0][0], a_n = shapes[0][1], c_n = shapes[0][2];
  const int64_t m_n = shapes[2][1];
  if (shapes[1][0] != b_n || shapes[1][1] != a_n || shapes[2][0] != b_n ||
      shapes[3][0] != b_n || shapes[3][1] != m_n || shapes[3][2] != a_n)
    return 1;
  const float *x = static_cast<const float *>(params[0]);
  const float *obj = static_cast<const float *>(params[1]);
  const int32_t *classes = static_cast<const int32_t *>(params[2]);
  float *cost = static_cast<float *>(params[3]);
#pragma omp parallel num_threads(msdet_threads())
  {
    std::vector<float> sum(a_n), diff(a_n * c_n);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < b_n; ++b) {
      image(x + b * a_n * c_n, obj + b * a_n, classes + b * m_n, cost + b * m_n * a_n, a_n, m_n,
            c_n, sum.data(), diff.data());
    }
  }
  return 0;
}
