#!/usr/bin/env python3
"""Writes ops_golden.json: forward and backward values of conv2d, max_pool2d,
log_softmax, softmax, nll_loss and cross_entropy from PyTorch 1.13 in
float64 on small random inputs. ops/golden_test.go checks the kernels
against it.

Regenerate (from the repository root):

    /usr/bin/python3 ops/testdata/gen_ops_golden.py > ops/testdata/ops_golden.json
"""
import json
import re

import torch
import torch.nn.functional as F

torch.manual_seed(4321)
D = torch.float64


def t(x):
    return dict(shape=list(x.shape), data=x.detach().reshape(-1).tolist())


def randn(*shape):
    return torch.randn(*shape, dtype=D)


cases = []


def conv(name, x, w, b, stride, padding):
    x, w = x.requires_grad_(), w.requires_grad_()
    if b is not None:
        b.requires_grad_()
    y = F.conv2d(x, w, b, stride=stride, padding=padding)
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="conv2d", stride=stride, padding=padding,
              x=t(x), w=t(w), y=t(y), dy=t(dy), dx=t(x.grad), dw=t(w.grad))
    if b is not None:
        c.update(b=t(b), db=t(b.grad))
    cases.append(c)


conv("conv2d_stride1", randn(2, 2, 5, 6), randn(3, 2, 3, 3), randn(3), 1, 0)
conv("conv2d_stride2_pad1", randn(2, 2, 7, 6), randn(4, 2, 3, 2), randn(4), 2, 1)
conv("conv2d_nobias_pad2", randn(2, 1, 5, 5), randn(2, 1, 5, 5), None, 1, 2)


def pool(name, x, kernel, stride):
    x.requires_grad_()
    y, idx = F.max_pool2d(x, kernel, stride, return_indices=True)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op="maxpool2d", kernel=kernel, stride=stride,
                      x=t(x), y=t(y), idx=t(idx.double()), dy=t(dy), dx=t(x.grad)))


pool("maxpool2d_k2", randn(2, 2, 5, 6), 2, 2)
pool("maxpool2d_k3s2", randn(1, 2, 7, 8), 3, 2)

# log_softmax then nll_loss (mean over the batch: LossScale = 1/N), with a
# loss gradient that is not 1.
x = (randn(6, 10) * 3).requires_grad_()
target = torch.randint(0, 10, (6,))
logp = F.log_softmax(x, dim=1)
logp.retain_grad()
loss = F.nll_loss(logp, target)
dloss = torch.tensor(0.75, dtype=D)
loss.backward(dloss)
cases.append(dict(name="log_softmax_nll", op="log_softmax_nll", x=t(x), target=t(target.double()),
                  logp=t(logp), loss=t(loss.reshape(1)), dloss=t(dloss.reshape(1)),
                  dlogp=t(logp.grad), dx=t(x.grad)))

x = (randn(5, 7) * 3).requires_grad_()
target = torch.randint(0, 7, (5,))
loss = F.cross_entropy(x, target)
loss.backward(dloss)
cases.append(dict(name="cross_entropy", op="cross_entropy", x=t(x), target=t(target.double()),
                  probs=t(F.softmax(x, dim=1)), loss=t(loss.reshape(1)), dloss=t(dloss.reshape(1)),
                  dx=t(x.grad)))

x = (randn(4, 6) * 3).requires_grad_()
y = F.softmax(x, dim=1)
dy = randn(4, 6)
y.backward(dy)
cases.append(dict(name="softmax", op="softmax", x=t(x), y=t(y), dy=t(dy), dx=t(x.grad)))

text = json.dumps(dict(torch=torch.__version__, cases=cases), indent=1)
# One number list per line: small, and diffs stay readable.
print(re.sub(r"\[[^\[\]{}]*\]", lambda m: re.sub(r"\s+", "", m.group(0)), text))
