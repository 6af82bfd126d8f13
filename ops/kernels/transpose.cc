// The last two axes of a 3-D tensor swapped, [B, M, N] -> [B, N, M], for MindSpore's CPU
// `ops.Custom(func_type="aot")`: the head's [B, 85, A] -> [B, A, 85] and its gradient (the
// same swap the other way).
//
// Why: MindSpore 2.10's CPU `Transpose` builds an 8-byte source index for every element it
// writes when it is resized and keeps it for the graph's life: ~11 MiB for the head's
// [8, 85, 2100] at 320 px, once for the forward pass and once for the gradient.
// Here it is a copy in 32 x 32 tiles (both
// sides of a tile stay in the L1 cache) with no table. A copy: the same bits.
//
// Layouts (float32, contiguous): x [B, M, N], y [B, N, M]. The tiles are split over
// msdet_threads() threads (threads.h). The entry point has MindSpore's aot signature: params
// holds the input, then the output.

#include <cstdint>

#include "aot.h"
#include "threads.h"

namespace {

constexpr int64_t kTile = 32;

void swap_last(const float *x, float *y, int64_t b, int64_t m, int64_t n) {
  const int64_t tiles_m = (m + kTile - 1) / kTile, tiles_n = (n + kTile - 1) / kTile;
  const int64_t tiles = b * tiles_m * tiles_n;
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t image = t / (tiles_m * tiles_n), rest = t % (tiles_m * tiles_n);
    const int64_t i0 = (rest / tiles_n) * kTile, j0 = (rest % tiles_n) * kTile;
    const int64_t i1 = i0 + kTile < m ? i0 + kTile : m, j1 = j0 + kTile < n ? j0 + kTile : n;
    const float *src = x + image * m * n;
    float *dst = y + image * m * n;
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t i = i0; i < i1; ++i) dst[j * m + i] = src[i * n + j];
    }
  }
}

}  // namespace

// Input: x [B, M, N]; output y [B, N, M].
extern "C" int SwapLastAxes(int nparam, void **params, int *ndims, int64_t **shapes,
                            const char **dtypes, void *, void *) {
  if (nparam != 2 || ndims[0] != 3 || ndims[1] != 3 || !all_float32(nparam, dtypes)) return 1;
  const int64_t *x = shapes[0], *y = shapes[1];
  if (y[0] != x[0] || y[1] != x[2] || y[2] != x[1]) return 1;
  swap_last(static_cast<const float *>(params[0]), static_cast<float *>(params[1]), x[0], x[1],
            x[2]);
  return 0;
}
