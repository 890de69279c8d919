"""PyTorch's side of gpucheck/run.sh's bf16 check (train(precision = "bf16")).

Writes the initial weights of the MNIST Net without its dropouts
(mnist_nodrop.star's model; PyTorch's default initialisation, seed 1234)
to --init as safetensors, then trains it from them for --steps SGD steps
(lr 0.01, momentum 0.5, NLL) on the first --steps batches of 64 MNIST
training images (normalised as data.mnist does), once in float32 and once
under torch.autocast("cuda", dtype=torch.bfloat16), on the GPU, TF32 off,
and prints one JSON line:
{"check": "torch_bf16", "fp32": [losses], "bf16": [losses], "torch": version}.

    python3 torch_bf16.py --mnist DIR_WITH_IDX_GZ_FILES --init OUT.safetensors
"""
import argparse
import copy
import json
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_bench import load_mnist


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def write_safetensors(path, tensors):
    """The safetensors format by hand: a JSON header, then the raw bytes."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().float().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mnist", required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1234)
    init = Net()
    write_safetensors(a.init, init.state_dict())
    x, y = load_mnist(a.mnist)
    x = ((x - 0.1307) / 0.3081).cuda()
    y = y.cuda()
    out = {"check": "torch_bf16", "torch": torch.__version__}
    for mode in ("fp32", "bf16"):
        net = copy.deepcopy(init).cuda()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
        losses = []
        for s in range(a.steps):
            xb, yb = x[s * a.batch:(s + 1) * a.batch], y[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
                loss = F.nll_loss(net(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        out[mode] = losses
    print(json.dumps(out))


if __name__ == "__main__":
    main()
