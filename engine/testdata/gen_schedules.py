# Regenerate schedules_golden.json with PyTorch 1.13 (Debian python3-torch):
#   /usr/bin/python3 engine/testdata/gen_schedules.py > engine/testdata/schedules_golden.json
# The learning rate of every optimizer step under PyTorch's lr_scheduler
# classes, stepped as gorun's sched.* are: StepLR once per epoch, the others
# after every optimizer step. Base lr 0.1; 5 epochs of 3 steps.
import json
import torch

EPOCHS, PER_EPOCH = 5, 3
TOTAL = EPOCHS * PER_EPOCH


def opt():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def per_step(make):
    o = opt()
    s = make(o)
    out = []
    for _ in range(TOTAL):
        out.append(o.param_groups[0]["lr"])
        o.step()
        s.step()
    return out


def step_lr():
    o = opt()
    s = torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
    out = []
    for _ in range(EPOCHS):
        for _ in range(PER_EPOCH):
            out.append(o.param_groups[0]["lr"])
            o.step()
        s.step()
    return out


L = torch.optim.lr_scheduler
cases = {
    "step": {"every": 2, "gamma": 0.5, "lr": step_lr()},
    "cosine": {"min_lr": 0.001, "lr": per_step(lambda o: L.CosineAnnealingLR(o, T_max=TOTAL, eta_min=0.001))},
    "warmup_cosine": {"steps": 4, "start_factor": 0.25,
                      "lr": per_step(lambda o: L.SequentialLR(o, [L.LinearLR(o, start_factor=0.25, total_iters=4),
                                                                  L.CosineAnnealingLR(o, T_max=TOTAL - 4)], milestones=[4]))},
    "onecycle": {"max_lr": 0.5, "pct_start": 0.3,
                 "lr": per_step(lambda o: L.OneCycleLR(o, max_lr=0.5, total_steps=TOTAL, pct_start=0.3, cycle_momentum=False))},
}
print(json.dumps({"epochs": EPOCHS, "per_epoch": PER_EPOCH, "cases": cases}, indent=1))
