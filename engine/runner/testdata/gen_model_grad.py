# Regenerate model_grad_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/runner/testdata/gen_model_grad.py > engine/runner/testdata/model_grad_golden.json
# (the nll and cross_entropy cases were written before nll_silu; a rerun on
# another machine may move their float32 values in the last bits, within the
# test's 1e-6)
# The model is engine_test.go's tinyScript: conv(1→3, k3, pad 1) → relu →
# maxpool 2 → flatten → linear(48→4) → log_softmax, NLL loss; and the same
# without log_softmax under cross-entropy; and (nll_silu) the first with
# SiLU in place of ReLU. A batch of 5 samples.
import json
import torch
import torch.nn.functional as F

torch.manual_seed(0)
x = torch.randn(5, 1, 8, 8)
y = torch.tensor([0, 3, 1, 2, 3])
params = {
    "conv.weight": torch.randn(3, 1, 3, 3) * 0.5,
    "conv.bias": torch.randn(3) * 0.1,
    "fc.weight": torch.randn(4, 48) * 0.2,
    "fc.bias": torch.randn(4) * 0.1,
}
out = {"x": x.flatten().tolist(), "y": y.tolist(),
       "params": {k: {"shape": list(v.shape), "data": v.flatten().tolist()} for k, v in params.items()},
       "cases": {}}
for case in ["nll", "cross_entropy", "nll_silu"]:
    loss, act = case, F.relu
    if case == "nll_silu":
        loss, act = "nll", F.silu
    p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    h = F.conv2d(x, p["conv.weight"], p["conv.bias"], padding=1)
    h = F.max_pool2d(act(h), 2).flatten(1)
    h = F.linear(h, p["fc.weight"], p["fc.bias"])
    if loss == "nll":
        l = F.nll_loss(F.log_softmax(h, 1), y)
    else:
        l = F.cross_entropy(h, y)
    l.backward()
    out["cases"][case] = {"loss": l.item(), "grads": {k: v.grad.flatten().tolist() for k, v in p.items()}}
print(json.dumps(out))
