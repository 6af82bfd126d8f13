// SimOTA's pairwise terms (ops/assigner.py, steps 1 and 2) for MindSpore's CPU
// `ops.Custom(func_type="aot")`: for every ground truth m and anchor a of an image, the IoU
// of the box with the anchor's prediction (0 off the candidates), the geometry penalty and
// the exclusion cost, in one pass.
//
// Why: written with MindSpore's operators these are ~60 element-wise operators on
// [B, M, A] tensors (centre and box tests, the candidate mask, the IoU's tiles, maxima,
// minima and divisions), each a full pass over memory and a launch by the runtime; at
// M = 50 padded targets they were most of the assignment's time.
//
// Same bits as the operator path, by construction: every value is the same float32
// operation on the same operands in the same order (the expressions below mirror
// ops/assigner.py and ops/boxes.py line by line), and no operation is reassociated or
// contracted: GCC fuses a * b + c into one multiply-add by default wherever the CPU has
// FMA (it did in the IoU's area_g + area_p: 13 of 3,024 IoUs 1 ulp off), hence the
// fp-contract=off below (GCC's and clang's), for this file only.
// tests/ops/test_simota_pairs.py compares all three outputs with the operator path bit
// for bit, anchors on box edges included.
//
// Layouts (float32, contiguous):
//   inputs  gt_boxes [B, M, 4] (cx, cy, w, h), gt_mask [B, M] (1 = real box),
//           pred_boxes [B, A, 4] (cx, cy, w, h), centers [A, 2] (anchor centre x, y),
//           radius [A] (centre-region half size), hyper [3] (geometry penalty,
//           exclusion cost, 1 = the centre-region-only rule "yolox-latest");
//   outputs ious [B, M, A], geometry_cost [B, M, A], excluded_cost [B, M, A].
// Images are split over msdet_threads() threads (threads.h).

#include <cstdint>
#include <vector>

#include "aot.h"
#include "threads.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

namespace {

struct Sizes {
  int64_t b, m, a;
};


bool same_shape(int ndim, const int64_t *shape, int64_t d0, int64_t d1, int64_t d2) {
  return ndim == 3 && shape[0] == d0 && shape[1] == d1 && shape[2] == d2;
}

bool check_shapes(int nparam, int *ndims, int64_t **shapes, Sizes *s) {
  if (nparam != 9 || ndims[0] != 3 || shapes[0][2] != 4) return false;
  s->b = shapes[0][0];
  s->m = shapes[0][1];
  if (ndims[1] != 2 || shapes[1][0] != s->b || shapes[1][1] != s->m) return false;
  if (ndims[2] != 3 || shapes[2][0] != s->b || shapes[2][2] != 4) return false;
  s->a = shapes[2][1];
  if (ndims[3] != 2 || shapes[3][0] != s->a || shapes[3][1] != 2) return false;
  if (ndims[4] != 1 || shapes[4][0] != s->a) return false;
  if (ndims[5] != 1 || shapes[5][0] != 3) return false;
  for (int i = 6; i < 9; ++i) {
    if (!same_shape(ndims[i], shapes[i], s->b, s->m, s->a)) return false;
  }
  return true;
}

// 1.0f where the point lies strictly inside g +- half on both axes, as _inside() computes it.
inline float inside(float px, float py, float gx, float gy, float half_w, float half_h) {
  const float inside_x = static_cast<float>((px - (gx - half_w)) > 0.0f) *
                         static_cast<float>(((gx + half_w) - px) > 0.0f);
  const float inside_y = static_cast<float>((py - (gy - half_h)) > 0.0f) *
                         static_cast<float>(((gy + half_h) - py) > 0.0f);
  return inside_x * inside_y;
}

inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
inline float maximum(float x, float y) { return x > y ? x : y; }
inline float minimum(float x, float y) { return x < y ? x : y; }

// pairwise_iou_cxcywh for one ground truth g against one prediction p (ops/boxes.py).
inline float iou(const float *g, const float *p) {
  const float g1x = g[0] - g[2] * 0.5f, g1y = g[1] - g[3] * 0.5f;
  const float g2x = g[0] + g[2] * 0.5f, g2y = g[1] + g[3] * 0.5f;
  const float p1x = p[0] - p[2] * 0.5f, p1y = p[1] - p[3] * 0.5f;
  const float p2x = p[0] + p[2] * 0.5f, p2y = p[1] + p[3] * 0.5f;
  const float side_x = relu(minimum(g2x, p2x) - maximum(g1x, p1x));
  const float side_y = relu(minimum(g2y, p2y) - maximum(g1y, p1y));
  const float inter = side_x * side_y;
  const float area_g = g[2] * g[3];
  const float area_p = p[2] * p[3];
  return inter / (((area_g + area_p) - inter) + 1e-30f);
}

void pairs(const float *gt, const float *mask, const float *pred, const float *centers,
           const float *radius, const float *hyper, float *ious, float *geometry_cost,
           float *excluded_cost, const Sizes &s) {
  const float penalty = hyper[0], excluded = hyper[1];
  const bool center_only = hyper[2] > 0.5f;
  const int64_t ma = s.m * s.a;
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t b = 0; b < s.b; ++b) {
    // Pass 1: the geometry of every pair (kept in geometry_cost for now) and, per anchor,
    // whether any ground truth makes it a candidate (the sum over M, as the bmm does).
    std::vector<float> candidates(s.a, 0.0f);
    for (int64_t m = 0; m < s.m; ++m) {
      const float *g = gt + (b * s.m + m) * 4;
      const float valid = mask[b * s.m + m];
      const float hw = g[2] * 0.5f, hh = g[3] * 0.5f;
      float *geometry = geometry_cost + b * ma + m * s.a;
      for (int64_t a = 0; a < s.a; ++a) {
        const float cx = centers[2 * a], cy = centers[2 * a + 1], r = radius[a];
        const float in_center = inside(cx, cy, g[0], g[1], r, r) * valid;
        if (center_only) {
          geometry[a] = in_center;
          candidates[a] += in_center;
        } else {
          const float in_box = inside(cx, cy, g[0], g[1], hw, hh) * valid;
          geometry[a] = in_box * in_center;
          candidates[a] += in_box + in_center;
        }
      }
    }
    // Pass 2: the candidate mask of each pair, its IoU and its two costs.
    for (int64_t m = 0; m < s.m; ++m) {
      const float *g = gt + (b * s.m + m) * 4;
      const float valid = mask[b * s.m + m];
      const int64_t row = b * ma + m * s.a;
      for (int64_t a = 0; a < s.a; ++a) {
        const float pair_ok = static_cast<float>(candidates[a] > 0.5f) * valid;
        ious[row + a] = iou(g, pred + (b * s.a + a) * 4) * pair_ok;
        geometry_cost[row + a] = penalty * (1.0f - geometry_cost[row + a]);
        excluded_cost[row + a] = excluded * (1.0f - pair_ok);
      }
    }
  }
}

}  // namespace

// Inputs: gt_boxes, gt_mask, pred_boxes, centers, radius, hyper; outputs: ious,
// geometry_cost, excluded_cost (layouts above).
extern "C" int SimotaPairs(int nparam, void **params, int *ndims, int64_t **shapes,
                           const char **dtypes, void *, void *) {
  Sizes s;
  if (!all_float32(nparam, dtypes) || !check_shapes(nparam, ndims, shapes, &s)) return 1;
  pairs(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]),
        static_cast<const float *>(params[2]), static_cast<const float *>(params[3]),
        static_cast<const float *>(params[4]), static_cast<const float *>(params[5]),
        static_cast<float *>(params[6]), static_cast<float *>(params[7]),
        static_cast<float *>(params[8]), s);
  return 0;
}
