# Regenerate ignore_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/runner/testdata/gen_ignore_golden.py > engine/runner/testdata/ignore_golden.json
# Token windows with some targets -100, an embedding and a linear layer over
# the last dimension: the loss of F.cross_entropy(..., ignore_index=-100),
# the mean over the kept targets only.
import json
import torch
import torch.nn.functional as F

torch.manual_seed(5)
N, T, V, D = 6, 5, 7, 4
x = torch.randint(0, V, (N, T))
y = torch.randint(0, V, (N, T))
y[torch.rand(N, T) < 0.3] = -100
params = {"emb.weight": torch.randn(V, D), "fc.weight": torch.randn(V, D) * 0.5, "fc.bias": torch.randn(V) * 0.1}
logits = F.linear(F.embedding(x, params["emb.weight"]), params["fc.weight"], params["fc.bias"])
loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=-100)
print(json.dumps({"x": x.flatten().tolist(), "y": y.flatten().tolist(), "n": N, "t": T, "v": V,
                  "params": {k: {"shape": list(p.shape), "data": p.flatten().tolist()} for k, p in params.items()},
                  "loss": loss.item(), "kept": int((y != -100).sum())}))
