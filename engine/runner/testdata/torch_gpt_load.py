# Loads gorun's model.safetensors of scripts/examples/gpt_text.star into the
# same GPT written as PyTorch modules (GPT-2 style names, lm_head tied to
# wte) with load_state_dict(strict=True), evaluates the first N windows of
# the test split of the text (as data.text cuts it) and prints
# {"loss": mean cross-entropy over every position}.
#   python3 torch_gpt_load.py CHECKPOINT.safetensors TEXT_DIR N
import json, os, sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_load import load_safetensors

V, T, D, H, L = 256, 64, 128, 4, 4


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(d, 4 * d)
        self.mlp.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 style names; lm_head shares wte's weight."""

    def __init__(self, v=V, t=T, d=D, h=H, layers=L):
        super().__init__()
        self.wte = nn.Embedding(v, d)
        self.wpe = nn.Embedding(t, d)
        self.h = nn.ModuleList([Block(d, h) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, v, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def read_text(path):
    if not os.path.isdir(path):
        return open(path, "rb").read()
    out = b""
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.isfile(p) and not os.path.islink(p) and not name.endswith(".dat"):
            out += open(p, "rb").read()
    return out


if __name__ == "__main__":
    ckpt, text, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = GPT()
    model.load_state_dict(load_safetensors(ckpt), strict=True)
    model.eval()
    ids = np.frombuffer(read_text(text), dtype=np.uint8).astype(np.int64)
    windows = (len(ids) - 1) // T
    test = max(1, int(windows * 0.1 + 0.5))
    first = windows - test
    x = torch.from_numpy(np.stack([ids[(first + i) * T:(first + i) * T + T] for i in range(n)]))
    y = torch.from_numpy(np.stack([ids[(first + i) * T + 1:(first + i) * T + T + 1] for i in range(n)]))
    with torch.no_grad():
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1)).item()
    print(json.dumps({"loss": loss}))
