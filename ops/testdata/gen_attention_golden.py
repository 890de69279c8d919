#!/usr/bin/env python3
"""Writes attention_golden.json: PyTorch 1.13's float64 values of fused
attention (ops.Attention, ops.AttentionGrad) computed the explicit way,
softmax(q·kᵀ/√dh + mask)·v and its autograd (1.13 has no
F.scaled_dot_product_attention), on qkv packed [N, T, 3, H, dh] as
nn.MultiheadAttention's in_proj writes it.

The inputs are not stored: qkv[i] = 1.5·sin(1.3·i + 0.5) and
do[i] = cos(0.7·i + 0.2) over the flat index i, which ops/attention_test.go
computes the same way. Stored: the output o [N, T, H·dh], each row's
logsumexp lse [N, H, T], and the gradient dqkv of Σ o·do.

Regenerate (from the repository root):

    /usr/bin/python3 ops/testdata/gen_attention_golden.py > ops/testdata/attention_golden.json
"""
import json
import math

import torch

D = torch.float64

# name, N, T, H, dh, causal: odd sizes, T = 1, T past the CPU tile (64) and
# not a multiple of it, head dims 24 and 64, N·H odd.
CASES = [
    ("causal/2x5x3x4", 2, 5, 3, 4, True),
    ("full/1x4x2x3", 1, 4, 2, 3, False),
    ("causal/T1", 3, 1, 1, 2, True),
    ("full/T1", 1, 1, 3, 5, False),
    ("causal/T67-dh24", 1, 67, 1, 24, True),
    ("full/T66-dh5", 1, 66, 1, 5, False),
    ("causal/1x5x3x64", 1, 5, 3, 64, True),
]


def inputs(n, t, h, dh):
    i = torch.arange(n * t * 3 * h * dh, dtype=D)
    qkv = (1.5 * torch.sin(1.3 * i + 0.5)).reshape(n, t, 3, h, dh)
    j = torch.arange(n * t * h * dh, dtype=D)
    do = torch.cos(0.7 * j + 0.2).reshape(n, t, h * dh)
    return qkv, do


def flat(x):
    return dict(shape=list(x.shape), data=x.detach().reshape(-1).tolist())


def main():
    cases = []
    for name, n, t, h, dh, causal in CASES:
        qkv, do = inputs(n, t, h, dh)
        qkv.requires_grad_(True)
        q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))  # [N, H, T, dh]
        s = q @ k.transpose(-1, -2) / math.sqrt(dh)
        if causal:
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
            s = s.masked_fill(mask, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)  # [N, H, T]
        o = (torch.softmax(s, dim=-1) @ v).permute(0, 2, 1, 3).reshape(n, t, h * dh)
        (o * do).sum().backward()
        cases.append(dict(name=name, shape=[n, t, 3, h, dh], causal=causal,
                          o=flat(o), lse=flat(lse), dqkv=flat(qkv.grad)))
    json.dump(dict(torch=torch.__version__, cases=cases), __import__("sys").stdout)


if __name__ == "__main__":
    main()
