# Regenerate lowp_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 ops/testdata/gen_lowp_golden.py > ops/testdata/lowp_golden.json
# The reference for the kernels that round intermediates under bf16
# (ops/precision.go): PyTorch's CPU kernels on bfloat16 tensors for
# log_softmax, softmax's gradient, log_softmax's gradient and GELU's tanh
# form and its gradient, on random bfloat16 inputs (rows of 10 for the
# softmaxes). Values as float32 bits.
import json
import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)


def bits(t):
    return t.detach().float().numpy().view(np.uint32).flatten().tolist()


x = (torch.randn(30, 10) * 3).bfloat16().requires_grad_(True)
dy = torch.randn(30, 10).bfloat16()
ls = F.log_softmax(x, 1)
ls.backward(dy)
out = {"torch": torch.__version__, "k": 10,
       "log_softmax": {"x": bits(x), "y": bits(ls)},
       "log_softmax_grad": {"dy": bits(dy), "y": bits(ls), "dx": bits(x.grad)}}
x.grad = None
sm = F.softmax(x, 1)
sm.backward(dy)
out["softmax_grad"] = {"dy": bits(dy), "y": bits(sm), "dx": bits(x.grad)}
g = (torch.randn(300) * 2).bfloat16().requires_grad_(True)
gdy = torch.randn(300).bfloat16()
gy = F.gelu(g, approximate="tanh")
gy.backward(gdy)
out["gelu_tanh"] = {"x": bits(g), "y": bits(gy)}
out["gelu_tanh_grad"] = {"dy": bits(gdy), "x": bits(g), "dx": bits(g.grad)}
print(json.dumps(out))
