// The model EMA's update over every parameter of a network in one operator, for MindSpore's
// CPU `ops.Custom(func_type="aot")`: the flat average buffer moves towards the parameters'
// current values in place (ops/ema.py declares it written).
//
// Why: engine.train_step.ModelEMA keeps the averages in one flat buffer, but reading the
// parameters into it took a Reshape per parameter, a Concat, a Lerp and an Assign, ~117
// operators of a YOLOX-nano step; every operator of a compiled graph holds memory of its
// own. Here the parameters are read where they are.
//
// The same arithmetic as MindSpore's CPU Lerp, element by element, so the same bits
// (tests/ops/test_ema.py): average = average + (value - average) * weight. Contracting the
// product and the sum into one fused multiply-add would round once where MindSpore rounds
// twice, so this file is compiled without contraction (pragma below).
//
// Inputs (float32): weight [1] or [] (1 - decay), then the n parameters (any shapes), then
// the buffer [sum of their sizes], written in place; output: a flag [1] (1: done). The
// parameters are split over msdet_threads() threads.

#pragma GCC optimize("fp-contract=off")

#include <cstdint>
#include <vector>

#include "aot.h"
#include "threads.h"

extern "C" int FlatEMA(int nparam, void **params, int *ndims, int64_t **shapes,
                       const char **dtypes, void *, void *) {
  if (!all_float32(nparam, dtypes)) return 1;
  const int n = nparam - 3;  // weight, n parameters, buffer, flag
  if (n < 1 || elements(ndims[0], shapes[0]) != 1) return 1;
  std::vector<int64_t> offsets(n + 1, 0);
  for (int k = 0; k < n; ++k) offsets[k + 1] = offsets[k] + elements(ndims[1 + k], shapes[1 + k]);
  const int buffer = 1 + n;
  if (ndims[buffer] != 1 || shapes[buffer][0] != offsets[n]) return 1;
  const float weight = *static_cast<const float *>(params[0]);
  float *average = static_cast<float *>(params[buffer]);
#pragma omp parallel for schedule(dynamic, 8) num_threads(msdet_threads())
  for (int k = 0; k < n; ++k) {
    const float *value = static_cast<const float *>(params[1 + k]);
    float *avg = average + offsets[k];
    const int64_t size = offsets[k + 1] - offsets[k];
    for (int64_t i = 0; i < size; ++i) avg[i] = avg[i] + (value[i] - avg[i]) * weight;
  }
  *static_cast<float *>(params[nparam - 1]) = 1.0f;
  return 0;
}
