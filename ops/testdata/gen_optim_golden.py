#!/usr/bin/env python3
"""Writes optim_golden.json: torch.optim.SGD, torch.optim.Adam and
torch.optim.AdamW (PyTorch 1.13, single-tensor code path) run for a few steps
on a fixed small case, in float32 and float64. ops/optim_test.go checks
SGDStep, AdamStep and AdamWStep against it.

Regenerate (from the repository root):

    /usr/bin/python3 ops/testdata/gen_optim_golden.py > ops/testdata/optim_golden.json
"""
import json
import re

import torch

STEPS = 5
torch.manual_seed(1234)
# Magnitudes from 1e-5 to 10, so that Adam's eps matters for some elements.
scale = torch.tensor([1.0, 0.1, 1e-3, 1e-5, 10.0, 3.0, 0.5])
param0 = (torch.rand(7) * 2 - 1) * scale
grads = [(torch.rand(7) * 2 - 1) * scale for _ in range(STEPS)]

SGD = dict(momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False)
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
CASES = [
    ("sgd", "sgd", dict(SGD, lr=0.1)),
    ("sgd_weight_decay", "sgd", dict(SGD, lr=0.1, weight_decay=0.05)),
    ("sgd_momentum", "sgd", dict(SGD, lr=0.01, momentum=0.5)),
    ("sgd_momentum_dampening", "sgd", dict(SGD, lr=0.05, momentum=0.9, dampening=0.3)),
    ("sgd_nesterov", "sgd", dict(SGD, lr=0.1, momentum=0.9, nesterov=True)),
    ("sgd_nesterov_weight_decay", "sgd", dict(SGD, lr=0.03, momentum=0.8, nesterov=True, weight_decay=1e-2)),
    ("adam", "adam", dict(ADAM, lr=1e-3)),
    ("adam_weight_decay", "adam", dict(ADAM, lr=1e-2, weight_decay=0.1)),
    ("adam_betas_eps", "adam", dict(ADAM, lr=0.1, betas=(0.8, 0.99), eps=1e-6)),
    ("adamw", "adamw", dict(ADAM, lr=1e-3, weight_decay=1e-2)),
    ("adamw_no_decay", "adamw", dict(ADAM, lr=1e-2, weight_decay=0.0)),
    ("adamw_strong_decay", "adamw", dict(ADAM, lr=0.1, weight_decay=0.5, betas=(0.8, 0.99), eps=1e-6)),
]


def run(kind, hp, dtype):
    p = param0.to(dtype).clone().requires_grad_()
    if kind == "sgd":
        opt = torch.optim.SGD([p], foreach=False, **hp)
    elif kind == "adam":
        opt = torch.optim.Adam([p], foreach=False, **hp)
    else:
        opt = torch.optim.AdamW([p], foreach=False, **hp)
    out = []
    for g in grads:
        p.grad = g.to(dtype).clone()
        opt.step()
        out.append(p.detach().tolist())
    return out


cases = []
for name, kind, hp in CASES:
    attrs = dict(lr=hp["lr"], weight_decay=hp["weight_decay"])
    if kind == "sgd":
        attrs.update(momentum=hp["momentum"], dampening=hp["dampening"], nesterov=hp["nesterov"])
    else:
        attrs.update(beta1=hp["betas"][0], beta2=hp["betas"][1], eps=hp["eps"])
    cases.append(dict(
        name=name, kind=kind, attrs=attrs,
        float32=run(kind, hp, torch.float32),
        float64=run(kind, hp, torch.float64),
    ))

text = json.dumps(dict(
    torch=torch.__version__,
    param=param0.tolist(),  # float32 values, exact in float64
    grads=[g.tolist() for g in grads],
    cases=cases,
), indent=1)
# One number list per line: small, and diffs stay readable.
print(re.sub(r"\[[^\[\]{}]*\]", lambda m: re.sub(r"\s+", "", m.group(0)), text))
