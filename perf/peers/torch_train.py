"""perf/peers/torch_train.py - PyTorch's CPU training step, the peer of perf/train_cpu.c.

    python torch_train.py [--arch resnet50] [--batch 32] [--image-size 224]
                          [--threads N] [--warmup 2] [--steps 3] [--lr 0.05]
                          [--seed 1] [--layout nchw|channels_last]
                          [--precision fp32|bf16]

The same step as sluice's: torchvision's model (weights=None,
zero_init_residual=True as sluice's default), one fixed synthetic batch
(U(-2, 2) images, labels uniform over 1000 classes), train mode,
CrossEntropyLoss, backward, torch.optim.SGD(momentum 0.9, weight decay 5e-5),
torch.set_num_threads(threads). --layout channels_last converts the model
and the batch to torch.channels_last (NHWC in memory, as sluice holds its
activations). --precision bf16 runs the forward and the loss under
torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's CPU mixed precision
(bf16 convolutions and matmuls on oneDNN, fp32 weights and optimizer; the
system is then "torch-<layout>-bf16"). Validates as train_cpu does (finite
losses, the last warmup loss below the first; every timed loss below the first), then times --steps
steps; prints one JSON line {"system": "torch-<layout>", "images_per_sec",
"images_per_cpu_sec" (CPU time of every thread of the process), ...}.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torchvision


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=0, help="0: all cores")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layout", choices=["nchw", "channels_last"], default="nchw")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    if a.warmup < 2 or a.steps < 1:
        sys.exit("torch_train: --warmup >= 2 and --steps >= 1")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    fmt = torch.channels_last if a.layout == "channels_last" else torch.contiguous_format

    t0 = time.perf_counter()
    model = getattr(torchvision.models, a.arch)(weights=None, zero_init_residual=True)
    model = model.to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-5)
    crit = torch.nn.CrossEntropyLoss()
    x = (torch.rand(a.batch, 3, a.image_size, a.image_size) * 4 - 2).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (a.batch,))
    print(f"torch_train: {a.arch} {a.layout} {a.precision}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, built in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)

    bf16 = a.precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = crit(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    losses = []
    for i in range(a.warmup):
        ts = time.perf_counter()
        losses.append(step())
        print(f"torch_train: warmup step {i}: loss {losses[-1]:.5f}, "
              f"{time.perf_counter() - ts:.2f} s", file=sys.stderr)
        if not math.isfinite(losses[-1]):
            sys.exit(f"torch_train: validation: warmup step {i}: loss {losses[-1]}")
    if not losses[-1] < losses[0]:
        sys.exit(f"torch_train: validation: the loss did not fall ({losses[0]} -> {losses[-1]})")
    sec = []
    c0 = time.process_time()  # every thread of the process
    for i in range(a.steps):
        ts = time.perf_counter()
        loss = step()
        sec.append(time.perf_counter() - ts)
        losses.append(loss)
        print(f"torch_train: step {i}: loss {loss:.5f}, {sec[-1]:.2f} s", file=sys.stderr)
        if not (math.isfinite(loss) and loss < losses[0]):
            sys.exit(f"torch_train: step {i}: loss {loss} (first warmup step: {losses[0]})")
    total, cpu = sum(sec), time.process_time() - c0
    print(json.dumps({
        "system": f"torch-{a.layout}" + ("-bf16" if bf16 else ""), "precision": a.precision,
        "arch": a.arch, "batch": a.batch,
        "image_size": a.image_size, "threads": torch.get_num_threads(), "steps": a.steps,
        "images_per_sec": round(a.batch * a.steps / total, 3), "seconds": round(total, 3),
        "cpu_seconds": round(cpu, 3), "images_per_cpu_sec": round(a.batch * a.steps / cpu, 4),
        "step_median_s": round(statistics.median(sec), 3),
        "losses": [round(v, 5) for v in losses], "torch": torch.__version__,
        "torchvision": torchvision.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
