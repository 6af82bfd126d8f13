// Float32 functions for msdet's kernels, written so that the loops calling them vectorise
// without -ffast-math (no library call, no branch a vector cannot take), shared by
// batchnorm_silu.cc and class_bce.cc.
#pragma once

#include <cstdint>
#include <cstring>

// exp(x) in float32, written so that the loops calling it vectorise without -ffast-math:
// x = n * ln2 + r with |r| <= ln2 / 2 (ln2 split in two for an exact product), e^r by its
// degree-7 Taylor polynomial (truncation < 1.3e-8 relative), 2^n put into the exponent bits.
// Rounding to nearest uses the 1.5 * 2^23 trick, which needs no library call.
//
// x is clamped to [-87, 89]: e^-87 is still a normal float, and from x = 88.38 on n is 128,
// whose exponent bits are +inf's, so the result is +inf (float's own overflow is at 88.72).
// Why not clamp at 88: then sigmoid() of very negative inputs is 1 / (1 + e^88) = 6e-39, a
// subnormal, and GCC compiles `z * sigmoid(z)` with the clamped branches folded to constants
// and multiplied into every lane before a blend: each vector of ordinary inputs then
// multiplied by that subnormal, which Intel CPUs handle in microcode. It made
// batchnorm_silu.cc's forward and evaluation kernels 6x slower on an Intel Xeon (AMD's Zen
// handles subnormals in hardware). With +inf the folded constant is sigmoid = 0, and no lane
// ever sees a subnormal on ordinary inputs (tests/ops/test_batchnorm_silu.py checks the FP
// flags). In msdet's graph-mode training step the old forward showed no such cost
// (subnormals were flushed there); kernel_choice's benchmark and callers outside MindSpore
// paid it in full.
inline float exp_f32(float x) {
  x = x < -87.0f ? -87.0f : (x > 89.0f ? 89.0f : x);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float sigmoid(float z) { return 1.0f / (1.0f + exp_f32(-z)); }

// log(1 + z) for z in [0, 1] (what the stable BCE adds: z = exp(-|x|)), as
// 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...) with s = z / (2 + z) <= 1/3: eight terms leave a
// truncation below 2e-9 relative. Below 2^-24, log(1 + z) is z to float precision, and the
// series is evaluated at 2^-24 instead of z: its powers of a smaller z would be subnormal,
// which Intel CPUs handle in microcode (see exp_f32), even in lanes whose result is not kept.
inline float log1p_unit(float z) {
  const float tiny = 5.9604645e-08f;  // 2^-24
  const float zs = z < tiny ? tiny : z;
  const float s = zs / (2.0f + zs);
  const float s2 = s * s;
  float p = 1.0f / 15.0f;
  p = p * s2 + 1.0f / 13.0f;
  p = p * s2 + 1.0f / 11.0f;
  p = p * s2 + 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  const float series = 2.0f * s * p;
  return z < tiny ? z : series;
}

// log(v) for positive normal v (what the callers pass: they clamp below the smallest normal
// float themselves): v = 2^e * m with m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(s) with
// s = (m - 1) / (m + 1), |s| <= 0.172, by five terms of its series (truncation below 1e-12
// relative), and e * ln2 added with ln2 split in two so the product is exact.
inline float log_f32(float v) {
  int32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  int32_t e = ((bits >> 23) & 0xff) - 127;
  int32_t mbits = (bits & 0x007fffff) | 0x3f800000;  // the mantissa, as a float in [1, 2)
  float m;
  std::memcpy(&m, &mbits, sizeof(m));
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = high ? e + 1 : e;
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  float p = 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  const float ef = static_cast<float>(e);
  return ef * 0.693145751953125f + (ef * 1.428606765330187e-06f + 2.0f * s * p);
}
