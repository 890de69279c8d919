"""PyTorch eager reference for gpt2_small.star (gpucheck/run.sh).

The same GPT-2-small-shaped model (12 layers, 12 heads, d_model 768, T 1024,
vocabulary 50,304, lm_head tied to wte, GELU tanh, pre-norm blocks), AdamW
(weight decay 0.1 but for biases, layer norms and wpe), gradient clipping at
1.0, on random token ids already on the GPU. Attention is
F.scaled_dot_product_attention (causal). Precision "fp32" (TF32 off, as
gorun's fp32 GEMMs) or "bf16" (torch.autocast bf16, fp32 master weights).
Prints one JSON line:

  {"check": "torch_gpt2", "precision": P, "batch": B, "tokens_per_s": ...,
   "mfu": ..., "params": N, ...}

MFU is (6·N + 12·L·d·T)·tokens/s over 989 TFLOP/s (the H200's dense bf16
peak), N the parameters less the position embeddings (nanoGPT's count),
the same formula run.sh applies to gorun's tokens/s.

    python3 gpt2_bench.py --precision fp32 --batch 8 --steps 20
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, D, H, L = 50304, 1024, 768, 12, 12
PEAK = 989e12


def sdpa(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # PyTorch 1.13 (the --smoke run on a machine without a GPU).
    t = q.shape[2]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.in_proj = nn.Linear(D, 3 * D)
        self.out_proj = nn.Linear(D, D)
        self.ln_2 = nn.LayerNorm(D)
        self.c_fc = nn.Linear(D, 4 * D)
        self.c_proj = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.in_proj(self.ln_1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        a = sdpa(q, k, v)
        x = x + self.out_proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def flops_per_token(n):
    return 6 * n + 12 * L * D * T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a tiny model on the CPU: checks the script runs")
    args = ap.parse_args()
    global V, T, D, H, L
    if args.smoke:
        V, T, D, H, L = 97, 16, 24, 2, 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cpu" if args.smoke else "cuda")
    torch.manual_seed(1)
    model = GPT().to(dev)
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    decay = [p for name, p in model.named_parameters() if p.dim() >= 2 and not name.startswith("wpe")]
    rest = [p for name, p in model.named_parameters() if not (p.dim() >= 2 and not name.startswith("wpe"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=6e-4)
    x = torch.randint(0, V, (args.batch * 4, T + 1), device=dev)
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def step(i):
        b = x[(i % 4) * args.batch:(i % 4 + 1) * args.batch]
        with ctx:
            logits = model(b[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, V), b[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(i)
    sync()
    dt = time.perf_counter() - t0
    tps = args.steps * args.batch * T / dt
    print(json.dumps({"check": "torch_gpt2", "precision": args.precision, "batch": args.batch, "steps": args.steps,
                      "tokens_per_s": tps, "mfu": flops_per_token(n) * tps / PEAK, "params": n,
                      "last_loss": float(loss), "ok": math.isfinite(float(loss)), "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu (smoke)",
                      "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None}), flush=True)


if __name__ == "__main__":
    main()
