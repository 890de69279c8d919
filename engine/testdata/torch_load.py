# Loads a gorun checkpoint (safetensors, read here with json + numpy only)
# into the PyTorch Net of the distributed tutorial with
# load_state_dict(strict=True), evaluates it on the first N MNIST test
# samples and prints {"accuracy": ..., "loss": ...} as JSON.
#   python3 torch_load.py CHECKPOINT.safetensors MNIST_DIR N
import gzip, json, os, struct, sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", e
        lo, hi = e["data_offsets"]
        a = np.frombuffer(raw[base + lo:base + hi], dtype="<f4").reshape(e["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        r, c = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, r, c)
    return np.frombuffer(data, np.uint8, offset=8).astype(np.int64)


ckpt, data, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = Net()
model.load_state_dict(load_safetensors(ckpt), strict=True)
model.eval()
x = read_idx(os.path.join(data, "t10k-images-idx3-ubyte.gz"))[:n]
y = torch.from_numpy(read_idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz"))[:n])
x = (torch.from_numpy(x.astype(np.float32)) / 255 - 0.1307) / 0.3081
with torch.no_grad():
    out = model(x)
print(json.dumps({"accuracy": (out.argmax(1) == y).float().mean().item(),
                  "loss": F.nll_loss(out, y).item()}))
