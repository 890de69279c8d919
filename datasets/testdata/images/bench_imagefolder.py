#!/usr/bin/python3
"""torchvision's side of BenchmarkImages: one pass of ImageFolder +
DataLoader(num_workers = 2) over a folder of images, decoded and resized
as data.images does (Grayscale(1) for one channel, Resize((H, W)) bilinear,
ToTensor, Normalize). Prints {"images": n, "seconds": s} for the second
pass (the first starts the workers and warms the file cache).

    bench_imagefolder.py DIR HEIGHT WIDTH CHANNELS
"""
import json, sys, time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    root, h, w, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    steps = [transforms.Grayscale(1)] if c == 1 else []
    steps += [transforms.Resize((h, w)), transforms.ToTensor(), transforms.Normalize([0.5] * c, [0.25] * c)]
    ds = datasets.ImageFolder(root, transform=transforms.Compose(steps))
    loader = DataLoader(ds, batch_size=64, shuffle=False, num_workers=2, persistent_workers=True)
    best = None
    for _ in range(2):
        t0 = time.perf_counter()
        n = 0
        for x, y in loader:
            n += x.shape[0]
        best = time.perf_counter() - t0
    print(json.dumps({"images": n, "seconds": best, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
