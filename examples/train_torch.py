#!/usr/bin/env python3
"""Train a torchvision ResNet on sluice shards with a plain PyTorch loop.

    python examples/train_torch.py --data data/fmnist --image-size 32 --epochs 2
    torchrun --nproc_per_node 2 examples/train_torch.py --data data/imagenet --device cuda

The input pipeline is sluice.Pipeline in place of a DataLoader, in the
loop people write for one (`for epoch in range(E): for x, y in pipe:`):
each loop over the pipeline is one epoch, and batches are DLPack tensors
taken by torch.from_dlpack without a copy. Under torchrun (RANK,
WORLD_SIZE, LOCAL_RANK in the environment) each rank reads its own share of
every epoch (the default rank_split="records": the same number of batches
per epoch on every rank, whatever the shards' sizes) and the model is wrapped in
DistributedDataParallel (gloo on the CPU, nccl on GPUs). --checkpoint saves
the model, the optimizer and the pipeline's state_dict() atomically at each
epoch's end (and at --steps), --eval-split evaluates there; --resume
continues with exactly the batches an uninterrupted run would see.

Tested with Debian's python3-torch 1.13 (CPU, gloo) on Python 3.11, whose
torchrun fails before starting a rank (its own bug: "in to_map" on Python
3.11). Without torchrun, start one process per rank with the variables
torchrun would set:

    for r in 0 1; do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
        python examples/train_torch.py --data data/fmnist --image-size 32 --epochs 1 &
    done; wait
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision

import sluice


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="dataset directory (sluice convert's output)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--eval-split", default=None, help="evaluate on this split after each epoch")
    ap.add_argument("--model", default="resnet18", help="a torchvision.models name")
    ap.add_argument("--num-classes", type=int, default=0, help="default: dataset.json's")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: all)")
    ap.add_argument("--lr", type=float, default=0.1, help="for a global batch of 256 (scaled)")
    ap.add_argument("--wd", type=float, default=5e-5)
    ap.add_argument("--workers", type=int, default=0, help="sluice decode threads (0: all cores)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label-offset", type=int, default=None,
                    help="subtracted from stored labels (TF ImageNet shards: 1)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--checkpoint", default=None, help="file to save (and --resume from)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--log-every", type=int, default=20)
    return ap.parse_args()


def num_classes(args):
    if args.num_classes:
        return args.num_classes
    try:
        with open(os.path.join(args.data, "dataset.json")) as f:
            return int(json.load(f)["num_classes"])
    except (OSError, KeyError, ValueError):
        raise SystemExit("train_torch.py: no dataset.json with num_classes: pass --num-classes")


def save_atomic(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def evaluate(model, args, device, rank, world):
    # train=False: one pass, each record once (on each rank its share)
    pipe = sluice.Pipeline(args.data, split=args.eval_split, image_size=args.image_size,
                           batch=args.batch, workers=args.workers, train=False,
                           device=None if device.type == "cpu" else str(device),
                           rank=rank, world=world, label_offset=args.label_offset)
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for images, labels in pipe:
            x = torch.from_dlpack(images)
            y = torch.from_dlpack(labels).to(device)
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.numel()
    model.train()
    pipe.close()
    if world > 1:
        t = torch.tensor([correct, total], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        correct, total = t.tolist()
    return correct / max(total, 1)


def main():
    args = parse_args()
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(f"cuda:{local}" if args.device == "cuda" else "cpu")
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(args.seed)

    model = getattr(torchvision.models, args.model)(num_classes=num_classes(args)).to(device)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local] if device.type == "cuda" else None)
    lr = args.lr * args.batch * world / 256
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=args.wd)

    # The three lines that replace a DataLoader: make, iterate, from_dlpack.
    pipe = sluice.Pipeline(args.data, split=args.split, image_size=args.image_size,
                           batch=args.batch, workers=args.workers, seed=args.seed,
                           rank=rank, world=world,
                           device=None if device.type == "cpu" else str(device),
                           label_offset=args.label_offset)
    step = done = 0  # steps taken, epochs done
    if args.resume and args.checkpoint and os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint, map_location=device)
        (model.module if world > 1 else model).load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        pipe.load_state_dict(ck["data"][rank] if isinstance(ck["data"], list) else ck["data"])
        step, done = ck["step"], ck["epochs_done"]
        if rank == 0:
            print(f"resumed at step {step} from {args.checkpoint}", flush=True)

    def checkpoint():
        if not args.checkpoint:
            return
        states = [pipe.state_dict()]
        if world > 1:  # every rank's data position, saved by rank 0
            states = [None] * world
            dist.all_gather_object(states, pipe.state_dict())
        if rank == 0:
            save_atomic({"model": (model.module if world > 1 else model).state_dict(),
                         "optimizer": opt.state_dict(), "step": step, "epochs_done": done,
                         "data": states if world > 1 else states[0]}, args.checkpoint)

    model.train()
    t0, seen, loss = time.perf_counter(), 0, torch.zeros(())
    if rank == 0:
        print(f"{pipe.records_per_epoch} records per epoch, {len(pipe)} steps in the next",
              flush=True)
    for epoch in range(done, args.epochs):
        # One epoch: the loop ends with the batch whose batch.epoch_end is
        # True (the same step on every rank); a loop left by --steps is
        # finished by the next run's first loop (--resume).
        for batch in pipe:
            images, labels = batch
            x = torch.from_dlpack(images)
            y = torch.from_dlpack(labels).to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            seen += y.numel()
            if rank == 0 and step % args.log_every == 0:
                dt = time.perf_counter() - t0
                print(f"step {step} epoch {batch.epoch} loss {loss.item():.4f} "
                      f"{seen * world / dt:.0f} images/s", flush=True)
            if args.steps and step >= args.steps:
                break
        if batch.epoch_end:
            # The epoch is done: the model has trained on it and the
            # pipeline's position is after it, so the checkpoint's two
            # halves agree. Evaluate and checkpoint once per epoch.
            done = epoch + 1
            checkpoint()
            if args.eval_split:
                acc = evaluate(model, args, device, rank, world)
                if rank == 0:
                    print(f"epoch {epoch} top1 {acc:.4f}", flush=True)
        if args.steps and step >= args.steps:
            if not batch.epoch_end:
                checkpoint()  # stopped by --steps inside an epoch
            break
    if rank == 0:
        print(f"done: {step} steps, final loss {loss.item():.4f}", flush=True)
    pipe.close()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
        # torch 1.13's gloo can deadlock when the DDP model is freed at exit
        # (the reducer's process group waits for a gloo thread that waits for
        # the GIL); the checkpoint is saved and the output flushed: leave now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
