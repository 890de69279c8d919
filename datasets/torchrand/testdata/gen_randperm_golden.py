# Regenerate randperm_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 datasets/torchrand/testdata/gen_randperm_golden.py > datasets/torchrand/testdata/randperm_golden.json
import json
import torch

cases = []
for n, seed in [(1, 0), (2, 5), (10, 0), (10, 1234), (97, 3), (1000, 7), (700, 2**32 + 11)]:
    g = torch.Generator()
    g.manual_seed(seed)
    cases.append({"n": n, "seed": seed, "perm": torch.randperm(n, generator=g).tolist()})
print(json.dumps({"torch": torch.__version__, "cases": cases}))
