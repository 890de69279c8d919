# Golden partitions for partition.star's fractions: the DataPartitioner of
# PyTorch's distributed tutorial (seeds/, "Writing Distributed Applications
# with PyTorch"), copied verbatim, run in CPython 3.
# Regenerate from the repository root:
#   /usr/bin/python3 scripts/testdata/gen_fractions_golden.py > scripts/testdata/fractions_golden.json
import json
import platform
from random import Random


class DataPartitioner(object):

    def __init__(self, data, sizes=[0.7, 0.2, 0.1], seed=1234):
        self.data = data
        self.partitions = []
        rng = Random()
        rng.seed(seed)
        data_len = len(data)
        indexes = [x for x in range(0, data_len)]
        rng.shuffle(indexes)

        for frac in sizes:
            part_len = int(frac * data_len)
            self.partitions.append(indexes[0:part_len])
            indexes = indexes[part_len:]


# (n, world, sizes or None for the tutorial's [1.0 / size] * size, seed)
CASES = [
    (10, 2, None, 1234),
    (10, 3, None, 1234),
    (1000, 3, [0.7, 0.2, 0.1], 1234),
    (1001, 4, None, 0),
    (100, 3, [0.5, 0.25, 0.25], 1),
    (257, 2, [0.3, 0.6], 2**40 + 5),
    (5000, 2, None, 1234),
    (7, 8, None, 1234),
]

cases = []
for n, world, sizes, seed in CASES:
    fr = sizes if sizes is not None else [1.0 / world for _ in range(world)]
    p = DataPartitioner(range(n), fr, seed)
    cases.append({"n": n, "world": world, "sizes": sizes, "seed": seed, "shards": p.partitions})
print(json.dumps({"python": platform.python_version(), "cases": cases}))
