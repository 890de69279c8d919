"""PyTorch eager reference for scripts/examples/resnet_fashion.star
(gpucheck/run.sh).

The same model (torchvision-style basic blocks with batch norm, widths 16,
32, 64, a 1x1 downsample on the shortcut, global average pooling, a linear
head), the same training: Fashion-MNIST normalised with (0.2860, 0.3530),
random horizontal flips (p = 0.5), SGD (lr 0.1, momentum 0.9, weight decay
5e-4), cosine annealing over every step of the run, batch 128, 6 epochs,
the data already on the GPU (batches gathered there by index, as gorun
does). Precision "fp32" (TF32 off, as gorun's fp32) or "bf16"
(torch.autocast). The test set is evaluated after every epoch. Prints one
JSON line:

  {"check": "torch_resnet", "precision": P, "samples_per_s": ... (epochs
   after the first), "seconds_to_092": training seconds (evaluation not
   counted) until the first evaluation at test accuracy >= 0.92, or null,
   "accuracy": [per epoch], ...}

    python3 resnet_bench.py --fashion DIR_WITH_IDX_GZ_FILES --precision fp32
"""
import argparse
import gzip
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64)):
        super().__init__()
        self.conv1 = nn.Conv2d(1, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(BasicBlock(cin, w, 1 if i == 0 else 2))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 10)

    def forward(self, x):
        h = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def load(folder, split):
    prefix = "train" if split == "train" else "t10k"

    def read(name, skip):
        path = os.path.join(folder, name)
        opener = gzip.open if os.path.exists(path + ".gz") else open
        with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
            return f.read()[skip:]

    images = read(prefix + "-images-idx3-ubyte", 16)
    labels = read(prefix + "-labels-idx1-ubyte", 8)
    x = torch.frombuffer(bytearray(images), dtype=torch.uint8).reshape(-1, 1, 28, 28).float() / 255
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return (x - 0.2860) / 0.3530, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fashion", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--target", type=float, default=0.92)
    ap.add_argument("--limit", type=int, default=0, help="first N samples of each split (a quick try)")
    ap.add_argument("--smoke", action="store_true", help="on the CPU: checks the script runs")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cpu" if args.smoke else "cuda")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(1)
    xtr, ytr = load(args.fashion, "train")
    xte, yte = load(args.fashion, "test")
    if args.limit:
        xtr, ytr, xte, yte = xtr[:args.limit], ytr[:args.limit], xte[:args.limit], yte[:args.limit]
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)
    n = xtr.shape[0]
    model = ResNet().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    per_epoch = math.ceil(n / args.batch)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=per_epoch * args.epochs)
    ctx = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def evaluate():
        model.eval()
        correct = 0
        with torch.no_grad(), ctx:
            for lo in range(0, xte.shape[0], 1000):
                correct += (model(xte[lo:lo + 1000]).argmax(1) == yte[lo:lo + 1000]).sum().item()
        model.train()
        return correct / xte.shape[0]

    train_s, to_target, accs, rates = 0.0, None, [], []
    for epoch in range(args.epochs):
        perm = torch.randperm(n, device=dev)
        flip = torch.rand(n, device=dev) < 0.5
        sync()
        t0 = time.perf_counter()
        for lo in range(0, n, args.batch):
            idx = perm[lo:lo + args.batch]
            x = xtr[idx]
            x = torch.where(flip[idx].view(-1, 1, 1, 1), x.flip(3), x)
            with ctx:
                loss = F.cross_entropy(model(x), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        sync()
        dt = time.perf_counter() - t0
        train_s += dt
        rates.append(n / dt)
        acc = evaluate()
        accs.append(acc)
        if to_target is None and acc >= args.target:
            to_target = train_s
    steady = rates[1:] or rates
    print(json.dumps({"check": "torch_resnet", "precision": args.precision, "batch": args.batch,
                      "samples_per_s": sum(steady) / len(steady), "seconds_to_092": to_target,
                      "train_seconds": train_s, "accuracy": accs, "last_loss": float(loss),
                      "ok": math.isfinite(float(loss)), "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu (smoke)"}), flush=True)


if __name__ == "__main__":
    main()
