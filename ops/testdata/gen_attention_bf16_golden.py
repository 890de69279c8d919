#!/usr/bin/env python3
"""Writes attention_bf16_golden.json: the bf16 fused attention (ops.Attention
and ops.AttentionGrad with Attrs.Precision = BF16, defined in
ops/attention_bf16.go) computed by PyTorch 1.13 in float64 from its
definition: q, k, v, do and the probabilities rounded to bfloat16 by
PyTorch's own cast (x.float().bfloat16()), products of the rounded values
summed exactly, the forward's online softmax over blocks of 32 keys (p
rounded relative to the running maximum, as FlashAttention's GPU kernel
and gorun's CUDA kernel do), the backward from lse and D = Σ do·o.

The inputs are those of gen_attention_golden.py (not stored):
qkv[i] = 1.5·sin(1.3·i + 0.5), do[i] = cos(0.7·i + 0.2). Stored: o, lse
and dqkv (the backward from the stored o and lse).

Regenerate (from the repository root):

    /usr/bin/python3 ops/testdata/gen_attention_bf16_golden.py > ops/testdata/attention_bf16_golden.json
"""
import json
import math
import sys

import torch

D = torch.float64
KEYS = 32  # ops.AttentionBF16Keys

# name, N, T, H, dh, causal: one key block and several (T past 32 and 64,
# not multiples), T = 1, head dims 2 to 16.
CASES = [
    ("causal/2x5x3x4", 2, 5, 3, 4, True),
    ("full/1x4x2x3", 1, 4, 2, 3, False),
    ("causal/T1", 3, 1, 1, 2, True),
    ("causal/T67-dh4", 1, 67, 1, 4, True),
    ("full/T45-dh5", 1, 45, 2, 5, False),
    ("causal/1x40x1x16", 1, 40, 1, 16, True),
]


def br(x):
    """x rounded to bfloat16 as PyTorch casts, back in float64."""
    return x.float().bfloat16().to(D)


def f32(x):
    return x.float().to(D)


def inputs(n, t, h, dh):
    i = torch.arange(n * t * 3 * h * dh, dtype=D)
    qkv = (1.5 * torch.sin(1.3 * i + 0.5)).reshape(n, t, 3, h, dh)
    j = torch.arange(n * t * h * dh, dtype=D)
    do = torch.cos(0.7 * j + 0.2).reshape(n, t, h * dh)
    return f32(qkv), f32(do)


def flat(x):
    return dict(shape=list(x.shape), data=x.reshape(-1).tolist())


def forward(q, k, v, causal, scale):
    """q, k, v [N, H, T, dh] → o [N, H, T, dh], lse [N, H, T]."""
    n, h, t, dh = q.shape
    s = (br(q) @ br(k).transpose(-1, -2)) * scale  # [N, H, T, T]
    if causal:
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        s = s.masked_fill(mask, float("-inf"))
    m = torch.full((n, h, t, 1), float("-inf"), dtype=D)
    l = torch.zeros((n, h, t, 1), dtype=D)
    acc = torch.zeros((n, h, t, dh), dtype=D)
    for k0 in range(0, t, KEYS):
        blk = s[..., k0:k0 + KEYS]
        mx = torch.maximum(m, blk.max(dim=-1, keepdim=True).values)
        # rows that see no key of this block keep their state
        p = torch.exp(blk - mx).nan_to_num(0.0)
        a = torch.where(torch.isinf(m), torch.zeros_like(m), torch.exp(m - mx))
        l = l * a + p.sum(dim=-1, keepdim=True)
        acc = acc * a + br(p) @ br(v[..., k0:k0 + KEYS, :])
        m = torch.where(torch.isinf(mx), m, mx)
    return acc / l, (m + torch.log(l)).squeeze(-1)


def backward(q, k, v, o, lse, do, causal, scale):
    t = q.shape[2]
    s = (br(q) @ br(k).transpose(-1, -2)) * scale
    p = torch.exp(s - lse.unsqueeze(-1))
    if causal:
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        p = p.masked_fill(mask, 0.0)
    dd = (do * o).sum(dim=-1, keepdim=True)
    ds = p * (br(do) @ br(v).transpose(-1, -2) - dd)
    dq = (br(ds) @ br(k)) * scale
    dk = (br(ds).transpose(-1, -2) @ br(q)) * scale
    dv = br(p).transpose(-1, -2) @ br(do)
    return dq, dk, dv


def main():
    cases = []
    for name, n, t, h, dh, causal in CASES:
        qkv, do = inputs(n, t, h, dh)
        scale = 1 / math.sqrt(dh)
        q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))  # [N, H, T, dh]
        o, lse = forward(q, k, v, causal, scale)
        o, lse = f32(o), f32(lse)  # the float32 outputs the backward reads
        doh = do.reshape(n, t, h, dh).permute(0, 2, 1, 3)
        dq, dk, dv = backward(q, k, v, o, lse, doh, causal, scale)
        dqkv = torch.stack([x.permute(0, 2, 1, 3) for x in (dq, dk, dv)], dim=2)
        cases.append(dict(name=name, shape=[n, t, 3, h, dh], causal=causal,
                          o=flat(o.permute(0, 2, 1, 3).reshape(n, t, h * dh)), lse=flat(lse), dqkv=flat(dqkv)))
    json.dump(dict(torch=torch.__version__, cases=cases), sys.stdout)


if __name__ == "__main__":
    main()
