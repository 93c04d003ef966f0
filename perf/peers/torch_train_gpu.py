"""perf/peers/torch_train_gpu.py - PyTorch's CUDA training step, the peer of `sluice train --backend cuda`.

    python torch_train_gpu.py [--arch resnet50] [--batch 256] [--image-size 224]
                              [--amp bf16|fp16|none] [--layout channels_last|nchw]
                              [--warmup 10] [--steps 30] [--reps 1] [--lr 0.1]
                              [--label-smoothing 0.1] [--sgd foreach|fused]
                              [--no-tf32] [--seed 1] [--device 0] [--cpu]
                              [--compile] [--profile FILE]

The same step as sluice's (perf/train-gpu runs both): torchvision's model
(weights=None, zero_init_residual=True as sluice's default), one fixed
synthetic batch made once on the GPU (U(-2, 2) images, labels uniform over
1000 classes; no input cost), train mode, CrossEntropyLoss(label_smoothing),
backward, torch.optim.SGD(momentum 0.9, weight decay 5e-5; lr * batch / 256
as sluice scales it), torch.backends.cudnn.benchmark on.
  --amp bf16  torch.autocast(cuda, bfloat16) around forward and loss;
              weights, gradients and SGD stay fp32           (default)
  --amp fp16  autocast(float16) with torch.amp.GradScaler
  --amp none  fp32; cuDNN convolutions may use TF32 (PyTorch's default)
              unless --no-tf32
--layout channels_last (default) converts the model and the batch to NHWC in
memory, as sluice holds activations.
--compile runs torch.compile(model) (default mode, inductor): the compile
happens in the first warmup steps, whose time is reported ("compile_s": the
first warmup step, "warmup_s": all of them) and kept out of images/s (the
timed steps come after the warmup, as without it).
--profile FILE: after the timed steps, torch.profiler over 3 more steps;
FILE gets one JSON object: {"steps": 3, "kernels": [{"name", "calls_per_step",
"ms_per_step"}, ...]} per CUDA kernel (device time; with --cpu, per CPU op),
largest first (perf/train-gpu --profile puts it beside Nsight Compute's
table of sluice).

Validates first: every warmup loss finite and the last one below the first
(the net learns the fixed batch). Then --reps repetitions of --steps steps,
each timed from torch.cuda.synchronize() to torch.cuda.synchronize() with no
host sync inside (losses stay on the GPU until the repetition ends): images/s
= batch * steps / seconds. Every timed loss must be finite and the last one
below the first warmup loss. Prints one JSON line {"system":
"torch-cuda-<amp>", "images_per_sec" (median over reps), "images_per_sec_reps",
versions of torch / CUDA / cuDNN, the GPU's name, peak memory, ...}; exit 1
with a message (no JSON) when there is no GPU or validation fails.
--cpu runs the same code on the CPU: a check of this script on a machine
without a GPU (use a small --batch and --image-size), not a measurement.
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
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--amp", choices=["bf16", "fp16", "none"], default="bf16")
    ap.add_argument("--layout", choices=["channels_last", "nchw"], default="channels_last")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.1, help="per 256 images, as sluice's --lr")
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--sgd", choices=["foreach", "fused"], default="foreach")
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--cpu", action="store_true", help="check this script without a GPU")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model)")
    ap.add_argument("--profile", metavar="FILE", help="torch.profiler table of 3 steps -> FILE")
    a = ap.parse_args()
    if a.warmup < 2 or a.steps < 1 or a.reps < 1 or a.batch < 1:
        sys.exit("torch_train_gpu: --warmup >= 2, --steps >= 1, --reps >= 1, --batch >= 1")
    if not a.cpu and not torch.cuda.is_available():
        sys.exit(f"torch_train_gpu: no GPU: torch.cuda.is_available() is False "
                 f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")

    dtype = "cpu" if a.cpu else "cuda"
    dev = torch.device("cpu") if a.cpu else torch.device("cuda", a.device)
    if a.cpu:
        def sync():
            pass
    else:
        torch.cuda.set_device(dev)

        def sync():
            torch.cuda.synchronize(dev)
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = True
    if a.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    fmt = torch.channels_last if a.layout == "channels_last" else torch.contiguous_format
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}[a.amp]

    t0 = time.perf_counter()
    model = getattr(torchvision.models, a.arch)(weights=None, zero_init_residual=True,
                                                num_classes=a.classes)
    model = model.to(dev, memory_format=fmt).train()
    params = list(model.parameters())
    if a.compile:
        model = torch.compile(model)
    opt = torch.optim.SGD(params, lr=a.lr * a.batch / 256, momentum=0.9,
                          weight_decay=5e-5, **({"fused": True} if a.sgd == "fused" else {"foreach": True}))
    crit = torch.nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
    scaler = torch.amp.GradScaler(dtype) if a.amp == "fp16" else None
    g = torch.Generator(device=dev).manual_seed(a.seed)
    x = (torch.rand(a.batch, 3, a.image_size, a.image_size, device=dev, generator=g) * 4 - 2)
    x = x.contiguous(memory_format=fmt)
    y = torch.randint(0, a.classes, (a.batch,), device=dev, generator=g)
    name = "cpu" if a.cpu else torch.cuda.get_device_name(dev)
    print(f"torch_train_gpu: {a.arch} {a.layout} amp {a.amp} batch {a.batch}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, {name}; "
          f"built in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    def step():
        """One training step; returns the loss as a 0-d GPU tensor (no host sync)."""
        opt.zero_grad(set_to_none=True)
        if amp_dtype is None:
            loss = crit(model(x), y)
        else:
            with torch.autocast(dtype, dtype=amp_dtype):
                loss = crit(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss.detach()

    losses = []
    t_warm = time.perf_counter()
    compile_s = None
    for i in range(a.warmup):
        ts = time.perf_counter()
        loss = step().item()
        if i == 0:
            compile_s = time.perf_counter() - ts
        losses.append(loss)
        print(f"torch_train_gpu: warmup step {i}: loss {loss:.5f}, {time.perf_counter() - ts:.3f} s",
              file=sys.stderr)
        if not math.isfinite(loss):
            sys.exit(f"torch_train_gpu: validation: warmup step {i}: loss {loss}")
    if not losses[-1] < losses[0]:
        sys.exit(f"torch_train_gpu: validation: the loss did not fall over the warmup "
                 f"({losses[0]} -> {losses[-1]})")
    warmup_s = time.perf_counter() - t_warm

    ips, secs = [], []
    for r in range(a.reps):
        sync()
        ts = time.perf_counter()
        dl = [step() for _ in range(a.steps)]
        sync()
        sec = time.perf_counter() - ts
        rl = torch.stack(dl).float().cpu().tolist()
        bad = [v for v in rl if not math.isfinite(v)]
        if bad or not rl[-1] < losses[0]:
            sys.exit(f"torch_train_gpu: validation: rep {r}: losses {rl[0]:.5f} .. {rl[-1]:.5f} "
                     f"({len(bad)} not finite; first warmup loss {losses[0]:.5f})")
        losses.append(rl[-1])
        secs.append(sec)
        ips.append(a.batch * a.steps / sec)
        print(f"torch_train_gpu: rep {r}: {a.steps} steps in {sec:.3f} s, {ips[-1]:.1f} images/s, "
              f"loss {rl[-1]:.5f}", file=sys.stderr)

    if a.profile:
        profile(a.profile, step, sync, a.cpu)

    print(json.dumps({
        "system": f"torch-{dtype}-{a.amp}" + ("-compile" if a.compile else ""), "arch": a.arch,
        "batch": a.batch, "compile": a.compile,
        "compile_s": round(compile_s, 2) if a.compile else None, "warmup_s": round(warmup_s, 2),
        "image_size": a.image_size, "classes": a.classes, "amp": a.amp, "layout": a.layout,
        "sgd": a.sgd, "tf32": not a.cpu and not a.no_tf32 and a.amp == "none",
        "warmup": a.warmup, "steps": a.steps, "reps": a.reps,
        "images_per_sec": round(statistics.median(ips), 2),
        "images_per_sec_reps": [round(v, 2) for v in ips],
        "seconds": round(sum(secs), 4), "step_median_s": round(statistics.median(secs) / a.steps, 5),
        "losses": {"first": round(losses[0], 5), "last_warmup": round(losses[a.warmup - 1], 5),
                   "last": round(losses[-1], 5)},
        "max_memory_gib": 0 if a.cpu else round(torch.cuda.max_memory_allocated(dev) / 2**30, 2),
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "gpu": name,
        "capability": "" if a.cpu else ".".join(map(str, torch.cuda.get_device_capability(dev))),
    }), flush=True)
    return 0


def profile(path, step, sync, cpu):
    """torch.profiler over 3 steps: per kernel (CUDA) or op (CPU), calls and ms per step."""
    from torch.profiler import ProfilerActivity, profile as prof
    steps = 3
    act = [ProfilerActivity.CPU] if cpu else [ProfilerActivity.CUDA]
    sync()
    with prof(activities=act) as p:
        for _ in range(steps):
            step()
        sync()
    rows = {}
    for e in p.events():
        dev = getattr(e, "device_type", None)
        if not cpu and (dev is None or "CUDA" not in str(dev)):
            continue
        # a kernel's own duration on the device; a CPU op's self time (ops nest)
        us = e.self_cpu_time_total if cpu else e.time_range.elapsed_us()
        r = rows.setdefault(e.name, [0, 0.0])
        r[0] += 1
        r[1] += us / 1000.0
    ks = sorted(({"name": k, "calls_per_step": round(v[0] / steps, 2),
                  "ms_per_step": round(v[1] / steps, 4)} for k, v in rows.items()),
                key=lambda r: -r["ms_per_step"])
    with open(path, "w") as f:
        json.dump({"steps": steps, "device": "cpu" if cpu else "cuda", "kernels": ks}, f)
    tot = sum(r["ms_per_step"] for r in ks)
    print(f"torch_train_gpu: profile: {len(ks)} kernels, {tot:.2f} ms per step -> {path}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
