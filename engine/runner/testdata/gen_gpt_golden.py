# Regenerate gpt_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/runner/testdata/gen_gpt_golden.py > engine/runner/testdata/gpt_golden.json
# The model is gpt_test.go's gptScript: token and position embeddings, two
# pre-norm blocks of causal nn.MultiheadAttention and a GELU (tanh) MLP, a
# final layer norm and an output projection tied to the token embedding.
# One batch's loss (cross-entropy over every position) and every gradient.
import json
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
V, T, D, H, L = 11, 6, 8, 2, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.ln_2 = nn.LayerNorm(D)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(D, 4 * D)
        self.mlp.c_proj = nn.Linear(4 * D, D)

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


net = GPT().double()
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
