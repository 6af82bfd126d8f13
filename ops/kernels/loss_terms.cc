// The four terms of the YOLOX loss, summed over the batch, as one operator each way, for
// MindSpore's CPU `ops.Custom(func_type="aot")`.
//
// Why: on MindSpore's operators the terms take ~60 operators per step (slices of the head's
// output and their zero-filled gradients, the foreground boxes' decoding and IoU, the
// objectness and class BCEs, the L1 term, four ReduceSums) for ~300 foreground anchors and
// one BCE per anchor. Here the forward reads the head's output once, the
// backward writes its gradient once.
//
// Semantics (ops/loss_terms.py, the operators' path it replaces): for anchor r = (b, a)
// with raw output p = raw[r] (box regression p0..p3, objectness logit p4, class logits
// p5..), grid cell (gx, gy) = grids[a], stride s = strides[a], matched box
// (tx, ty, tw, th) = box_target[r], foreground weight f = fg[r], class g = cls[r], IoU
// target u = iou[r]:
//   obj  = sum_r bce(p4, f)
//   cls  = sum_r f * sum_c bce(p5+c, t_c),  t_c = u if c == g else 0
// and over the foreground anchors (f > 0.5), with the predicted box
// (px, py, pw, ph) = ((p0 + gx) s, (p1 + gy) s, exp(p2) s, exp(p3) s):
//   iou  = sum_r 1 - IoU(pred, target)^2  (IoU as ops/boxes.aligned_iou_cxcywh: eps 1e-16)
//   l1   = sum_r |p0 - (tx/s - gx)| + |p1 - (ty/s - gy)|
//                + |p2 - log(tw/s + 1e-8)| + |p3 - log(th/s + 1e-8)|
// bce(x, t) = max(x, 0) - x t + log(1 + exp(-|x|)). The backward is the gradient of
// dsums . (iou, obj, cls, l1) with respect to raw (the targets get none: the loss detaches
// them); on a tie of a box edge the gradient goes to the target's edge (none to the
// prediction), and where the boxes do not overlap along an axis none flows through the
// intersection (ReLU's gradient at 0, as on the operators). Sums are taken in double and
// rounded once; the box geometry is computed in double; exp and log1p are fast_math.h's:
// the result is within float rounding of the operators' path, not its bits.
//
// Layouts (contiguous): raw, draw [B, A, N] float32 (N = 5 + classes); grids [A, 2],
// strides [A], box_target [B, A, 4], fg, iou [B, A] float32; cls [B, A] int32; sums, dsums
// [4] float32 in the order (iou, obj, cls, l1). Anchors are split over msdet_threads()
// threads (threads.h).

#include <cmath>
#include <cstdint>

#include "aot.h"
#include "fast_math.h"
#include "threads.h"

namespace {

constexpr double kIouEps = 1e-16;
constexpr double kLogEps = 1e-8;

struct Inputs {
  const float *raw, *grids, *strides, *box_target, *fg, *iou;
  const int32_t *cls;
  int64_t batch, anchors, width;
};

// Checks the seven inputs' dtypes and shapes; fills `in`.
bool read_inputs(void **params, int *ndims, int64_t **shapes, const char **dtypes, Inputs *in) {
  for (int k = 0; k < 7; ++k) {
    if (!dtype_is(dtypes[k], k == 5 ? "int32" : "float32")) return false;
  }
  if (ndims[0] != 3 || ndims[1] != 2 || ndims[2] != 1 || ndims[3] != 3) return false;
  const int64_t b = shapes[0][0], a = shapes[0][1], n = shapes[0][2];
  if (n < 6 || shapes[1][0] != a || shapes[1][1] != 2 || shapes[2][0] != a ||
      shapes[3][0] != b || shapes[3][1] != a || shapes[3][2] != 4)
    return false;
  for (int k = 4; k < 7; ++k) {
    if (ndims[k] != 2 || shapes[k][0] != b || shapes[k][1] != a) return false;
  }
  in->raw = static_cast<const float *>(params[0]);
  in->grids = static_cast<const float *>(params[1]);
  in->strides = static_cast<const float *>(params[2]);
  in->box_target = static_cast<const float *>(params[3]);
  in->fg = static_cast<const float *>(params[4]);
  in->cls = static_cast<const int32_t *>(params[5]);
  in->iou = static_cast<const float *>(params[6]);
  in->batch = b;
  in->anchors = a;
  in->width = n;
  return true;
}

inline float bce(float x, float t) {
  const float abs_x = x < 0.0f ? -x : x;
  return ((x > 0.0f ? x : 0.0f) - x * t) + log1p_unit(exp_f32(-abs_x));
}

// One foreground anchor's box: its decoded prediction, its L1 targets, and the IoU with
// its matched box, with what the gradient needs.
struct Box {
  double p[4];       // px, py, pw, ph
  double l1t[4];     // the L1 term's targets in the regression's units
  double wx, wy;     // the intersection's sides (0 where the boxes miss along an axis)
  bool pred_lo[2];   // the intersection's low edge is the prediction's (x, y)
  bool pred_hi[2];   // its high edge is the prediction's
  double inter, denom, value;  // intersection, union + eps, IoU
};

Box box_of(const Inputs &in, int64_t r, const float *reg) {
  const int64_t a = r % in.anchors;
  const double s = in.strides[a];
  const double g[2] = {in.grids[2 * a], in.grids[2 * a + 1]};
  const float *t = in.box_target + 4 * r;
  Box box;
  box.p[0] = (reg[0] + g[0]) * s;
  box.p[1] = (reg[1] + g[1]) * s;
  box.p[2] = static_cast<double>(exp_f32(reg[2])) * s;
  box.p[3] = static_cast<double>(exp_f32(reg[3])) * s;
  for (int k = 0; k < 2; ++k) {
    box.l1t[k] = t[k] / s - g[k];
    box.l1t[k + 2] = log_f32(static_cast<float>(t[k + 2] / s + kLogEps));
  }
  double side[2];
  for (int k = 0; k < 2; ++k) {
    const double plo = box.p[k] - 0.5 * box.p[k + 2], phi = box.p[k] + 0.5 * box.p[k + 2];
    const double tlo = t[k] - 0.5 * static_cast<double>(t[k + 2]);
    const double thi = t[k] + 0.5 * static_cast<double>(t[k + 2]);
    box.pred_lo[k] = plo > tlo;
    box.pred_hi[k] = phi < thi;
    const double extent = (box.pred_hi[k] ? phi : thi) - (box.pred_lo[k] ? plo : tlo);
    side[k] = extent > 0.0 ? extent : 0.0;
  }
  box.wx = side[0];
  box.wy = side[1];
  box.inter = side[0] * side[1];
  const double area_t = static_cast<double>(t[2]) * t[3];
  box.denom = box.p[2] * box.p[3] + area_t - box.inter + kIouEps;
  box.value = box.inter / box.denom;
  return box;
}

}  // namespace

// Inputs: raw, grids, strides, box_target, fg, cls, iou; output sums [4].
extern "C" int LossTermsForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                const char **dtypes, void *, void *) {
  Inputs in;
  if (nparam != 8 || !read_inputs(params, ndims, shapes, dtypes, &in) ||
      !dtype_is(dtypes[7], "float32") || elements(ndims[7], shapes[7]) != 4)
    return 1;
  const int64_t rows = in.batch * in.anchors, classes = in.width - 5;
  double iou_sum = 0.0, obj_sum = 0.0, cls_sum = 0.0, l1_sum = 0.0;
#pragma omp parallel for schedule(static) num_threads(msdet_threads()) \
    reduction(+ : iou_sum, obj_sum, cls_sum, l1_sum)
  for (int64_t r = 0; r < rows; ++r) {
    const float *p = in.raw + r * in.width;
    const float f = in.fg[r];
    obj_sum += bce(p[4], f);
    if (f == 0.0f) continue;
    const float *x = p + 5;
    const int32_t g = in.cls[r];
    const float u = in.iou[r];
    double row = 0.0;
#pragma omp simd reduction(+ : row)
    for (int64_t c = 0; c < classes; ++c) row += bce(x[c], c == g ? u : 0.0f);
    cls_sum += static_cast<double>(static_cast<float>(row) * f);
    if (f <= 0.5f) continue;
    const Box box = box_of(in, r, p);
    iou_sum += 1.0 - box.value * box.value;
    for (int k = 0; k < 4; ++k) l1_sum += std::fabs(p[k] - box.l1t[k]);
  }
  float *sums = static_cast<float *>(params[7]);
  sums[0] = static_cast<float>(iou_sum);
  sums[1] = static_cast<float>(obj_sum);
  sums[2] = static_cast<float>(cls_sum);
  sums[3] = static_cast<float>(l1_sum);
  return 0;
}

// Inputs: raw, grids, strides, box_target, fg, cls, iou, dsums [4]; output draw [B, A, N].
extern "C" int LossTermsGrad(int nparam, void **params, int *ndims, int64_t **shapes,
                             const char **dtypes, void *, void *) {
  Inputs in;
  if (nparam != 9 || !read_inputs(params, ndims, shapes, dtypes, &in) ||
      !dtype_is(dtypes[7], "float32") || elements(ndims[7], shapes[7]) != 4 ||
      !dtype_is(dtypes[8], "float32") || elements(ndims[8], shapes[8]) != elements(3, shapes[0]))
    return 1;
  const float *dsums = static_cast<const float *>(params[7]);
  float *draw = static_cast<float *>(params[8]);
  const int64_t rows = in.batch * in.anchors, classes = in.width - 5;
  const float d_iou = dsums[0], d_obj = dsums[1], d_cls = dsums[2], d_l1 = dsums[3];
#pragma omp parallel for schedule(static) num_threads(msdet_threads())
  for (int64_t r = 0; r < rows; ++r) {
    const float *p = in.raw + r * in.width;
    float *dp = draw + r * in.width;
    const float f = in.fg[r];
    dp[4] = (sigmoid(p[4]) - f) * d_obj;
    const float *x = p + 5;
    float *dx = dp + 5;
    const int32_t g = in.cls[r];
    const float u = in.iou[r];
    const float scale = d_cls * f;
#pragma omp simd
    for (int64_t c = 0; c < classes; ++c) dx[c] = (sigmoid(x[c]) - (c == g ? u : 0.0f)) * scale;
    if (!(f > 0.5f)) {
      for (int k = 0; k < 4; ++k) dp[k] = 0.0f;
      continue;
    }
    const Box box = box_of(in, r, p);
    // d(1 - IoU^2) = -2 IoU dIoU; IoU = I / D with D = Ap + At - I + eps.
    const double d_value = -2.0 * box.value * d_iou;
    const double d_inter = d_value * (1.0 / box.denom + box.inter / (box.denom * box.denom));
    const double d_area_p = -d_value * box.inter / (box.denom * box.denom);
    const double d_side[2] = {d_inter * box.wy, d_inter * box.wx};
    const double side[2] = {box.wx, box.wy};
    const double s = in.strides[r % in.anchors];
    for (int k = 0; k < 2; ++k) {
      double d_centre = 0.0, d_size = 0.0;  // with respect to p[k], p[k + 2]
      if (side[k] > 0.0) {
        const double hi = box.pred_hi[k] ? 1.0 : 0.0, lo = box.pred_lo[k] ? 1.0 : 0.0;
        d_centre = d_side[k] * (hi - lo);
        d_size = d_side[k] * 0.5 * (hi + lo);
      }
      d_size += d_area_p * box.p[k == 0 ? 3 : 2];
      const double l1_centre = p[k] - box.l1t[k], l1_size = p[k + 2] - box.l1t[k + 2];
      const double sign_c = (l1_centre > 0.0) - (l1_centre < 0.0);
      const double sign_s = (l1_size > 0.0) - (l1_size < 0.0);
      // px = (p0 + gx) s: dpx/dp0 = s; pw = exp(p2) s: dpw/dp2 = pw.
      dp[k] = static_cast<float>(d_centre * s + d_l1 * sign_c);
      dp[k + 2] = static_cast<float>(d_size * box.p[k + 2] + d_l1 * sign_s);
    }
  }
  return 0;
}
