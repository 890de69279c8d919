# The reference for gorun's training benchmarks: the MNIST Net of PyTorch's
# distributed tutorial, SGD lr 0.01 momentum 0.5, NLL loss, on MNIST read
# from the given folder of IDX .gz files. Prints one JSON line:
#   {"samples_per_s": ..., "samples": ..., "seconds": ..., "world": ...}
#
#   python3 torch_mnist.py --data DIR --steps 300 --batch 64            # one process
#   python3 torch_mnist.py --data DIR --steps 300 --batch 128 --world 2 # DDP over gloo
#   python3 torch_mnist.py --model resnet --data FASHION_DIR ...         # resnet_fashion.star's ResNet
#   python3 torch_mnist.py --model gpt --data /usr/share/games/fortunes  # gpt_text.star's GPT (samples = windows)
#
# --model resnet is scripts/examples/resnet_fashion.star's ResNet
# (torch_resnet_load.py) with its recipe: cross-entropy, SGD lr 0.1
# momentum 0.9 weight decay 5e-4, Fashion-MNIST normalisation.
# With --world N, N processes each take batch/N samples per step (a global
# batch, as gorun's batch_size) and average gradients with
# DistributedDataParallel; each process uses one thread.
import argparse, gzip, json, os, struct, sys, time

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
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8).astype(np.int64)


def worker(rank, args, result):
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    world = args.world
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.model == "gpt":
        # gpt_text.star's GPT on the fortunes text, byte windows of 64.
        from torch_gpt_load import GPT, T, V, read_text
        ids = np.frombuffer(read_text(args.data), dtype=np.uint8).astype(np.int64)
        n = (len(ids) - 1) // T
        x = torch.from_numpy(np.stack([ids[i * T:i * T + T] for i in range(n)]))
        y = torch.from_numpy(np.stack([ids[i * T + 1:i * T + T + 1] for i in range(n)]))
        model = GPT()
        lossf = lambda out, t: F.cross_entropy(out.reshape(-1, V), t.reshape(-1))
        if world > 1:
            model = nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        return run(rank, args, result, model, opt, lossf, x, y, world)
    x = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))
    mean, std = (0.2860, 0.3530) if args.model == "resnet" else (0.1307, 0.3081)
    x = (torch.from_numpy(x.astype(np.float32)) / 255 - mean) / std
    y = torch.from_numpy(y)
    if args.model == "resnet":
        from torch_resnet_load import ResNet
        model, lossf = ResNet(), F.cross_entropy
        opt_args = dict(lr=0.1, momentum=0.9, weight_decay=5e-4)
    else:
        model, lossf = Net(), F.nll_loss
        opt_args = dict(lr=0.01, momentum=0.5)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), **opt_args)
    run(rank, args, result, model, opt, lossf, x, y, world)


def run(rank, args, result, model, opt, lossf, x, y, world):
    local = args.batch // world
    g = torch.Generator()
    g.manual_seed(1234)
    order = torch.randperm(len(y), generator=g)
    model.train()

    def step(s):
        idx = order[((s * world + rank) * local) % (len(y) - local):][:local]
        opt.zero_grad()
        loss = lossf(model(x[idx]), y[idx])
        loss.backward()
        opt.step()

    for s in range(args.warmup):
        step(s)
    if world > 1:
        torch.distributed.barrier()
    t0 = time.perf_counter()
    for s in range(args.steps):
        step(args.warmup + s)
    if world > 1:
        torch.distributed.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        result.put({"samples_per_s": args.steps * args.batch / dt, "samples": args.steps * args.batch,
                    "seconds": dt, "world": world, "torch": torch.__version__})
    if world > 1:
        torch.distributed.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default="net", choices=["net", "resnet", "gpt"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    import torch.multiprocessing as mp
    if args.world == 1:
        import queue
        q = queue.Queue()
        worker(0, args, q)
    else:
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        mp.spawn(worker, args=(args, q), nprocs=args.world, join=True)
    print(json.dumps(q.get()))


if __name__ == "__main__":
    main()
