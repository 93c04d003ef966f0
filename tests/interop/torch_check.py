#!/usr/bin/env python3
"""PyTorch's side of tests/interop/test_torch.c: sluice checkpoints in torchvision.

    torch_check.py logits --arch A --classes K --state F.safetensors
                          --input X.f32 --shape N,H,W --out Y.f32
        Build torchvision's A (weights=None, num_classes=K; resnet20 is the
        CIFAR net below), load_state_dict(strict=True) from sluice's file,
        eval(), logits of X to Y.
    torch_check.py make --arch A --classes K --seed S --state F.safetensors
                        --input X.f32 --shape N,H,W --out Y.f32
        torch.manual_seed(S), build A, give every BN random running stats
        (train-mode passes over random data with momentum None, so the
        statistics are real averages and num_batches_tracked counts them) and
        a random affine; save the state dict to F as safetensors
        (num_batches_tracked as I64 scalars), eval logits of X to Y.
    torch_check.py step --arch A --classes K --state S0 --after S1,S2,...
                        --input X.f32 --labels L.i32 --shape N,H,W
                        --lr LR --momentum M --wd WD --bn-momentum BM
        sluice's states around its SGD steps on (X, L) (S1... with the
        optimizer's momentum buffers): from each S(i), one train-mode step
        as sluice takes it (CrossEntropyLoss, SGD with weight decay on conv
        and fc weights only) in float32 and float64; compare S(i+1)'s
        weights, running statistics, num_batches_tracked and momentum
        buffers, and torch's float32, with float64.

X is sluice's input, (N, H, W, 3) float32 NHWC, raw little-endian; torch
gets it permuted to NCHW. Y is (N, K) float32. L is (N,) int32. Each
command prints one JSON line ({"ok": true, ...}) that the C test reads.

There is no safetensors package here, so the format is read and written by
hand (https://huggingface.co/docs/safetensors): u64 LE header length, the
JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
{...}}, then the data, offsets relative to its start.
"""
import argparse
import json
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision
from torchvision.models.resnet import BasicBlock

ST_DTYPES = {"F32": np.dtype("<f4"), "I64": np.dtype("<i8"), "F16": np.dtype("<f2")}


def st_read(path):
    """(dict name -> torch tensor in file order, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + hlen
    out = {}
    for name, d in header.items():
        b, e = d["data_offsets"]
        arr = np.frombuffer(blob, dtype=ST_DTYPES[d["dtype"]], count=(e - b) // ST_DTYPES[d["dtype"]].itemsize,
                            offset=base + b)
        out[name] = torch.from_numpy(arr.reshape(d["shape"]).copy())
    return out, meta


def st_write(path, tensors, meta):
    """tensors: dict name -> torch tensor (float32 or int64), written in order."""
    header, chunks, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.float32:
            dt, raw = "F32", t.numpy().astype("<f4").tobytes()
        elif t.dtype == torch.int64:
            dt, raw = "I64", t.numpy().astype("<i8").tobytes()
        else:
            raise SystemExit(f"st_write: {name}: dtype {t.dtype} not handled")
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


class CifarResNet(nn.Module):
    """sluice's resnet20 (He et al. 2016 sec. 4.2) from torchvision's BasicBlock:
    3x3 stem, 3 stages x 3 blocks at w, 2w, 4w, option-B (1x1 conv + BN)
    shortcuts named downsample.{0,1}, as train/model/resnet.c builds it."""

    def __init__(self, classes, width=16, blocks=(3, 3, 3)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        inplanes = width
        for s, nb in enumerate(blocks):
            planes, layers = width << s, []
            for b in range(nb):
                stride = 2 if s > 0 and b == 0 else 1
                ds = None
                if stride != 1 or inplanes != planes:
                    ds = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
                layers.append(BasicBlock(inplanes, planes, stride, ds))
                inplanes = planes
            setattr(self, f"layer{s + 1}", nn.Sequential(*layers))
        self.nstages = len(blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        for s in range(self.nstages):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(arch, classes, width=16):
    if arch == "resnet20":
        return CifarResNet(classes, width)
    if arch in ("resnet18", "resnet50"):
        return getattr(torchvision.models, arch)(weights=None, num_classes=classes)
    raise SystemExit(f"torch_check: unknown arch {arch}")


def read_input(path, shape):
    n, h, w = shape
    x = np.fromfile(path, dtype="<f4")
    if x.size != n * h * w * 3:
        raise SystemExit(f"torch_check: {path}: {x.size} floats, want {n}x{h}x{w}x3")
    # ours is NHWC; torch's convs take NCHW
    return torch.from_numpy(x.reshape(n, h, w, 3).copy()).permute(0, 3, 1, 2).contiguous()


def load_ours(model, path):
    """load_state_dict(strict=True) from sluice's file; the optimizer's own
    entries ("optimizer.*", train.h) are not model state and are set aside."""
    state, meta = st_read(path)
    opt = [k for k in state if k.startswith("optimizer.")]
    for k in opt:
        del state[k]
    res = model.load_state_dict(state, strict=True)
    return len(state), len(opt), meta, res


def cmd_logits(a):
    model = build(a.arch, a.classes, a.width)
    count, nopt, meta, _ = load_ours(model, a.state)
    model.eval()
    with torch.no_grad():
        y = model(read_input(a.input, a.shape))
    y.numpy().astype("<f4").tofile(a.out)
    return {"tensors": count, "optimizer_entries": nopt, "metadata": meta,
            "logit_absmax": float(y.abs().max())}


def cmd_make(a):
    torch.manual_seed(a.seed)
    model = build(a.arch, a.classes, a.width)
    n, h, w = a.shape
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        # Real running statistics of random data: momentum None averages the
        # passes, so eval activations stay normalized through the net.
        for m in bns:
            m.momentum = None
        model.train()
        passes = 2 + a.seed % 3
        for _ in range(passes):
            model(torch.randn(2, 3, h, w) * 1.5 + 0.2)
        for m in bns:
            m.momentum = 0.1
            m.weight.uniform_(0.6, 1.4)  # gamma 1 / beta 0 would hide a swapped pair
            m.bias.normal_(0.0, 0.2)
            m.num_batches_tracked.add_(1000 * a.seed + 7)
    model.eval()
    state = model.state_dict()
    st_write(a.state, state, {"format": "pt", "source": "tests/interop/torch_check.py"})
    with torch.no_grad():
        y = model(read_input(a.input, a.shape))
    y.numpy().astype("<f4").tofile(a.out)
    nbt = [int(v) for k, v in state.items() if k.endswith("num_batches_tracked")]
    return {"tensors": len(state), "nbt_first": nbt[0], "logit_absmax": float(y.abs().max())}


class _TapReLU(nn.Module):
    """ReLU (out of place, same values) that keeps each call's input and
    output in taps, in call order; a model's ReLU modules are called several
    times per forward (torchvision's blocks reuse self.relu), so the call
    number names an activation."""

    def __init__(self, taps):
        super().__init__()
        self.taps = taps

    def forward(self, v):
        out = torch.relu(v)
        if v.requires_grad:
            out.retain_grad()
        self.taps.append((v, out))
        return out


def _tap_relus(model, taps):
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(mod, name, _TapReLU(taps))


# ReLU ties. A ReLU whose float64 input lies within float32 noise of 0 may
# go either way in a float32 forward: the gradient then keeps or drops that
# element's whole upstream gradient, a jump of O(1) in that element, which a
# sum with cancellation (a BN bias's dL/dbeta over a batch) turns into a
# visible share of the update. Seen on this repository's resnet20 case:
# layer2.2's output at (0, 28, 8, 11) was 2.9e-9 in float64, +1.6e-7 in
# torch's float32 and <= 0 in ours (OpenBLAS's Haswell sgemm; its
# Cooperlake/SkylakeX kernels round it the other way), and that one mask bit
# put layer2.2.bn2.bias 4.2e-3 of its largest update off float64, while the
# float64 step with that bit flipped agreed with ours to 2e-6. No float32
# arithmetic decides such a tie the way float64 does except by luck, so the
# reference takes each tie whichever way matches ours better (below).
TIE_NOISE = 2.0      # a tie: |float64 input| <= this x the float32 run's largest deviation there
TIE_MAX = 16         # ties considered per step, closest to 0 first


def _one_step(a, state, x, labels, dtype, taps32=None):
    """One SGD step as sluice takes it, from sluice's state (model, and the
    momentum buffers when the file has them); (loss, state after, momentum
    buffers by param name, ReLU taps, ties). With taps32 (the float32 run's
    taps of the same step), ties lists the ReLU inputs within float32 noise
    of 0 as (call, flat index, |input|, sign, {param: the change of its
    gradient when that element's mask is flipped}): flipping a mask leaves
    the forward as it is (the element is ~0 either way) and adds or removes
    that element's upstream gradient, whose effect on the parameter gradients
    is one backward from that point."""
    model = build(a.arch, a.classes, a.width)
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("optimizer.")},
                          strict=True)
    taps = []
    _tap_relus(model, taps)
    model = model.to(dtype)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = a.bn_momentum
    named = list(model.named_parameters())
    # sluice decays conv and fc weights only (train.h SL_TENSOR_DECAY)
    opt = torch.optim.SGD([{"params": [p for _, p in named if p.dim() > 1], "weight_decay": a.wd},
                           {"params": [p for _, p in named if p.dim() <= 1], "weight_decay": 0.0}],
                          lr=a.lr, momentum=a.momentum)
    for k, p in named:
        buf = state.get(f"optimizer.{k}.momentum_buffer")
        if buf is not None:
            opt.state[p]["momentum_buffer"] = buf.to(dtype).clone()
    model.train()
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x.to(dtype)), labels)
    loss.backward(retain_graph=taps32 is not None)
    ties = []
    if taps32 is not None:
        cand = []
        for call, ((v, out), (v32, _)) in enumerate(zip(taps, taps32)):
            noise = float((v32.detach().double() - v.detach()).abs().max())
            near = (v.detach().abs() <= TIE_NOISE * noise).flatten().nonzero().flatten()
            cand += [(float(v.detach().flatten()[i].abs()) / (noise + 1e-300), call, int(i))
                     for i in near]
        for _, call, i in sorted(cand)[:TIE_MAX]:
            v, out = taps[call]
            g = torch.zeros_like(v).flatten()
            g[i] = out.grad.flatten()[i]
            pre = float(v.detach().flatten()[i])
            # mask 1 in float64 (pre > 0): the flipped run lacks this gradient
            sign = -1.0 if pre > 0 else 1.0
            d = torch.autograd.grad(v, [p for _, p in named], g.view_as(v), retain_graph=True,
                                    allow_unused=True)
            ties.append((call, i, pre, sign,
                         {k: sign * t.detach().double() for (k, _), t in zip(named, d)
                          if t is not None}))
    opt.step()
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    bufs = {k: opt.state[p]["momentum_buffer"].detach().clone() for k, p in named}
    return float(loss), after, bufs, taps, ties


def _take_ties(a, ties, before, ours, after64, bufs64):
    """The ties whose flipped masks bring float64 closer to ours: greedily,
    closest to 0 first, a tie is taken when it lowers the sum over the
    parameters of (error / largest update)^2. after64 and bufs64 are
    adjusted in place (a gradient change dg moves the momentum buffer by dg
    and the weight by -lr*dg). Returns the ties taken."""
    def cost(dg_total):
        c = 0.0
        for k, t64 in bufs64.items():
            if k not in ours or k not in before:
                continue
            b = before[k].double()
            upd64 = after64[k].double() - b - a.lr * dg_total.get(k, 0)
            upd = ours[k].double() - b
            scale = float(upd64.abs().max()) + 1e-12
            c += float(((upd - upd64) / scale).pow(2).sum())
        return c
    total, taken = {}, []
    best = cost(total)
    for t in ties:
        trial = dict(total)
        for k, dg in t[4].items():
            trial[k] = trial.get(k, 0) + dg
        c = cost(trial)
        if c < best:
            best, total = c, trial
            taken.append(t)
    for k, dg in total.items():
        after64[k] = after64[k].double() - a.lr * dg
        bufs64[k] = bufs64[k].double() + dg
    return taken


def cmd_step(a):
    """Each step from sluice's own state before it (so float32 rounding in
    one step cannot grow through the next: a small batch of a deep net is
    chaotic), in float32 and float64; ours and torch's float32 are measured
    against float64, and ours may be off by at most 2e-3 of a tensor's
    largest element plus 4x torch's own float32 error there (a BN over 8
    rows can cancel most of its gradient). Float64's ReLU ties (above) are
    taken the way ours went; the summary lists them."""
    paths = [a.state] + a.after.split(",")
    states = [st_read(p)[0] for p in paths]
    x = read_input(a.input, a.shape)
    labels = torch.from_numpy(np.fromfile(a.labels, dtype="<i4").astype(np.int64))
    params = {k for k, _ in build(a.arch, a.classes, a.width).named_parameters()}
    worst = {kind: ("", 0.0, 0.0, 0.0) for kind in ("param", "buffer", "momentum")}
    ranked, missing, nbt_ok, losses32, losses64 = [], [], True, [], []
    nties, flipped = 0, []
    for i in range(len(paths) - 1):
        before, ours = states[i], states[i + 1]
        l32, after32, bufs32, taps32, _ = _one_step(a, before, x, labels, torch.float32)
        l64, after64, bufs64, _, ties = _one_step(a, before, x, labels, torch.float64,
                                                  taps32=taps32)
        del taps32
        losses32.append(l32)
        losses64.append(l64)
        nties += len(ties)
        ours_params = {k: ours[k] for k in bufs64 if k in ours}
        # torch's float32 is measured against plain float64, as without ties
        plain64 = {**after64, **{f"optimizer.{k}.momentum_buffer": t for k, t in bufs64.items()}}
        for call, idx, pre, _, _ in _take_ties(a, ties, before, ours_params, after64, bufs64):
            flipped.append(f"step {i + 1} relu call {call} element {idx}: float64 input {pre:.3g}")
        cmp = [(k, after32[k], t64, "param" if k in params else "buffer")
               for k, t64 in after64.items()]
        cmp += [(f"optimizer.{k}.momentum_buffer", bufs32[k], t64, "momentum")
                for k, t64 in bufs64.items()]
        for k, t32, t64, kind in cmp:
            p64 = plain64[k]
            if k not in ours or tuple(ours[k].shape) != tuple(t64.shape):
                missing.append(k)
                continue
            o = ours[k]
            if k.endswith("num_batches_tracked"):
                nbt_ok = nbt_ok and int(o) == int(t64) == int(t32)
                continue
            o, t32, t64, p64 = o.double(), t32.double(), t64.double(), p64.double()
            if kind == "param":
                # the update itself: a wrong gradient shows even where lr*g << |w|
                b = before[k].double()
                o, t32, t64, p64 = o - b, t32 - b, t64 - b, p64 - b
            scale = float(t64.abs().max()) + 1e-12
            eo = float((o - t64).abs().max()) / scale
            et = float((t32 - p64).abs().max()) / scale
            ratio = eo / (2e-3 + 4 * et) if np.isfinite(eo) else float("inf")
            name = f"step {i + 1} {k}"
            ranked.append((ratio, name, eo, et))
            if ratio >= worst[kind][3]:
                worst[kind] = (name, eo, et, ratio)
    res = {"losses": losses32, "losses64": losses64, "nbt_ok": nbt_ok, "missing": missing,
           "relu_ties": nties, "ties_flipped": flipped,
           "top": [[k, round(r, 3), eo, et] for r, k, eo, et in sorted(ranked, reverse=True)[:6]]}
    for kind, (k, eo, et, ratio) in worst.items():
        res.update({f"worst_{kind}": k, f"worst_{kind}_err": eo, f"worst_{kind}_torch32_err": et,
                    f"worst_{kind}_ratio": ratio})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["logits", "make", "step"])
    ap.add_argument("--arch", required=True)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--width", type=int, default=16, help="resnet20's base width")
    ap.add_argument("--state", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--shape", required=True, type=lambda s: tuple(int(v) for v in s.split(",")))
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--after")
    ap.add_argument("--labels")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--bn-momentum", type=float, default=0.1)
    a = ap.parse_args()
    torch.set_num_threads(1)  # Criterion runs tests side by side on 2 cores
    res = {"logits": cmd_logits, "make": cmd_make, "step": cmd_step}[a.cmd](a)
    res["ok"] = True
    res["torch"] = torch.__version__
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
