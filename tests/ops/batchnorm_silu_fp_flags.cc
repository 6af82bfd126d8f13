// Runs ops/kernels/batchnorm_silu.cc's three kernels (training forward, evaluation, backward)
// on ordinary inputs in this thread and prints, for each, the x86 floating-point flags they
// raised: "<kernel> <denormal operand 0|1> <underflow 0|1>". Built and run by
// tests/ops/test_batchnorm_silu.py with the library's own compiler flags.
//
// Why: a subnormal operand or result costs a microcode assist on Intel CPUs (~100x a normal
// operation); the kernels once multiplied every vector by one and ran 6x slower there.

#include <xmmintrin.h>

#include <cstdio>
#include <random>
#include <vector>

#include "batchnorm_silu.cc"
#include "threads.cc"

namespace {

const unsigned kDenormal = 0x02, kUnderflow = 0x10, kAllFlags = 0x3f;

void report(const char *kernel, unsigned csr) {
  std::printf("%s %d %d\n", kernel, (csr & kDenormal) ? 1 : 0, (csr & kUnderflow) ? 1 : 0);
}

}  // namespace

int main() {
  const int64_t n = 2, c = 6, h = 20, w = 20, m = n * c * h * w;
  std::mt19937 gen(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  // Channels with different scales and offsets, as a convolution's output has; gamma, beta
  // and the running statistics as a trained layer's.
  std::vector<float> x(m), dy(m), y(m), dx(m);
  std::vector<float> gamma(c), beta(c), run_mean(c), run_var(c), stats[6];
  for (auto &s : stats) s.resize(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    gamma[ch] = 0.5f + uniform(gen);
    beta[ch] = 2.0f * uniform(gen) - 1.0f;
    const float scale = 0.2f + 5.0f * uniform(gen), offset = 6.0f * uniform(gen) - 3.0f;
    run_mean[ch] = offset;
    run_var[ch] = scale * scale;
    for (int64_t img = 0; img < n; ++img) {
      for (int64_t k = 0; k < h * w; ++k) x[(img * c + ch) * h * w + k] = scale * normal(gen) + offset;
    }
  }
  for (auto &v : dy) v = normal(gen);
  float hyper[2] = {1e-3f, 0.97f};
  int64_t s4[4] = {n, c, h, w}, s1[1] = {c}, s2[1] = {2};
  const char *dtypes[11];
  for (auto &t : dtypes) t = "float32";

  {
    // the running statistics (inputs 3 and 4) are updated in place
    int64_t *shapes[9] = {s4, s1, s1, s1, s1, s2, s4, s1, s1};
    int ndims[9] = {4, 1, 1, 1, 1, 1, 4, 1, 1};
    void *p[9] = {x.data(),       gamma.data(), beta.data(), run_mean.data(), run_var.data(),
                  hyper,          y.data(),     stats[0].data(), stats[1].data()};
    _mm_setcsr(_mm_getcsr() & ~kAllFlags);
    if (BatchNormSiluForward(9, p, ndims, shapes, dtypes, nullptr, nullptr) != 0) return 1;
    report("forward", _mm_getcsr());
  }
  {
    int64_t *shapes[7] = {s4, s1, s1, s1, s1, s2, s4};
    int ndims[7] = {4, 1, 1, 1, 1, 1, 4};
    void *p[7] = {x.data(), gamma.data(), beta.data(), run_mean.data(), run_var.data(), hyper,
                  y.data()};
    _mm_setcsr(_mm_getcsr() & ~kAllFlags);
    if (BatchNormSiluInfer(7, p, ndims, shapes, dtypes, nullptr, nullptr) != 0) return 1;
    report("evaluation", _mm_getcsr());
  }
  {
    int64_t *shapes[10] = {s4, s1, s1, s2, s1, s1, s4, s4, s1, s1};
    int ndims[10] = {4, 1, 1, 1, 1, 1, 4, 4, 1, 1};
    void *p[10] = {x.data(),        gamma.data(), beta.data(), hyper,           stats[0].data(),
                   stats[1].data(), dy.data(),    dx.data(),   stats[4].data(), stats[5].data()};
    _mm_setcsr(_mm_getcsr() & ~kAllFlags);
    if (BatchNormSiluGrad(10, p, ndims, shapes, dtypes, nullptr, nullptr) != 0) return 1;
    report("backward", _mm_getcsr());
  }
  return 0;
}
