// optim.cu — optimizer steps, in place, as ops/optim.go (PyTorch 1.13's
// single-tensor SGD and Adam, with fused multiply-adds where PyTorch's CPU
// kernels use them). Built with -fmad=false so that only the explicit fmaf
// calls fuse.
#include "common.cuh"

// gorun_halted reports the halt flag of the update phase's kernels
// (kernels.h): set, they do nothing.
__device__ __forceinline__ bool gorun_halted(const float* halt) { return halt && *halt != 0.0f; }

GORUN_KERNEL gorun_step_verdict(float* v, int sticky) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float s = v[0], l = v[1];
  bool bad = !(s - s == 0.0f) || !(l - l == 0.0f); // NaN or ±Inf
  v[2] = (bad || (sticky && v[2] != 0.0f)) ? 1.0f : 0.0f;
}

GORUN_KERNEL gorun_sgd_step(float* param, const float* grad, float* buf, int n, float lr,
                            float momentum, float dampening, float weight_decay,
                            int nesterov, int step, const float* halt) {
  if (gorun_halted(halt)) return;
  float neg_lr = -lr, wd = weight_decay;
  bool decay = weight_decay != 0.0f;
  float mom = momentum, damp = (float)(1.0 - (double)dampening);
  bool first = step <= 1;
  bool has_mom = momentum != 0.0f;
  // Four floats at a time where aligned (common.cuh); buf only with momentum.
  gorun_update4(param, grad, has_mom ? buf : (float*)0, (float*)0, n,
                [=](float& p, float d, float& b, float&) {
                  if (decay) d = fmaf(wd, p, d); // d_p.add(param, alpha=wd)
                  if (has_mom) {
                    b = first ? d : fmaf(damp, d, b * mom); // buf.mul_(momentum).add_(d_p, alpha=1-dampening)
                    d = nesterov ? fmaf(mom, b, d) : b;     // d_p.add(buf, alpha=momentum)
                  }
                  p = fmaf(neg_lr, d, p); // param.add_(d_p, alpha=-lr)
                });
}

GORUN_KERNEL gorun_clip_grad_norm(float* x, const double* sq, int n, int s, float max_norm,
                                  const float* halt) {
  if (gorun_halted(halt)) return; // every thread of every block alike
  __shared__ double red[GORUN_RED];
  __shared__ double total;
  double v = 0;
  for (int j = threadIdx.x; j < s; j += blockDim.x) v += sq[j];
  v = gorun_block_sum(red, v);
  if (threadIdx.x == 0) total = v;
  __syncthreads();
  double q = (double)max_norm / (sqrt(total) + 1e-6);
  float coef = (float)(q >= 1 ? 1.0 : q); // min(q, 1), a NaN kept as Go's min
  GORUN_FOR(i, n) { x[i] *= coef; }
}

GORUN_KERNEL gorun_adam_step(float* param, const float* grad, float* m, float* v, int n,
                             float lr, float beta1, float beta2, float eps,
                             float weight_decay, int step, int decoupled, const float* halt) {
  if (gorun_halted(halt)) return;
  double t = (double)step;
  double bc1 = 1.0 - pow((double)beta1, t);
  double bc2 = 1.0 - pow((double)beta2, t);
  float neg_step = (float)(-((double)lr / bc1));
  float bc2_sqrt = (float)sqrt(bc2);
  float b1 = beta1, c1 = (float)(1.0 - (double)beta1);
  float b2 = beta2, c2 = (float)(1.0 - (double)beta2);
  bool decay = weight_decay != 0.0f && !decoupled;
  float shrink = (float)(1.0 - (double)lr * (double)weight_decay);
  // Four floats at a time where aligned (common.cuh).
  gorun_update4(param, grad, m, v, n, [=](float& p, float g, float& mi, float& vi) {
    if (decay) g = fmaf(weight_decay, p, g); // grad.add(param, alpha=wd)
    if (decoupled) p *= shrink;              // AdamW: param.mul_(1 - lr * weight_decay)
    mi = fmaf(c1, g, mi * b1);               // exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
    vi = fmaf(c2 * g, g, vi * b2);           // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
    float denom = sqrtf(vi) / bc2_sqrt + eps; // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    p = p + neg_step * mi / denom;            // param.addcdiv_(exp_avg, denom, value=-step_size)
  });
}
