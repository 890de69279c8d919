# Golden index lists for partition.star's strided / strided_with: what
# torch.utils.data.DistributedSampler yields for every rank.
# Regenerate with PyTorch 1.13 (Debian python3-torch), from the repository root:
#   /usr/bin/python3 scripts/testdata/gen_strided_golden.py > scripts/testdata/strided_golden.json
import json
import torch
from torch.utils.data import DistributedSampler

# (n, world, seed, epoch, shuffle, drop_last)
CASES = [
    (10, 2, 0, 0, True, False),
    (10, 3, 0, 0, True, False),       # n not divisible by world: pad 2
    (10, 3, 1234, 3, True, False),
    (7, 4, 42, 0, True, False),
    (2, 5, 1234, 0, True, False),     # world > n
    (3, 8, 5, 3, True, False),        # padding (5) longer than the list (3)
    (1, 3, 7, 3, True, False),
    (1000, 8, 1234, 0, True, False),
    (1001, 3, 1234, 3, True, False),
    (5000, 2, 1234, 1, True, False),
    (100, 4, 2**33 + 1, 0, True, False),  # torch keeps the seed's low 32 bits
    (10, 3, 1234, 0, True, True),     # drop_last: trim to 9
    (1001, 8, 1234, 3, True, True),
    (2, 5, 0, 0, True, True),         # drop_last with world > n: nothing
    (10, 4, 0, 0, False, False),      # no shuffle
    (11, 4, 0, 3, False, True),
    (3, 8, 0, 0, False, False),
]

cases = []
for n, world, seed, epoch, shuffle, drop_last in CASES:
    shards = []
    for rank in range(world):
        s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle,
                               seed=seed, drop_last=drop_last)
        s.set_epoch(epoch)
        shards.append(list(iter(s)))
    cases.append({"n": n, "world": world, "seed": seed, "epoch": epoch,
                  "shuffle": shuffle, "drop_last": drop_last, "shards": shards})
print(json.dumps({"torch": torch.__version__, "cases": cases}))
