# Loads a gorun checkpoint (safetensors, read here with json + numpy only)
# into the PyTorch Net of the distributed tutorial with
# load_state_dict(strict=True), evaluates it on the first N MNIST test
# samples and prints {"accuracy": ..., "loss": ...} as JSON.
#   python3 torch_load.py CHECKPOINT.safetensors MNIST_DIR N
import json, os, struct, sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_mnist import Net, read_idx  # the same Net as the benchmark


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


if __name__ == "__main__":
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
