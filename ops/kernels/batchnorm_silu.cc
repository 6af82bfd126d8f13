// BatchNorm2d followed by SiLU, as one operator (training mode, with its backward, and
// evaluation mode) for MindSpore's CPU `ops.Custom(func_type="aot")`.
//
// Why: every YOLOX block is conv -> BatchNorm -> SiLU. On CPU, MindSpore 2.10 runs SiLU as
// Sigmoid + Mul and its gradient as five element-wise operators, and its BatchNormGrad is
// ~3x slower than PyTorch's. Here the forward reads the
// convolution's output three times (mean, variance, normalise + activate) and the backward
// reads it twice and the incoming gradient once, recomputing the pre-activation instead of
// storing it; no intermediate tensor is kept for the backward pass.
//
// Semantics are MindSpore's nn.BatchNorm2d (training mode: batch statistics, biased
// variance for normalising; evaluation: the running statistics) followed by x * sigmoid(x).
// The training forward also moves the layer's running statistics by the batch, writing
// them in place (ops/batchnorm_silu.py declares those two inputs written: an Assign per
// statistic per layer held far more of the compiled graph's memory than its work is worth).
// Channels are split over msdet_threads() threads (threads.h).
//
// Layouts (float32, contiguous): x, y, dy, dx [N, C, H, W]; gamma, beta, batch and running
// statistics, dgamma, dbeta [C]; (eps, keep) [2], keep being the weight of the running value
// (MindSpore's BatchNorm momentum). Sums over a channel are taken per (image, channel) plane
// in float and across planes in double.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "aot.h"
#include "fast_math.h"
#include "threads.h"

namespace {

// d silu(z) / dz = s * (1 + z * (1 - s)), s = sigmoid(z).
inline float silu_slope(float z) {
  const float s = sigmoid(z);
  return s * (1.0f + z * (1.0f - s));
}

struct Dims {
  int64_t n, c, hw;
  const float *plane(const float *base, int64_t img, int64_t ch) const {
    return base + (img * c + ch) * hw;
  }
  float *plane(float *base, int64_t img, int64_t ch) const { return base + (img * c + ch) * hw; }
};

// Also the running statistics after this batch, in place: running * keep + batch *
// (1 - keep), the variance made unbiased (M / (M - 1)) as MindSpore's BatchNorm does.
void forward(const float *x, const float *gamma, const float *beta, float *run_mean,
             float *run_var, float eps, float keep, float *y, float *mean_out, float *var_out,
             const Dims &d) {
  const double count = static_cast<double>(d.n * d.hw);
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t ch = 0; ch < d.c; ++ch) {
    double sum = 0.0;
    for (int64_t img = 0; img < d.n; ++img) {
      const float *xp = d.plane(x, img, ch);
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < d.hw; ++k) s += xp[k];
      sum += s;
    }
    const float mean = static_cast<float>(sum / count);
    double squares = 0.0;
    for (int64_t img = 0; img < d.n; ++img) {
      const float *xp = d.plane(x, img, ch);
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < d.hw; ++k) {
        const float t = xp[k] - mean;
        s += t * t;
      }
      squares += s;
    }
    const float var = static_cast<float>(squares / count);
    const float scale = gamma[ch] / std::sqrt(var + eps);
    const float shift = beta[ch] - mean * scale;
    for (int64_t img = 0; img < d.n; ++img) {
      const float *xp = d.plane(x, img, ch);
      float *yp = d.plane(y, img, ch);
#pragma omp simd
      for (int64_t k = 0; k < d.hw; ++k) {
        const float z = scale * xp[k] + shift;
        yp[k] = z * sigmoid(z);
      }
    }
    mean_out[ch] = mean;
    var_out[ch] = var;
    const double unbiased = count > 1.0 ? squares / (count - 1.0) : squares;
    run_mean[ch] = run_mean[ch] * keep + mean * (1.0f - keep);
    run_var[ch] = run_var[ch] * keep + static_cast<float>(unbiased) * (1.0f - keep);
  }
}

// With z = scale * x + shift the BatchNorm output and g = dy * silu'(z):
//   dbeta = sum g, dgamma = sum g * xhat, xhat = (x - mean) * invstd,
//   dx = scale / M * (M * g - dbeta - xhat * dgamma), M = N * H * W.
// The first pass stores g in dx and the second finishes dx in place, so silu'(z) (an exp
// and a division) is computed once per element, not once per pass.
void backward(const float *x, const float *gamma, const float *beta, float eps, const float *mean,
              const float *var, const float *dy, float *dx, float *dgamma, float *dbeta,
              const Dims &d) {
  const float count = static_cast<float>(d.n * d.hw);
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t ch = 0; ch < d.c; ++ch) {
    const float mu = mean[ch];
    const float invstd = 1.0f / std::sqrt(var[ch] + eps);
    const float scale = gamma[ch] * invstd;
    const float shift = beta[ch] - mu * scale;
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t img = 0; img < d.n; ++img) {
      const float *xp = d.plane(x, img, ch);
      const float *dyp = d.plane(dy, img, ch);
      float *gp = d.plane(dx, img, ch);
      float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
      for (int64_t k = 0; k < d.hw; ++k) {
        const float g = dyp[k] * silu_slope(scale * xp[k] + shift);
        gp[k] = g;
        s1 += g;
        s2 += g * (xp[k] - mu);
      }
      sum_g += s1;
      sum_gx += s2;
    }
    const float db = static_cast<float>(sum_g);
    const float dg = static_cast<float>(sum_gx) * invstd;
    dbeta[ch] = db;
    dgamma[ch] = dg;
    const float k_out = scale / count;
    const float k_x = dg * invstd;  // xhat * dgamma = (x - mean) * k_x
    for (int64_t img = 0; img < d.n; ++img) {
      const float *xp = d.plane(x, img, ch);
      float *dxp = d.plane(dx, img, ch);
#pragma omp simd
      for (int64_t k = 0; k < d.hw; ++k) {
        dxp[k] = k_out * (count * dxp[k] - db - (xp[k] - mu) * k_x);
      }
    }
  }
}

// Evaluation: y = silu(scale * x + shift) with the running statistics' scale and shift.
void inference(const float *x, const float *gamma, const float *beta, float eps, const float *mean,
               const float *var, float *y, const Dims &d) {
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t ch = 0; ch < d.c; ++ch) {
    const float scale = gamma[ch] / std::sqrt(var[ch] + eps);
    const float shift = beta[ch] - mean[ch] * scale;
    for (int64_t img = 0; img < d.n; ++img) {
      const float *xp = d.plane(x, img, ch);
      float *yp = d.plane(y, img, ch);
#pragma omp simd
      for (int64_t k = 0; k < d.hw; ++k) {
        const float z = scale * xp[k] + shift;
        yp[k] = z * sigmoid(z);
      }
    }
  }
}

bool checked(int nparam, int expected, const int *ndims, int64_t **shapes, const char **dtypes,
             Dims *d) {
  if (nparam != expected || ndims[0] != 4 || !all_float32(nparam, dtypes)) return false;
  d->n = shapes[0][0];
  d->c = shapes[0][1];
  d->hw = shapes[0][2] * shapes[0][3];
  return shapes[1][0] == d->c && shapes[2][0] == d->c;
}

}  // namespace

// Inputs x, gamma, beta, running mean and running variance (both updated in place),
// (eps, keep); outputs y, batch mean, batch variance (biased).
extern "C" int BatchNormSiluForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                    const char **dtypes, void *, void *) {
  Dims d;
  if (!checked(nparam, 9, ndims, shapes, dtypes, &d) || shapes[5][0] != 2) return 1;
  if (shapes[3][0] != d.c || shapes[4][0] != d.c) return 1;
  auto in = [&](int i) { return static_cast<const float *>(params[i]); };
  auto out = [&](int i) { return static_cast<float *>(params[i]); };
  forward(in(0), in(1), in(2), out(3), out(4), in(5)[0], in(5)[1], out(6), out(7), out(8), d);
  return 0;
}

// Inputs x, gamma, beta, running mean, running variance, (eps, keep); output y.
extern "C" int BatchNormSiluInfer(int nparam, void **params, int *ndims, int64_t **shapes,
                                  const char **dtypes, void *, void *) {
  Dims d;
  if (!checked(nparam, 7, ndims, shapes, dtypes, &d)) return 1;
  auto in = [&](int i) { return static_cast<const float *>(params[i]); };
  inference(in(0), in(1), in(2), in(5)[0], in(3), in(4), static_cast<float *>(params[6]), d);
  return 0;
}

// Inputs x, gamma, beta, (eps, keep), batch mean, batch variance, dy; outputs dx, dgamma,
// dbeta.
extern "C" int BatchNormSiluGrad(int nparam, void **params, int *ndims, int64_t **shapes,
                                 const char **dtypes, void *, void *) {
  Dims d;
  if (!checked(nparam, 10, ndims, shapes, dtypes, &d)) return 1;
  auto in = [&](int i) { return static_cast<const float *>(params[i]); };
  auto out = [&](int i) { return static_cast<float *>(params[i]); };
  backward(in(0), in(1), in(2), in(3)[0], in(4), in(5), in(6), out(7), out(8), out(9), d);
  return 0;
}
