// 1x1 convolutions (stride 1, no bias) for MindSpore's CPU `ops.Custom(func_type="aot")`:
// the forward pass and the input gradient.
//
// Why: apart from the stem, every dense convolution of YOLOX-nano is a 1x1 (the CSP layers,
// the pointwise half of each DWConv, the head's stems). MindSpore runs them on oneDNN held
// to AVX2 (engine/device.py: uncapped it picks a reference path on AVX-512 CPUs), as GEMMs
// on plain NCHW; here each is a register-blocked product in this CPU's own vector width.
// The weight gradient stays MindSpore's (ops/pointwise_conv.py): a kernel of the same form
// (4 x 4 channel pairs summed over pixel chunks) made the training step no faster.
//
// Layouts (float32, contiguous): x [N, C, H, W] (P = H * W pixels per plane), w [O, C, 1, 1],
// y [N, O, H, W], y[n, o, p] = sum over c of w[o, c] x[n, c, p]. The input gradient is the
// same product with the weight transposed, dx[n, c, p] = sum over o of w[o, c] dy[n, o, p].
//
// Arithmetic: float32 multiply-adds, each output's sum over the channels in channel order
// (oneDNN's GEMM sums in an order of its own, so values agree to float32 rounding). Blocks
// of pixels of each image are split over msdet_threads() threads (threads.h); no output
// depends on the thread count.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "aot.h"
#include "threads.h"

namespace {

#ifdef __AVX512F__
constexpr int kLanes = 16;  // floats per vector
constexpr int kOuts = 8;    // output channels per block: 8 x 2 accumulators of 32 registers
#else
constexpr int kLanes = 8;
constexpr int kOuts = 6;  // 6 x 2 accumulators of 16 registers
#endif
constexpr int kVecs = 2;  // vectors of pixels per block
typedef float vec __attribute__((vector_size(kLanes * sizeof(float))));

inline vec load(const float *p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(float *p, const vec &v) { std::memcpy(p, &v, sizeof v); }

// The weight as [outs, ins] (m row-major [outs, ins], or [ins, outs] when `transposed`) ->
// blocks of kOuts output channels, [block][ins][kOuts], zero-padded.
std::vector<float> pack(const float *m, int64_t outs, int64_t ins, bool transposed) {
  const int64_t blocks = (outs + kOuts - 1) / kOuts;
  std::vector<float> packed(blocks * ins * kOuts, 0.0f);
  for (int64_t o = 0; o < outs; ++o) {
    for (int64_t c = 0; c < ins; ++c) {
      const float value = transposed ? m[c * outs + o] : m[o * ins + c];
      packed[((o / kOuts) * ins + c) * kOuts + o % kOuts] = value;
    }
  }
  return packed;
}

// out[o, p0 .. p0 + VECS * kLanes) for every output channel o of one image: in [ins, P],
// out [outs, P], the weight packed by pack().
template <int VECS>
void block(const float *in, const float *packed, float *out, int64_t ins, int64_t outs,
           int64_t pixels, int64_t p0) {
  for (int64_t o0 = 0; o0 < outs; o0 += kOuts) {
    const float *wb = packed + (o0 / kOuts) * ins * kOuts;
    vec acc[kOuts][VECS] = {};
    for (int64_t c = 0; c < ins; ++c, wb += kOuts) {
      vec v[VECS];
      for (int j = 0; j < VECS; ++j) v[j] = load(in + c * pixels + p0 + j * kLanes);
#pragma GCC unroll 8
      for (int i = 0; i < kOuts; ++i) {
        for (int j = 0; j < VECS; ++j) acc[i][j] += wb[i] * v[j];
      }
    }
    const int64_t rows = std::min<int64_t>(kOuts, outs - o0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < VECS; ++j) store(out + (o0 + i) * pixels + p0 + j * kLanes, acc[i][j]);
    }
  }
}

// The pixels of a plane that are not a whole vector: one scalar sum per output.
void tail(const float *in, const float *packed, float *out, int64_t ins, int64_t outs,
          int64_t pixels, int64_t p) {
  for (int64_t o = 0; o < outs; ++o) {
    const float *wb = packed + (o / kOuts) * ins * kOuts + o % kOuts;
    float sum = 0.0f;
    for (int64_t c = 0; c < ins; ++c) sum += wb[c * kOuts] * in[c * pixels + p];
    out[o * pixels + p] = sum;
  }
}

// out[n, :, :] = packed-weight product of in[n, :, :] for every image: in [n, ins, P],
// out [n, outs, P].
void product(const float *in, const std::vector<float> &packed, float *out, int64_t n,
             int64_t ins, int64_t outs, int64_t pixels) {
  const int64_t width = kVecs * kLanes;
  const int64_t blocks = pixels / width;                 // whole blocks of kVecs vectors
  const int64_t singles = (pixels - blocks * width) / kLanes;  // then whole vectors
  const int64_t vectorised = blocks * width + singles * kLanes;
  const int64_t items = blocks + singles + (vectorised < pixels ? 1 : 0);
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t t = 0; t < n * items; ++t) {
    const int64_t image = t / items, item = t % items;
    const float *src = in + image * ins * pixels;
    float *dst = out + image * outs * pixels;
    if (item < blocks) {
      block<kVecs>(src, packed.data(), dst, ins, outs, pixels, item * width);
    } else if (item < blocks + singles) {
      const int64_t p0 = blocks * width + (item - blocks) * kLanes;
      block<1>(src, packed.data(), dst, ins, outs, pixels, p0);
    } else {
      for (int64_t p = vectorised; p < pixels; ++p) {
        tail(src, packed.data(), dst, ins, outs, pixels, p);
      }
    }
  }
}

struct Geometry {
  int64_t n, c, o, pixels;
};

// a [N, C, H, W] and w [O, C, 1, 1] (the first operand's channels are w's second axis when
// `by_input`, else its first); fills g with the input's channel count as c.
bool geometry(const int64_t *a, const int64_t *w, bool by_input, Geometry *g) {
  if (a[0] < 1 || a[2] < 1 || a[3] < 1 || w[0] < 1 || w[1] < 1 || w[2] != 1 || w[3] != 1) {
    return false;
  }
  if (a[1] != (by_input ? w[1] : w[0])) return false;
  *g = Geometry{a[0], w[1], w[0], a[2] * a[3]};
  return true;
}

// b [N, channels, H, W] with a's batch and plane.
bool same_planes(const int64_t *a, const int64_t *b, int64_t channels) {
  return b[0] == a[0] && b[1] == channels && b[2] == a[2] && b[3] == a[3];
}

bool four_dim_float32(int nparam, int *ndims, const char **dtypes) {
  for (int i = 0; i < nparam; ++i) {
    if (ndims[i] != 4) return false;
  }
  return all_float32(nparam, dtypes);
}

}  // namespace

// Inputs: x, w; output y.
extern "C" int PointwiseConvForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                    const char **dtypes, void *, void *) {
  Geometry g;
  if (nparam != 3 || !four_dim_float32(nparam, ndims, dtypes)) return 1;
  if (!geometry(shapes[0], shapes[1], true, &g) || !same_planes(shapes[0], shapes[2], g.o)) {
    return 1;
  }
  const std::vector<float> packed = pack(static_cast<const float *>(params[1]), g.o, g.c, false);
  product(static_cast<const float *>(params[0]), packed, static_cast<float *>(params[2]), g.n,
          g.c, g.o, g.pixels);
  return 0;
}

// Inputs: dy, w; output dx.
extern "C" int PointwiseConvInputGrad(int nparam, void **params, int *ndims, int64_t **shapes,
                                      const char **dtypes, void *, void *) {
  Geometry g;
  if (nparam != 3 || !four_dim_float32(nparam, ndims, dtypes)) return 1;
  if (!geometry(shapes[0], shapes[1], false, &g) || !same_planes(shapes[0], shapes[2], g.c)) {
    return 1;
  }
  const std::vector<float> packed = pack(static_cast<const float *>(params[1]), g.c, g.o, true);
  product(static_cast<const float *>(params[0]), packed, static_cast<float *>(params[2]), g.n,
          g.o, g.c, g.pixels);
  return 0;
}
