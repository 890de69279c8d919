# Regenerate precision_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/runner/testdata/gen_precision_golden.py > engine/runner/testdata/precision_golden.json
# precision_test.go's reference for train(precision = "bf16"): 20 SGD steps
# of the MNIST Net (without its dropouts, whose masks no two libraries
# draw alike) and of gpt_test.go's GPT, each in float32 and under CPU
# torch.autocast(dtype=torch.bfloat16), from the same parameters on the
# same batches. Inputs, targets and parameters come from formulas that
# precision_test.go computes bit for bit alike (float64 arithmetic, then
# float32), so the golden holds only the step losses. Also the dtype of
# every module output under autocast, which precision_test.go's plan
# check mirrors.
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_load import GPT

torch.set_num_threads(1)
STEPS = 20


def unit(i):
    # A value in [-0.5, 0.5) from an index: precision_test.go's unit.
    return ((i * 7919) % 1000) / 1000.0 - 0.5


def init_params(net):
    with torch.no_grad():
        for name, p in net.named_parameters():
            n = p.numel()
            if name.endswith(".bias") or p.dim() == 1:
                vals = [0.2 * unit(i + 13) for i in range(n)]
                if "ln" in name and name.endswith(".weight"):
                    vals = [1.0 + v for v in vals]
            else:
                fan_in = n // p.shape[0]
                vals = [2.0 * unit(i) / math.sqrt(fan_in) for i in range(n)]
            p.copy_(torch.tensor(np.array(vals, dtype=np.float64).astype(np.float32)).reshape(p.shape))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def mnist_data(n):
    # precision_test.go's mnistLike: a texture, and a bright row at the
    # label's place.
    y = np.array([(i * 7) % 10 for i in range(n)], dtype=np.int64)
    x = np.zeros((n, 1, 28, 28), dtype=np.float64)
    for i in range(n):
        for h in range(28):
            for w in range(28):
                x[i, 0, h, w] = ((i * 131 + h * 29 + w * 7) % 17) / 8.0 - 1.0
        x[i, 0, 2 * y[i] + 4, :] += 1.5
    return torch.tensor(x.astype(np.float32)), torch.tensor(y)


def gpt_data(n, t, v):
    x = np.array([[(i * 5 + j * 3 + (i * j) % 4) % v for j in range(t)] for i in range(n)], dtype=np.int64)
    y = np.array([[(x[i, j] * 2 + 1) % v for j in range(t)] for i in range(n)], dtype=np.int64)
    return torch.tensor(x), torch.tensor(y)


def train(make, x, y, batch, lr, momentum, loss_fn, bf16):
    net = make()
    init_params(net)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    losses = []
    for s in range(STEPS):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = net(xb)
            loss = loss_fn(out, yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def dtypes(make, x):
    net = make()
    seen = []
    for name, m in net.named_modules():
        if name:
            m.register_forward_hook(lambda m, i, o, name=name: seen.append(
                [name, str((o[0] if isinstance(o, tuple) else o).dtype).replace("torch.", "")]))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        net(x)
    return seen


out = {"torch": torch.__version__, "steps": STEPS}
mx, my = mnist_data(16 * STEPS)
nll = lambda o, t: F.nll_loss(o, t)
out["mnist"] = {"batch": 16, "lr": 0.05, "momentum": 0.5,
                "fp32": train(Net, mx, my, 16, 0.05, 0.5, nll, False),
                "bf16": train(Net, mx, my, 16, 0.05, 0.5, nll, True),
                "dtypes": dtypes(Net, mx[:2])}
V, T, D, H, L = 11, 6, 8, 2, 2
gx, gy = gpt_data(4 * STEPS, T, V)
ce = lambda o, t: F.cross_entropy(o.reshape(-1, V), t.reshape(-1))
make_gpt = lambda: GPT(V, T, D, H, L)
out["gpt"] = {"batch": 4, "lr": 0.1, "momentum": 0.0,
              "fp32": train(make_gpt, gx, gy, 4, 0.1, 0.0, ce, False),
              "bf16": train(make_gpt, gx, gy, 4, 0.1, 0.0, ce, True),
              "dtypes": dtypes(make_gpt, gx[:2])}
print(json.dumps(out))
