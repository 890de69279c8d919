"""PyTorch eager reference for gorun's CUDA backend (gpucheck/run.sh).

Trains the MNIST Net of scripts/examples/mnist.star (the distributed
tutorial's Net: conv1, max-pool, ReLU, conv2, dropout2d, max-pool, ReLU,
fc1, ReLU, dropout, fc2, log_softmax) with SGD (lr 0.01, momentum 0.5) and
the NLL loss for one epoch on one GPU, the whole training set already on
the GPU (batches are gathered there by index, as gorun does), and prints
one JSON line: {"check": "torch", "batch": B, "samples_per_s": ...}.

    python3 torch_bench.py --batch 64 [--mnist DIR_WITH_IDX_GZ_FILES]
"""
import argparse
import gzip
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, 0.5, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def load_mnist(folder):
    """The training images (scaled to [0, 1]) and labels, or None."""
    try:
        with gzip.open(os.path.join(folder, "train-images-idx3-ubyte.gz")) as f:
            images = f.read()[16:]
        with gzip.open(os.path.join(folder, "train-labels-idx1-ubyte.gz")) as f:
            labels = f.read()[8:]
    except OSError:
        return None
    x = torch.frombuffer(bytearray(images), dtype=torch.uint8).reshape(-1, 1, 28, 28).float() / 255
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--mnist", default="")
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(1234)
    data = load_mnist(args.mnist) if args.mnist else None
    source = "mnist"
    if data is None:
        source = "random"
        data = (torch.rand(60000, 1, 28, 28), torch.randint(0, 10, (60000,)))
    x_all, y_all = data[0].to(dev), data[1].to(dev)
    n = x_all.shape[0]
    model = Net().to(dev)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)

    def step(idx):
        x, y = x_all[idx], y_all[idx]
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    perm = torch.randperm(n, device=dev)
    for i in range(args.warmup):
        step(perm[i * args.batch:(i + 1) * args.batch])
    torch.cuda.synchronize()
    perm = torch.randperm(n, device=dev)
    t0 = time.perf_counter()
    loss = None
    for lo in range(0, n, args.batch):
        loss = step(perm[lo:lo + args.batch])
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(json.dumps({"check": "torch", "batch": args.batch, "samples_per_s": n / dt, "seconds": dt,
                      "last_loss": float(loss), "data": source, "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(0), "ok": True}), flush=True)


if __name__ == "__main__":
    main()
