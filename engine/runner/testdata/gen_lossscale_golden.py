# Regenerate lossscale_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/runner/testdata/gen_lossscale_golden.py > engine/runner/testdata/lossscale_golden.json
# The reference for train(precision = "fp16")'s dynamic loss scaling
# (precision_test.go's TestFP16LossScaleMatchesGradScaler): PyTorch's
# GradScaler with its defaults (init_scale 2**16, growth_factor 2,
# backoff_factor 0.5, growth_interval 2000) driven for STEPS steps of a
# small model, with inf injected into a gradient at the steps OVERFLOW;
# the scale each step ran under and the steps it skipped.
#
# PyTorch 1.13's GradScaler runs on CUDA tensors only: its Python code is
# used as it is (unscale_, step, update), with the loss scaled by hand
# (scale() asserts a CUDA tensor, as _MultiDeviceReplicator does, which a
# subclass without the assertion replaces) and its two CUDA kernels given as
# Python transcriptions of aten/src/ATen/native/cuda/AmpKernels.cu
# (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_).
import json
from unittest import mock

import torch
from torch.cuda.amp import grad_scaler

STEPS = 2012
OVERFLOW = [1, 2, 5, 2009]


def non_finite_check_and_unscale(grads, found_inf, inv_scale):
    # AmpKernels.cu: found_inf = 1 if any gradient holds inf or NaN; every
    # gradient multiplied by inv_scale.
    for g in grads:
        if not torch.isfinite(g).all():
            found_inf.fill_(1.0)
        g.mul_(inv_scale)


def update_scale(current_scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    # AmpKernels.cu's amp_update_scale_cuda_kernel.
    if found_inf.item():
        current_scale.mul_(backoff_factor)
        growth_tracker.fill_(0)
    else:
        successful = growth_tracker.item() + 1
        if successful == growth_interval:
            new_scale = torch.tensor(current_scale.item() * growth_factor, dtype=torch.float32)
            if torch.isfinite(new_scale):
                current_scale.fill_(new_scale.item())
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return current_scale


class Replicator(grad_scaler._MultiDeviceReplicator):
    # The same, without its assertion that the tensor is on a GPU.
    def __init__(self, master_tensor):
        self.master = master_tensor
        self._per_device_tensors = {}


torch._amp_foreach_non_finite_check_and_unscale_ = non_finite_check_and_unscale
torch._amp_update_scale_ = update_scale
grad_scaler._MultiDeviceReplicator = Replicator

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with mock.patch("torch.cuda.is_available", return_value=True):
    scaler = torch.cuda.amp.GradScaler()  # enabled: its code runs on CPU tensors with the kernels above
scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
scales, skipped = [], []
for step in range(STEPS):
    opt.zero_grad()
    x = torch.randn(2, 4) * 0.01
    loss = torch.nn.functional.mse_loss(model(x), torch.zeros(2, 1))
    scales.append(scaler.get_scale())
    (loss * scaler._scale).backward()
    if step in OVERFLOW:
        model.weight.grad[0, 0] = float("inf")
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    skipped.append(all(torch.equal(b, p) for b, p in zip(before, model.parameters())))
    scaler.update()
print(json.dumps({"torch": torch.__version__, "defaults": {
    "init_scale": scaler._init_scale, "growth_factor": scaler._growth_factor,
    "backoff_factor": scaler._backoff_factor, "growth_interval": scaler._growth_interval},
    "overflow": OVERFLOW, "scales": scales, "skipped": [i for i, s in enumerate(skipped) if s]}))
