# Regenerate resnet_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/runner/testdata/gen_resnet_golden.py > engine/runner/testdata/resnet_golden.json
# The model is resnet_test.go's resnetScript: a stem conv → bn → relu, a
# basic block, a strided basic block with a 1×1 downsample, global average
# pooling and a linear head, with the submodule names a torchvision-style
# ResNet uses. One training step's loss, every gradient and the running
# statistics after it; then the loss in eval mode (running statistics).
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_resnet_load import ResNet  # the same module as the example's check

torch.manual_seed(0)


net = ResNet(widths=[4, 8], classes=4)
with torch.no_grad():
    for name, p in net.named_parameters():
        p.copy_(torch.randn(p.shape) * (0.5 if p.dim() > 1 else 0.3) + (1.0 if name.endswith("bn1.weight") or name.endswith("bn2.weight") else 0.0))
x = torch.randn(6, 1, 8, 8)
y = torch.tensor([0, 3, 1, 2, 3, 1])
params = {k: {"shape": list(v.shape), "data": v.flatten().tolist()} for k, v in net.named_parameters()}
net.train()
out = net(x)
loss = F.cross_entropy(out, y)
smoothed = F.cross_entropy(out, y, label_smoothing=0.1).item()
loss.backward()
state = {k: {"shape": list(v.shape), "data": v.flatten().float().tolist()} for k, v in net.state_dict().items()
         if k.endswith("running_mean") or k.endswith("running_var") or k.endswith("num_batches_tracked")}
net.eval()
with torch.no_grad():
    eval_loss = F.cross_entropy(net(x), y).item()
print(json.dumps({"x": x.flatten().tolist(), "y": y.tolist(), "params": params,
                  "state_dict_keys": list(net.state_dict().keys()),
                  "loss": loss.item(), "grads": {k: v.grad.flatten().tolist() for k, v in net.named_parameters()},
                  "stats": state, "eval_loss": eval_loss, "smoothed_loss": smoothed}))
