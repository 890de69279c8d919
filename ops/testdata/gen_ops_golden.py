#!/usr/bin/env python3
"""Writes ops_golden.json: forward and backward values of conv2d (grouped
too), max_pool2d, log_softmax, softmax (over the last dimension of any rank,
causal too), nll_loss, cross_entropy (with label smoothing, ignore_index,
classes along the last dimension), batch_norm (training, with the running
statistics, and evaluation), avg_pool2d, adaptive_avg_pool2d(1), sigmoid,
tanh, leaky_relu, gelu (exact and tanh), add, sub, mul, scaling, mse_loss,
cat, embedding, layer_norm, batched matmul with transposes, permute, linear
(over the last dimension of any rank), narrow and position ids
(arange) from PyTorch 1.13 in float64 on small random inputs.
ops/golden_test.go checks the kernels against it.

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


def conv(name, x, w, b, stride, padding, groups=1):
    x, w = x.requires_grad_(), w.requires_grad_()
    if b is not None:
        b.requires_grad_()
    y = F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="conv2d", stride=stride, padding=padding,
              x=t(x), w=t(w), y=t(y), dy=t(dy), dx=t(x.grad), dw=t(w.grad))
    if groups != 1:
        c.update(groups=groups)
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

# The cases below were added after the ones above; they come last so that
# the earlier cases keep their random draws.


def batch_norm(name, shape, affine, momentum=0.1, tracked=0, eps=1e-5):
    """Training-mode batch norm through nn.BatchNorm (so that momentum=None
    and num_batches_tracked are PyTorch's own), then evaluation mode."""
    c = shape[1]
    bn = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d}[len(shape)](
        c, eps=eps, momentum=momentum, affine=affine).double()
    with torch.no_grad():
        if affine:
            bn.weight.copy_(randn(c))
            bn.bias.copy_(randn(c))
        bn.running_mean.copy_(randn(c))
        bn.running_var.copy_(torch.rand(c, dtype=D) + 0.5)
        bn.num_batches_tracked.fill_(tracked)
    rm, rv = bn.running_mean.clone(), bn.running_var.clone()
    x = (randn(*shape) * 2 + 0.5).requires_grad_()
    bn.train()
    y = bn(x)
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="batch_norm", eps=eps, momentum=-1 if momentum is None else momentum,
             x=t(x), y=t(y), dy=t(dy), dx=t(x.grad),
             running_mean=t(rm), running_var=t(rv), tracked=t(torch.tensor([float(tracked)], dtype=D)),
             running_mean_out=t(bn.running_mean), running_var_out=t(bn.running_var),
             tracked_out=t(bn.num_batches_tracked.double().reshape(1)))
    if affine:
        c.update(gamma=t(bn.weight), beta=t(bn.bias), dgamma=t(bn.weight.grad), dbeta=t(bn.bias.grad))
    # Evaluation mode on a fresh input, with the updated running statistics.
    bn.eval()
    xe = randn(*shape) * 2
    c.update(x_eval=t(xe), y_eval=t(bn(xe)))
    cases.append(c)


batch_norm("batch_norm_2d", (6, 3), True)
batch_norm("batch_norm_4d", (3, 4, 3, 5), True)
batch_norm("batch_norm_3d_noaffine", (4, 2, 5), False)
batch_norm("batch_norm_4d_cumulative", (2, 3, 4, 4), True, momentum=None, tracked=4, eps=1e-3)


def avg_pool(name, x, kernel, stride, padding):
    x.requires_grad_()
    y = F.avg_pool2d(x, kernel, stride, padding)  # count_include_pad=True, floor mode
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op="avgpool2d", kernel=kernel, stride=stride, padding=padding,
                      x=t(x), y=t(y), dy=t(dy), dx=t(x.grad)))


avg_pool("avgpool2d_k2", randn(2, 3, 5, 6), 2, 2, 0)
avg_pool("avgpool2d_k3s2p1", randn(2, 2, 7, 8), 3, 2, 1)
avg_pool("avgpool2d_k3s1p1", randn(1, 2, 4, 5), 3, 1, 1)

x = randn(3, 4, 5, 3).requires_grad_()
y = F.adaptive_avg_pool2d(x, 1)
dy = randn(*y.shape)
y.backward(dy)
cases.append(dict(name="global_avgpool2d", op="global_avgpool2d", x=t(x), y=t(y), dy=t(dy), dx=t(x.grad)))


def unary(name, op, f, **attrs):
    x = (randn(3, 4, 5) * 3).requires_grad_()
    y = f(x)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op=op, x=t(x), y=t(y), dy=t(dy), dx=t(x.grad), **attrs))


unary("sigmoid", "sigmoid", torch.sigmoid)
unary("tanh", "tanh", torch.tanh)
unary("leaky_relu", "leaky_relu", F.leaky_relu, negative_slope=0.01)
unary("leaky_relu_0.2", "leaky_relu", lambda x: F.leaky_relu(x, 0.2), negative_slope=0.2)
unary("scale", "scale", lambda x: x * -1.75, alpha=-1.75)


def binary(name, f):
    x, other = randn(4, 3, 2).requires_grad_(), randn(4, 3, 2).requires_grad_()
    y = f(x, other)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op=name, x=t(x), other=t(other), y=t(y), dy=t(dy),
                      dx=t(x.grad), dother=t(other.grad)))


binary("add", torch.add)
binary("sub", torch.sub)
binary("mul", torch.mul)

pred = randn(5, 3, 2).requires_grad_()
target = randn(5, 3, 2)
loss = F.mse_loss(pred, target)  # reduction="mean": LossScale = 1/N
loss.backward(dloss)
cases.append(dict(name="mse_loss", op="mse_loss", x=t(pred), target=t(target), loss=t(loss.reshape(1)),
                  dloss=t(dloss.reshape(1)), dx=t(pred.grad)))

for eps in (0.1, 0.35):
    x = (randn(6, 5) * 3).requires_grad_()
    target = torch.randint(0, 5, (6,))
    loss = F.cross_entropy(x, target, label_smoothing=eps)
    loss.backward(dloss)
    cases.append(dict(name="cross_entropy_smoothing_%g" % eps, op="cross_entropy", label_smoothing=eps,
                      x=t(x), target=t(target.double()), probs=t(F.softmax(x, dim=1)),
                      loss=t(loss.reshape(1)), dloss=t(dloss.reshape(1)), dx=t(x.grad)))

conv("conv2d_groups2", randn(2, 4, 6, 5), randn(6, 2, 3, 3), randn(6), 1, 1, groups=2)
conv("conv2d_depthwise_x2_stride2", randn(3, 3, 7, 6), randn(6, 1, 3, 2), None, 2, 1, groups=3)
conv("conv2d_groups2_batch1", randn(1, 4, 5, 5), randn(2, 2, 3, 3), randn(2), 1, 0, groups=2)


def concat(name, a_shape, b_shape):
    x, other = randn(*a_shape).requires_grad_(), randn(*b_shape).requires_grad_()
    y = torch.cat((x, other), dim=1)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op="concat", x=t(x), other=t(other), y=t(y), dy=t(dy),
                      dx=t(x.grad), dother=t(other.grad)))


concat("concat_3d", (3, 2, 4), (3, 5, 4))
concat("concat_2d", (4, 3), (4, 1))


def embedding(name, ids_shape, v, d):
    ids = torch.randint(0, v, ids_shape)
    w = randn(v, d).requires_grad_()
    y = F.embedding(ids, w)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op="embedding", ids=t(ids.double()), w=t(w), y=t(y), dy=t(dy), dw=t(w.grad)))


embedding("embedding_2d", (3, 5), 4, 3)
embedding("embedding_1d", (6,), 10, 4)


def layer_norm(name, shape, affine, eps=1e-5):
    d = shape[-1]
    x = (randn(*shape) * 2 + 0.5).requires_grad_()
    gamma = randn(d).requires_grad_() if affine else None
    beta = randn(d).requires_grad_() if affine else None
    y = F.layer_norm(x, (d,), gamma, beta, eps)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x.detach(), [d], None, None, eps)
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="layer_norm", eps=eps, x=t(x), y=t(y), dy=t(dy), dx=t(x.grad),
             mean=t(mean.reshape(-1)), rstd=t(rstd.reshape(-1)))
    if affine:
        c.update(gamma=t(gamma), beta=t(beta), dgamma=t(gamma.grad), dbeta=t(beta.grad))
    cases.append(c)


layer_norm("layer_norm_3d", (3, 4, 6), True)
layer_norm("layer_norm_2d_noaffine", (5, 7), False, eps=1e-3)

unary("gelu", "gelu", F.gelu)
unary("gelu_tanh", "gelu", lambda x: F.gelu(x, approximate="tanh"), approximate=True)


def softmax_last(name, shape, causal=False, log=False):
    x = (randn(*shape) * 3).requires_grad_()
    s = x
    if causal:
        mask = torch.ones(shape[-2], shape[-1], dtype=torch.bool).triu(1)
        s = x.masked_fill(mask, float("-inf"))
    y = F.log_softmax(s, dim=-1) if log else F.softmax(s, dim=-1)
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="log_softmax" if log else "softmax", x=t(x), y=t(y), dy=t(dy), dx=t(x.grad))
    if causal:
        c.update(causal=True)
    cases.append(c)


softmax_last("softmax_4d", (2, 3, 4, 5))
softmax_last("softmax_causal", (2, 2, 5, 5), causal=True)
softmax_last("softmax_causal_3d", (3, 4, 4), causal=True)
softmax_last("log_softmax_3d", (3, 4, 6), log=True)


def loss_last(name, shape, ignore_index=None, n_ignored=0, label_smoothing=0.0, nll=False):
    """Losses with classes along the last dimension of [N,...,C] (PyTorch's
    class dimension is 1: the logits are permuted), with reduction="mean",
    which divides by the number of targets not ignored."""
    c = shape[-1]
    x = (randn(*shape) * 3).requires_grad_()
    target = torch.randint(0, c, shape[:-1])
    kw = {}
    if ignore_index is not None:
        kw["ignore_index"] = ignore_index
        flat = target.view(-1)
        flat[torch.randperm(flat.numel())[:n_ignored]] = ignore_index
    perm = (0, len(shape) - 1) + tuple(range(1, len(shape) - 1))
    dloss = torch.tensor(0.75, dtype=D)
    case = dict(name=name, target=t(target.double()), dloss=t(dloss.reshape(1)))
    if nll:
        logp = F.log_softmax(x, dim=-1)
        logp.retain_grad()
        loss = F.nll_loss(logp.permute(*perm), target, **kw)
        loss.backward(dloss)
        case.update(op="log_softmax_nll", logp=t(logp), dlogp=t(logp.grad))
    else:
        loss = F.cross_entropy(x.permute(*perm), target, label_smoothing=label_smoothing, **kw)
        loss.backward(dloss)
        case.update(op="cross_entropy", probs=t(F.softmax(x, dim=-1)))
        if label_smoothing:
            case.update(label_smoothing=label_smoothing)
    if ignore_index is not None:
        case.update(ignore_index=ignore_index)
    case.update(x=t(x), loss=t(loss.reshape(1)), dx=t(x.grad))
    cases.append(case)


loss_last("cross_entropy_3d", (3, 4, 5))
loss_last("cross_entropy_3d_ignore", (3, 4, 5), ignore_index=-100, n_ignored=4)
loss_last("cross_entropy_4d_ignore_class_smoothing", (2, 3, 2, 6), ignore_index=2, n_ignored=3, label_smoothing=0.2)
loss_last("cross_entropy_2d_ignore_smoothing", (7, 4), ignore_index=-1, n_ignored=2, label_smoothing=0.1)
loss_last("nll_3d_ignore", (3, 5, 4), ignore_index=-100, n_ignored=5, nll=True)


def bmm(name, a_shape, b_shape, trans_a=False, trans_b=False):
    x, other = randn(*a_shape).requires_grad_(), randn(*b_shape).requires_grad_()
    y = torch.matmul(x.transpose(-1, -2) if trans_a else x, other.transpose(-1, -2) if trans_b else other)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op="batch_matmul", trans_a=trans_a, trans_b=trans_b, x=t(x), other=t(other),
                      y=t(y), dy=t(dy), dx=t(x.grad), dother=t(other.grad)))


bmm("batch_matmul", (3, 4, 5), (3, 5, 2))
bmm("batch_matmul_trans_b_4d", (2, 3, 4, 6), (2, 3, 5, 6), trans_b=True)
bmm("batch_matmul_trans_a", (2, 6, 3), (2, 6, 4), trans_a=True)
bmm("batch_matmul_trans_ab", (4, 5, 3), (4, 2, 5), trans_a=True, trans_b=True)


def permute(name, shape, perm):
    x = randn(*shape).requires_grad_()
    y = x.permute(*perm)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op="permute", perm=list(perm), x=t(x), y=t(y.contiguous()), dy=t(dy), dx=t(x.grad)))


permute("permute_heads", (2, 5, 3, 4), (0, 2, 1, 3))
permute("permute_5d", (2, 3, 4, 2, 3), (0, 3, 1, 4, 2))



def linear(name, x_shape, out_features, bias=True):
    """F.linear over the last dimension of an input of any rank."""
    x = randn(*x_shape).requires_grad_()
    w = randn(out_features, x_shape[-1]).requires_grad_()
    b = randn(out_features).requires_grad_() if bias else None
    y = F.linear(x, w, b)
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="linear", x=t(x), w=t(w), y=t(y), dy=t(dy), dx=t(x.grad), dw=t(w.grad))
    if bias:
        c.update(b=t(b), db=t(b.grad))
    cases.append(c)


linear("linear_2d", (5, 4), 3)
linear("linear_3d", (3, 4, 6), 5)
linear("linear_4d_nobias", (2, 3, 2, 4), 3, bias=False)


def narrow(name, shape, offset, length):
    """x.narrow(1, offset, length) forward; its backward pads dy with zeros."""
    x = randn(*shape).requires_grad_()
    y = x.narrow(1, offset, length)
    dy = randn(*y.shape)
    y.backward(dy)
    cases.append(dict(name=name, op="narrow", offset=offset, length=length,
                      x=t(x), y=t(y.contiguous()), dy=t(dy), dx=t(x.grad)))


narrow("narrow_qkv_middle", (2, 9, 3), 3, 3)
narrow("narrow_2d_head", (4, 5), 0, 2)
narrow("narrow_4d_tail", (2, 6, 2, 3), 4, 2)

# Position ids as a GPT builds them for token ids [N, T].
ids = torch.randint(0, 50, (3, 7))
pos = torch.arange(ids.shape[1]).expand(ids.shape[0], -1)
cases.append(dict(name="positions", op="positions", ids=t(ids.double()), y=t(pos.double())))



def conv_pool(name, x, w, b, padding, relu):
    """conv2d, then max_pool2d(2), then (relu) ReLU: gorun's Conv2DPool."""
    x, w = x.requires_grad_(), w.requires_grad_()
    if b is not None:
        b.requires_grad_()
    y, idx = F.max_pool2d(F.conv2d(x, w, b, padding=padding), 2, return_indices=True)
    if relu:
        y = F.relu(y)
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="conv2d_maxpool2d", padding=padding, relu=relu, x=t(x), w=t(w), y=t(y),
             idx=t(idx.double()), dy=t(dy), dx=t(x.grad), dw=t(w.grad))
    if b is not None:
        c.update(b=t(b), db=t(b.grad))
    cases.append(c)


# Appended last, so that the cases above keep their random values.
conv_pool("conv2d_maxpool2d_relu_pad1", randn(3, 1, 9, 8), randn(4, 1, 3, 3), randn(4), 1, True)
conv_pool("conv2d_maxpool2d_5x5_nobias", randn(2, 1, 11, 10), randn(3, 1, 5, 5), None, 0, False)
unary("silu", "silu", F.silu)


def linear_gelu(name, x_shape, out_features, bias=True):
    """F.gelu(F.linear(x, w, b), approximate="tanh"): gorun's LinearGELU
    (the pre-activation kept as pre)."""
    x = randn(*x_shape).requires_grad_()
    w = randn(out_features, x_shape[-1]).requires_grad_()
    b = randn(out_features).requires_grad_() if bias else None
    pre = F.linear(x, w, b)
    y = F.gelu(pre, approximate="tanh")
    dy = randn(*y.shape)
    y.backward(dy)
    c = dict(name=name, op="linear_gelu", approximate=True, x=t(x), w=t(w), pre=t(pre), y=t(y), dy=t(dy),
             dx=t(x.grad), dw=t(w.grad))
    if bias:
        c.update(b=t(b), db=t(b.grad))
    cases.append(c)


linear_gelu("linear_gelu_2d", (5, 4), 6)
linear_gelu("linear_gelu_3d_nobias", (2, 3, 4), 5, bias=False)

text = json.dumps(dict(torch=torch.__version__, cases=cases), indent=1)
# One number list per line: small, and diffs stay readable.
print(re.sub(r"\[[^\[\]{}]*\]", lambda m: re.sub(r"\s+", "", m.group(0)), text))
