// SGD with momentum and per-parameter weight decay over every parameter of a network in one
// operator, for MindSpore's CPU `ops.Custom(func_type="aot")`. It updates the parameters, their
// momentum buffers and their first-step flags in place (ops/sgd.py declares them written).
//
// Why: MindSpore's `SGD` is one operator per parameter, 330 for YOLOX-nano; each is small
// (1.5 ms for all of them per step) but each adds its share of the compiled graph's memory
// and of the runtime's time between operators: a step with 329 of them removed held 49 MiB
// less and ran ~10 ms shorter.
//
// The same arithmetic as MindSpore's CPU `SGD` kernel, element by element and in the same
// order, so the same bits (tests/ops/test_sgd.py compares them over several steps):
//   g = grad + weight * decay                      (only when decay > 0)
//   accum = g on a parameter's first step (stat > 0, then stat = 0),
//           accum * momentum + (1 - dampening) * g  after it   (only when momentum > 0)
//   g = g + accum * momentum (Nesterov) or accum
//   weight = weight - lr * g
// Contracting a product and a sum into one fused multiply-add would round once where
// MindSpore rounds twice, so this file is compiled without contraction (pragma below).
// A rate and a momentum both 0 change nothing (the momentum buffers and flags are left alone
// without momentum, the weights by a zero rate): the kernel returns at once, which also keeps
// a non-finite gradient out of the weights. That is how a training step skips an update
// without a graph branch (engine/training/optim.py, DecayInKernelSGD).
//
// Inputs (float32): lr [1] or [], momentum [1] or [], dampening [1] or [], nesterov [1] or []
// (0 or 1), decay [n], then n gradients, the n weights, their n accumulators, their n stats
// (each the weight's shape); output: a flag [1] (1: done), which callers use to order what
// reads the weights after it. Parameters are split over msdet_threads() threads.

#pragma GCC optimize("fp-contract=off")

#include <cstdint>

#include "aot.h"
#include "threads.h"

namespace {

constexpr int kScalars = 4;  // lr, momentum, dampening, nesterov; then decay

void update(const float *grad, float *weight, float *accum, float *stat, int64_t n, float lr,
            float momentum, float dampening, bool nesterov, float decay) {
  const float keep = 1.0f - dampening;
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (decay > 0.0f) g += weight[i] * decay;
    if (momentum > 0.0f) {
      if (stat[i] > 0.0f) {
        accum[i] = g;
        stat[i] = 0.0f;
      } else {
        accum[i] = accum[i] * momentum + keep * g;
      }
      if (nesterov) {
        g += accum[i] * momentum;
      } else {
        g = accum[i];
      }
    }
    weight[i] -= lr * g;
  }
}

}  // namespace

extern "C" int FlatSGD(int nparam, void **params, int *ndims, int64_t **shapes,
                       const char **dtypes, void *, void *) {
  if (!all_float32(nparam, dtypes)) return 1;
  const int tensors = nparam - kScalars - 2;  // 4 per parameter
  if (tensors <= 0 || tensors % 4 != 0) return 1;
  const int n = tensors / 4;
  if (elements(ndims[kScalars], shapes[kScalars]) != n) return 1;
  for (int s = 0; s < kScalars; ++s) {
    if (elements(ndims[s], shapes[s]) != 1) return 1;
  }
  const int first = kScalars + 1;
  for (int k = 0; k < n; ++k) {
    const int64_t size = elements(ndims[first + k], shapes[first + k]);
    for (int part = 1; part < 4; ++part) {
      if (elements(ndims[first + part * n + k], shapes[first + part * n + k]) != size) return 1;
    }
  }
  const float lr = *static_cast<const float *>(params[0]);
  const float momentum = *static_cast<const float *>(params[1]);
  const float dampening = *static_cast<const float *>(params[2]);
  const bool nesterov = *static_cast<const float *>(params[3]) != 0.0f;
  const float *decay = static_cast<const float *>(params[kScalars]);
  if (lr == 0.0f && momentum == 0.0f) {
    *static_cast<float *>(params[nparam - 1]) = 1.0f;
    return 0;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(msdet_threads())
  for (int k = 0; k < n; ++k) {
    update(static_cast<const float *>(params[first + k]), static_cast<float *>(params[first + n + k]),
           static_cast<float *>(params[first + 2 * n + k]),
           static_cast<float *>(params[first + 3 * n + k]),
           elements(ndims[first + k], shapes[first + k]), lr, momentum, dampening, nesterov,
           decay[k]);
  }
  *static_cast<float *>(params[nparam - 1]) = 1.0f;
  return 0;
}
