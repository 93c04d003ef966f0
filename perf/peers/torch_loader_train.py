#!/usr/bin/env python3
"""perf/peers/torch_loader_train.py - one PyTorch training loop, fed by sluice.Pipeline,
by the DataLoader of perf/peers/torch_pipeline.py, or by DALI's CPU pipeline of
perf/peers/dali_pipeline.py (perf/loader-compare runs it).

    torch_loader_train.py --loader sluice|dataloader|dali|imagefolder --data DIR [--model resnet18|tiny|none]
                          [--image-size 224] [--batch 32] [--workers 2] [--threads 2]
                          [--warmup 3] [--steps 12] [--seed 1]

The loop is the same for both loaders: images (N, 3, S, S) float32 normalized
and labels int64 from the loader; forward, cross-entropy, backward, SGD step
(--model tiny: a light CNN, where the loader's cost shows; --model none: the
batch is only read, x.sum(), to time the loaders alone).
Both do the train transform (random-resized-crop 0.08-1, flip, normalize):
sluice in its C pipeline (--workers threads), the DataLoader with PIL and
torchvision.transforms in --workers processes (torch_pipeline.py's dataset:
records found through the shards' index files), DALI with fn.readers.tfrecord,
image_random_crop (libjpeg-turbo ROI decode), resize and crop_mirror_normalize
on --workers CPU threads (device_id=None), its batches taken as torch tensors
over DALI's own buffers (torch.from_numpy of the TensorList: no copy; valid
until the next run(), as sluice's lent batches until the next step).

Timing: --warmup steps first, then --steps steps; images/s over that window
and CPU seconds per image of the whole process tree (this process and the
DataLoader's worker processes: utime + stime from /proc, read at the window's
start and end). Prints one JSON line.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s():
    """utime + stime of this process and all its descendants (seconds)."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2:].split()  # after "pid (comm) "
        procs[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK)
    mine, total, grew = {os.getpid()}, 0.0, True
    while grew:
        grew = False
        for pid, (ppid, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    for pid in mine:
        total += procs.get(pid, (0, 0.0))[1]
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loader", choices=("sluice", "dataloader", "dali", "imagefolder"),
                    required=True)
    ap.add_argument("--data", required=True,
                    help="shards; for --loader imagefolder a class-per-folder tree of images")
    ap.add_argument("--split", default="train")
    ap.add_argument("--model", default="resnet18",
                    help="a torchvision.models name, tiny (a light CNN) or none (no step)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch compute threads")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    import torchvision

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.loader == "sluice":
        import sluice
        pipe = sluice.Pipeline(args.data, split=args.split, image_size=args.image_size,
                               batch=args.batch, workers=args.workers, seed=args.seed,
                               epochs=0, drop_remainder=True)
        batches = ((torch.from_dlpack(b[0]), torch.from_dlpack(b[1])) for b in pipe)
        version = sluice.__version__
    elif args.loader == "dali":
        import numpy as np
        import nvidia.dali as dali
        from dali_pipeline import make_pipeline, shards_of
        files, idx = shards_of(args.data, args.split)
        dpipe = make_pipeline(files, idx, args.batch, args.workers, args.seed, args.image_size,
                              10000)  # the shuffle buffer of sluice.Pipeline's default

        def forever():
            while True:
                img, lab = dpipe.run()
                yield (torch.from_numpy(np.asarray(img.as_tensor())),
                       torch.from_numpy(np.asarray(lab.as_tensor())).view(-1))
        batches = forever()
        version = dali.__version__
    else:
        if args.loader == "imagefolder":
            # torchvision's own way: ImageFolder (PIL decodes each whole file) and
            # the same transforms as torch_pipeline.py's dataset
            from torchvision import transforms
            from torch_pipeline import MEAN, STD
            ds = torchvision.datasets.ImageFolder(args.data, transform=transforms.Compose([
                transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip(),
                transforms.ToTensor(), transforms.Normalize(MEAN, STD)]))
        else:
            from torch_pipeline import build_dataset
            ds = build_dataset(args.data, args.split, args.image_size)
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                             num_workers=args.workers, persistent_workers=True,
                                             prefetch_factor=2, drop_last=True)

        def forever():
            while True:
                yield from loader
        batches = forever()
        version = torch.__version__

    model = None
    if args.model == "tiny":
        # a light CNN (about 25 MFLOPs a 224x224 image, ~70x less than
        # ResNet-18): a step cheap enough that the loader's cost shows
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 7, stride=4, padding=3), torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
            torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(32, 1000))
    elif args.model != "none":
        model = getattr(torchvision.models, args.model)(num_classes=1000)
    if model is not None:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        model.train()

    def step(x, y):
        if model is None:
            return float(x.sum()) + float(y.sum())
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)

    for _ in range(args.warmup):
        x, y = next(batches)
        assert x.shape == (args.batch, 3, args.image_size, args.image_size), x.shape
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        step(x, y)
    c0, t0 = tree_cpu_s(), time.perf_counter()
    for _ in range(args.steps):
        x, y = next(batches)
        step(x, y)
    dt, cpu = time.perf_counter() - t0, tree_cpu_s() - c0
    n = args.steps * args.batch
    print(json.dumps({"loader": args.loader, "model": args.model, "images_per_sec": n / dt,
                      "cpu_s_per_image": cpu / n, "seconds": dt, "images": n,
                      "workers": args.workers, "threads": args.threads,
                      "image_size": args.image_size, "batch": args.batch,
                      "version": version, "torch": torch.__version__}), flush=True)
    os._exit(0)  # skip the DataLoader's slow worker shutdown


if __name__ == "__main__":
    main()
