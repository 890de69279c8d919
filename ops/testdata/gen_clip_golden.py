# Regenerate clip_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 ops/testdata/gen_clip_golden.py > ops/testdata/clip_golden.json
# torch.nn.utils.clip_grad_norm_ over three float32 gradients at several
# max_norm values (below and above their norm): the gradients after it.
import json
import torch

torch.manual_seed(3)
shapes = [(5, 3), (7,), (2, 2, 2)]
grads = [torch.randn(s) * 2 for s in shapes]
cases = []
for max_norm in [0.5, 3.0, 100.0]:
    ps = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for p, g in zip(ps, grads):
        p.grad = g.clone()
    norm = torch.nn.utils.clip_grad_norm_(ps, max_norm)
    cases.append({"max_norm": max_norm, "norm": norm.item(),
                  "after": [x for p in ps for x in p.grad.flatten().tolist()]})
print(json.dumps({"grads": [x for g in grads for x in g.flatten().tolist()], "cases": cases}))
