// Greedy non-maximum suppression of every image of a batch (ops/nms.py, BatchedNMS) for
// MindSpore's CPU `ops.Custom(func_type="aot")`: which of the candidates, already in score
// order, survive.
//
// Why: on MindSpore's operators it is one NMSWithMask per image, and MindSpore's CPU
// NMSWithMask always works on all k candidates: a bitonic sort, the IoU of all k x k pairs
// and a k x k mask, also when few or none of them passed the score threshold (k = 1000 at
// the default eval.pre_nms_topk: ~75 ms per batch of 8 at 416 px, with nothing to suppress
// in an untrained model). Here each image costs what its valid candidates cost: each one
// is compared with the boxes kept before it, and invalid rows are skipped.
//
// The same decisions as NMSWithMask on the same boxes: a candidate is suppressed when its
// IoU with an earlier kept box is > the threshold, the IoU computed as MindSpore's CPU
// kernel computes it (intersection / (area_a + area_b - intersection), each product and
// sum rounded to float32: no FMA contraction, see the pragma). Invalid rows are never kept
// and suppress nothing; in BatchedNMS's order they come after every valid one (score under
// the threshold, non-finite), so in NMSWithMask they suppress nothing that is kept either.
// tests/ops/test_greedy_nms.py compares the masks with NMSWithMask's.
//
// Layouts (contiguous):
//   inputs  boxes [B, K, 4] float32 (x1, y1, x2, y2, class-offset by BatchedNMS), valid
//           [B, K] float32 (1 = a candidate, 0 = none: the rows after the last candidate),
//           hyper [1] float32 (the IoU threshold);
//   output  kept [B, K] float32 (1 = kept).
// Images are split over msdet_threads() threads (threads.h).

#pragma GCC optimize("fp-contract=off")

#include <algorithm>
#include <cstdint>
#include <vector>

#include "aot.h"
#include "threads.h"

namespace {

struct Sizes {
  int64_t b, k;
};

bool check_shapes(int nparam, int *ndims, int64_t **shapes, Sizes *s) {
  if (nparam != 4 || ndims[0] != 3 || shapes[0][2] != 4) return false;
  s->b = shapes[0][0];
  s->k = shapes[0][1];
  if (ndims[1] != 2 || shapes[1][0] != s->b || shapes[1][1] != s->k) return false;
  if (ndims[2] != 1 || shapes[2][0] != 1) return false;
  return ndims[3] == 2 && shapes[3][0] == s->b && shapes[3][1] == s->k;
}

struct Box {
  float x1, y1, x2, y2, area;
};

// NMSWithMask's decision for an earlier box a and a later box b: true when b is suppressed.
inline bool overlaps(const Box &a, const Box &b, float thresh) {
  const float w = std::max(std::min(a.x2, b.x2) - std::max(a.x1, b.x1), 0.0f);
  const float h = std::max(std::min(a.y2, b.y2) - std::max(a.y1, b.y1), 0.0f);
  const float inter = w * h;
  const float combined = a.area + b.area;
  return (inter / (combined - inter)) > thresh;
}

void suppress(const float *boxes, const float *valid, float thresh, float *kept,
              const Sizes &s) {
#pragma omp parallel for schedule(dynamic) num_threads(msdet_threads())
  for (int64_t b = 0; b < s.b; ++b) {
    const float *box = boxes + b * s.k * 4;
    const float *ok = valid + b * s.k;
    float *out = kept + b * s.k;
    std::fill(out, out + s.k, 0.0f);
    std::vector<Box> survivors;
    for (int64_t i = 0; i < s.k; ++i) {
      if (!(ok[i] > 0.5f)) continue;
      const float *r = box + i * 4;
      const Box cand{r[0], r[1], r[2], r[3], (r[2] - r[0]) * (r[3] - r[1])};
      bool suppressed = false;
      for (const Box &prev : survivors) {
        if (overlaps(prev, cand, thresh)) {
          suppressed = true;
          break;
        }
      }
      if (!suppressed) {
        survivors.push_back(cand);
        out[i] = 1.0f;
      }
    }
  }
}

}  // namespace

// Inputs: boxes, valid, hyper; output: kept (layouts above).
extern "C" int GreedyNms(int nparam, void **params, int *ndims, int64_t **shapes,
                         const char **dtypes, void *, void *) {
  Sizes s;
  if (!all_float32(nparam, dtypes) || !check_shapes(nparam, ndims, shapes, &s)) return 1;
  suppress(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]),
           *static_cast<const float *>(params[2]), static_cast<float *>(params[3]), s);
  return 0;
}
