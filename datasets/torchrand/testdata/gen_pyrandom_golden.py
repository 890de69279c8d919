# Regenerate pyrandom_golden.json with CPython 3 (Debian's /usr/bin/python3):
#   /usr/bin/python3 datasets/torchrand/testdata/gen_pyrandom_golden.py > datasets/torchrand/testdata/pyrandom_golden.json
# Seeds are written as decimal strings: some do not fit in 64 bits.
import json
import platform
import random

shuffles = []
for n, seed in [(0, 0), (1, 0), (2, 0), (10, 0), (10, 1), (10, 1234), (100, 1234), (1000, 1234),
                (257, 2**40 + 5), (300, -7), (50, 2**70 + 3), (5000, 42)]:
    x = list(range(n))
    random.Random(seed).shuffle(x)
    shuffles.append({"n": n, "seed": str(seed), "perm": x})

bits = []
for seed, ks in [(0, [1, 7, 32, 33, 40, 64, 5]), (2**40 + 5, [32, 32, 32, 40, 64]), (1234, [3, 31, 63, 2])]:
    r = random.Random(seed)
    bits.append({"seed": str(seed), "k": ks, "bits": [str(r.getrandbits(k)) for k in ks]})

print(json.dumps({"python": platform.python_version(), "shuffles": shuffles, "getrandbits": bits}))
