# Loads gorun's model.safetensors of scripts/examples/resnet_fashion.star
# into the same ResNet written as PyTorch modules (torchvision's names:
# conv1, bn1, layerK.0.{conv1,bn1,conv2,bn2,downsample.0,downsample.1}, fc)
# with load_state_dict(strict=True), evaluates it on the first N
# Fashion-MNIST test images and prints {"accuracy": ..., "loss": ...}.
#   python3 torch_resnet_load.py CHECKPOINT.safetensors FASHION_DIR N
import json, os, sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_load import load_safetensors
from torch_mnist import read_idx

WIDTHS = [16, 32, 64]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.downsample is not None:
            x = self.downsample(x)
        return F.relu(y + x)


class ResNet(nn.Module):
    """A stem, one basic block per stage (the first keeps the stem's
    width, the others halve the plane), global average pooling, fc."""

    def __init__(self, widths=WIDTHS, classes=10, stem=None):
        super().__init__()
        stem = stem or widths[0]
        self.conv1 = nn.Conv2d(1, stem, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        cin = stem
        self.stages = len(widths)
        for i, w in enumerate(widths):
            setattr(self, "layer%d" % (i + 1), nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2)))
            cin = w
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        for i in range(self.stages):
            x = getattr(self, "layer%d" % (i + 1))(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


if __name__ == "__main__":
    ckpt, data, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    model = ResNet()
    state = load_safetensors(ckpt)
    # PyTorch keeps num_batches_tracked as int64; load_state_dict copies.
    model.load_state_dict(state, strict=True)
    model.eval()
    x = read_idx(os.path.join(data, "t10k-images-idx3-ubyte.gz"))[:n]
    y = torch.from_numpy(read_idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz"))[:n]).long()
    x = (torch.from_numpy(x.astype(np.float32)) / 255 - 0.2860) / 0.3530
    with torch.no_grad():
        out = model(x.reshape(-1, 1, 28, 28))
    print(json.dumps({"accuracy": (out.argmax(1) == y).float().mean().item(),
                      "loss": F.cross_entropy(out, y).item()}))
