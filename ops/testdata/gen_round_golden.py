# Regenerate round_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 ops/testdata/gen_round_golden.py > ops/testdata/round_golden.json
# The Round op's reference: float32 values (as their bits) and the bits of
# x.to(torch.bfloat16).float() and x.half().float(), on random values of
# every magnitude and on the hard cases (ties to even, the largest finite
# values, overflow, float16's subnormals and underflow, ±0, ±Inf, NaN); and
# the gradient autograd gives x through the cast for a cotangent dy
# (dy's low-precision cast, read back as float32).
import json
import numpy as np
import torch

torch.manual_seed(0)
rnd = torch.randn(200) * torch.exp2(torch.randint(-30, 20, (200,)).float())
hard = []
for base in [1.0, 3.0, 1000.0, 2.0 ** -20]:
    # halfway between two bfloat16s, and the float16 halfway points
    b = np.float32(base).view(np.uint32)
    hard += [np.uint32(b | 0x8000).view(np.float32), np.uint32(b | 0x18000).view(np.float32),
             np.uint32(b | 0x1000).view(np.float32), np.uint32(b | 0x3000).view(np.float32)]
hard += [65504.0, 65519.0, 65520.0, 65536.0, 3.3895e38, 3.4e38, 2.0 ** -24, 2.0 ** -25, 2.0 ** -26,
         1.5 * 2.0 ** -24, 6.1e-5, 1e-40, 0.0, -0.0, float("inf"), float("-inf"), float("nan"), -1.0000001]
x = torch.cat([rnd, torch.tensor(hard, dtype=torch.float32), -torch.tensor(hard, dtype=torch.float32)])
dy = torch.randn(x.shape) * 3


def bits(t):
    return t.numpy().view(np.uint32).tolist()


out = {"torch": torch.__version__, "x": bits(x), "dy": bits(dy)}
for name, dt in [("bf16", torch.bfloat16), ("fp16", torch.float16)]:
    xr = x.clone().requires_grad_(True)
    y = xr.to(dt)
    y.backward(dy.to(dt))
    out[name] = {"y": bits(y.detach().float()), "dx": bits(xr.grad)}
print(json.dumps(out))
