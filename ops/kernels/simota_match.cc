// SimOTA's matching (ops/assigner.py, steps 3 and 4) for MindSpore's CPU
// `ops.Custom(func_type="aot")`: from the cost and IoU of every (ground truth, anchor) pair
// of an image, the dynamic k of each ground truth, its k cheapest anchors, and for anchors
// claimed more than once the ground truth of lowest cost; out come the per-anchor results.
//
// Why: on MindSpore's operators this is two TopK over [B, M, A], a scatter, an argmin, a
// one-hot and five batched matmuls over [B, M, A] tensors; here it is two passes over each
// row keeping the 10 best values, then one pass over the anchors.
//
// The operator path ranks the pairs in both regions and the other candidates separately, by
// their class + IoU cost (for the 910A's float16 TopK): the same order as the cost's here,
// except where the geometry penalty's float32 rounding ties two costs (0.002 apart at 20,000).
// The same results as the operator path otherwise, with one difference: where two anchors' costs tie
// exactly at the k-th place of a ground truth, this kernel takes the lower anchor index;
// MindSpore's CPU TopK orders ties in its own way (neither index order nor its reverse),
// as the original's torch.topk leaves it unspecified. Everything else is exact: the
// dynamic k is the sum of the 10 largest IoUs, added in double and rounded once to
// float32, then truncated: what MindSpore's CPU ReduceSum does over the last axis of a
// [B, M, 10] tensor (its generic path accumulates float in double; read in its source and
// measured; its 2-D path adds in float32, not used here); an anchor
// claimed twice goes to the first ground truth of least cost, as ArgMin picks; the
// outputs are copies of inputs or small integers. tests/ops/test_simota_match.py compares
// the three outputs with the operator path.
//
// Layouts (contiguous):
//   inputs  cost [B, M, A] float32, ious [B, M, A] float32, gt_mask [B, M] float32
//           (1 = real box, 0 = padding);
//   outputs fg [B, A] float32 (1 = foreground), matched_gt [B, A] float32 (the ground
//           truth's index, 0 for background), matched_iou [B, A] float32.
// Images are split over msdet_threads() threads (threads.h).

#include <cstdint>
#include <vector>

#include "aot.h"
#include "threads.h"

namespace {

constexpr int kTopK = 10;  // TOPK_CANDIDATES in ops/assigner.py

struct Sizes {
  int64_t b, m, a;
};


bool check_shapes(int nparam, int *ndims, int64_t **shapes, Sizes *s) {
  if (nparam != 6 || ndims[0] != 3) return false;
  s->b = shapes[0][0];
  s->m = shapes[0][1];
  s->a = shapes[0][2];
  if (s->a < kTopK) return false;  // TopK would refuse too
  if (ndims[1] != 3 || shapes[1][0] != s->b || shapes[1][1] != s->m || shapes[1][2] != s->a) {
    return false;
  }
  if (ndims[2] != 2 || shapes[2][0] != s->b || shapes[2][1] != s->m) return false;
  for (int i = 3; i < 6; ++i) {
    if (ndims[i] != 2 || shapes[i][0] != s->b || shapes[i][1] != s->a) return false;
  }
  return true;
}

// The sum of the kTopK largest values of row[0..n), added in double, rounded once to float.
float top_sum(const float *row, int64_t n) {
  float top[kTopK];
  int filled = 0;
  for (int64_t a = 0; a < n; ++a) {
    const float v = row[a];
    if (filled == kTopK && !(v > top[kTopK - 1])) continue;
    int i = filled < kTopK ? filled++ : kTopK - 1;
    while (i > 0 && top[i - 1] < v) {
      top[i] = top[i - 1];
      --i;
    }
    top[i] = v;
  }
  double sum = 0.0;
  for (int i = 0; i < filled; ++i) sum += top[i];
  return static_cast<float>(sum);
}

// The indices of the k (<= kTopK) smallest values of row[0..n), the lower index first among
// equal values, into out[0..k).
void cheapest(const float *row, int64_t n, int k, int64_t *out) {
  float best[kTopK];
  int filled = 0;
  for (int64_t a = 0; a < n; ++a) {
    const float v = row[a];
    if (filled == k && !(v < best[k - 1])) continue;
    int i = filled < k ? filled++ : k - 1;
    while (i > 0 && best[i - 1] > v) {
      best[i] = best[i - 1];
      out[i] = out[i - 1];
      --i;
    }
    best[i] = v;
    out[i] = a;
  }
}

void match(const float *cost, const float *ious, const float *mask, float *fg,
           float *matched_gt, float *matched_iou, const Sizes &s) {
  const int64_t ma = s.m * s.a;
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t b = 0; b < s.b; ++b) {
    const float *cost_b = cost + b * ma;
    const float *ious_b = ious + b * ma;
    // How many ground truths claim each anchor, and the first of them.
    std::vector<int32_t> claims(s.a, 0), first(s.a, 0);
    for (int64_t m = 0; m < s.m; ++m) {
      if (!(mask[b * s.m + m] > 0.5f)) continue;  // padding takes nothing
      // max(1, int(sum)); IoUs are at most 1 (a rounding above it still truncates to
      // kTopK), and a NaN sum (non-finite predictions: the step's finite check stops
      // those) takes 1 rather than an undefined conversion.
      const float sum = top_sum(ious_b + m * s.a, s.a);
      const int k = sum >= 1.0f ? (sum < kTopK ? static_cast<int>(sum) : kTopK) : 1;
      int64_t taken[kTopK];
      cheapest(cost_b + m * s.a, s.a, k, taken);
      for (int j = 0; j < k; ++j) {
        if (claims[taken[j]]++ == 0) first[taken[j]] = static_cast<int32_t>(m);
      }
    }
    for (int64_t a = 0; a < s.a; ++a) {
      const int64_t out = b * s.a + a;
      if (claims[a] == 0) {
        fg[out] = 0.0f;
        matched_gt[out] = 0.0f;
        matched_iou[out] = 0.0f;
        continue;
      }
      int64_t gt = first[a];
      if (claims[a] > 1) {  // ArgMin over all M: the first ground truth of least cost
        gt = 0;
        for (int64_t m = 1; m < s.m; ++m) {
          if (cost_b[m * s.a + a] < cost_b[gt * s.a + a]) gt = m;
        }
      }
      fg[out] = 1.0f;
      matched_gt[out] = static_cast<float>(gt);
      matched_iou[out] = ious_b[gt * s.a + a];
    }
  }
}

}  // namespace

// Inputs: cost, ious, gt_mask; outputs: fg, matched_gt, matched_iou (layouts above).
extern "C" int SimotaMatch(int nparam, void **params, int *ndims, int64_t **shapes,
                           const char **dtypes, void *, void *) {
  Sizes s;
  if (!all_float32(nparam, dtypes) || !check_shapes(nparam, ndims, shapes, &s)) return 1;
  match(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]),
        static_cast<const float *>(params[2]), static_cast<float *>(params[3]),
        static_cast<float *>(params[4]), static_cast<float *>(params[5]), s);
  return 0;
}
