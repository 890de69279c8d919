# Regenerate gpt_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/runner/testdata/gen_gpt_golden.py > engine/runner/testdata/gpt_golden.json
# The model is gpt_test.go's gptScript: token and position embeddings, two
# pre-norm blocks of causal nn.MultiheadAttention and a GELU (tanh) MLP, a
# final layer norm and an output projection tied to the token embedding.
# One batch's loss (cross-entropy over every position) and every gradient.
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_load import GPT  # the same module as the example's check

torch.manual_seed(0)
V, T, D, H, L = 11, 6, 8, 2, 2


net = GPT(V, T, D, H, L).double()
with torch.no_grad():
    for name, p in net.named_parameters():
        p.copy_(torch.randn(p.shape, dtype=torch.float64) * 0.5 + (1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight" else 0.0))
x = torch.randint(0, V, (3, T))
y = torch.randint(0, V, (3, T))
loss = F.cross_entropy(net(x).reshape(-1, V), y.reshape(-1))
loss.backward()
print(json.dumps({
    "x": x.flatten().tolist(), "y": y.flatten().tolist(),
    "params": {k: {"shape": list(v.shape), "data": v.detach().flatten().tolist()} for k, v in net.named_parameters()},
    "state_dict_keys": list(net.state_dict().keys()),
    "loss": loss.item(),
    "grads": {k: v.grad.flatten().tolist() for k, v in net.named_parameters()},
}))
