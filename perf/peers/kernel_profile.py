"""perf/peers/kernel_profile.py - per-kernel tables of one training step, for perf/train-gpu --profile.

    kernel_profile.py ncu CSV --steps 2 --out JSON
        Nsight Compute's CSV (ncu --csv --print-units base --metrics
        gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum)
        -> per kernel: calls and ms per step, achieved GB/s (DRAM bytes read
        and written / time; 1 GB = 1e9 bytes).
    kernel_profile.py summary --sluice JSON [--torch JSON] [--top 25] [--out MD]
        both tables side by side in Markdown (sluice's from ncu above, the
        peer's from perf/peers/torch_train_gpu.py --profile).
    kernel_profile.py fake-ncu CSV
        a small CSV in ncu's format (three made-up kernels): what
        perf/train-gpu --rehearse feeds the parser on a machine without a
        GPU. Its numbers mean nothing.

Kernel names are shortened to the function and its template arguments
(the parameter list dropped). Exit 1 with a message when the CSV holds no
kernel rows (ncu failed, or profiled nothing).
"""
import argparse
import csv
import json
import re
import sys

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
UNIT = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
        "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


def short(name):
    """'void k<T, 8>(long, int, ...)' -> 'k<T, 8>'; other names as they are."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    depth = 0
    for i, ch in enumerate(n):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return n[:i]
    return n


def number(s):
    return float(s.replace(",", "")) if s not in ("", "n/a") else 0.0


def parse_ncu(path, steps):
    launches = {}  # ID -> {"name", metric: value in s / bytes}
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages start with ==
    for row in csv.DictReader(lines):
        if row.get("Metric Name") not in METRICS:
            continue
        k = launches.setdefault(row["ID"], {"name": short(row["Kernel Name"])})
        k[row["Metric Name"]] = number(row["Metric Value"]) * UNIT.get(row.get("Metric Unit", ""), 1.0)
    rows = {}
    for k in launches.values():
        r = rows.setdefault(k["name"], [0, 0.0, 0.0])
        r[0] += 1
        r[1] += k.get(METRICS[0], 0.0)
        r[2] += k.get(METRICS[1], 0.0) + k.get(METRICS[2], 0.0)
    out = [{"name": n, "calls_per_step": round(c / steps, 2), "ms_per_step": round(t * 1e3 / steps, 4),
            "gbs": round(b / t / 1e9, 1) if t > 0 else 0.0} for n, (c, t, b) in rows.items()]
    return sorted(out, key=lambda r: -r["ms_per_step"])


def table(title, ks, top, with_gbs):
    tot = sum(k["ms_per_step"] for k in ks)
    calls = sum(k["calls_per_step"] for k in ks)
    L = [f"**{title}**: {len(ks)} kernels, {calls:.0f} launches and {tot:.2f} ms of kernel time per step", ""]
    L.append("| kernel | calls/step | ms/step |" + (" GB/s |" if with_gbs else ""))
    L.append("|---|---|---|" + ("---|" if with_gbs else ""))
    for k in ks[:top]:
        name = k["name"].replace("|", "/")
        if len(name) > 90:
            name = name[:87] + "..."
        L.append(f"| `{name}` | {k['calls_per_step']:g} | {k['ms_per_step']:.3f} |"
                 + (f" {k.get('gbs', 0):.0f} |" if with_gbs else ""))
    if len(ks) > top:
        rest = sum(k["ms_per_step"] for k in ks[top:])
        L.append(f"| ({len(ks) - top} more) | | {rest:.3f} |" + (" |" if with_gbs else ""))
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a1 = sub.add_parser("ncu")
    a1.add_argument("csv")
    a1.add_argument("--steps", type=float, default=2.0)
    a1.add_argument("--out", required=True)
    a2 = sub.add_parser("summary")
    a2.add_argument("--sluice", required=True)
    a2.add_argument("--torch")
    a2.add_argument("--top", type=int, default=25)
    a2.add_argument("--out")
    a3 = sub.add_parser("fake-ncu")
    a3.add_argument("csv")
    a = ap.parse_args()
    if a.cmd == "fake-ncu":
        cols = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
                "Metric Value"]
        fake = [("void bn_stats_kernel<__nv_bfloat16, 8>(long, int, bn_plan, const T1 *)", 12000, 4.0e7),
                ("void bn_apply_kernel<__nv_bfloat16, 8>(long, int, bn_plan, const T1 *)", 15000, 8.0e7),
                ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", 90000, 3.0e7)]
        with open(a.csv, "w", newline="") as f:
            f.write("==PROF== REHEARSAL: made-up rows in ncu's CSV format\n")
            w = csv.writer(f, quoting=csv.QUOTE_ALL)
            w.writerow(cols)
            i = 0
            for step in range(2):
                for name, ns, by in fake:
                    for m, u, v in ((METRICS[0], "nsecond", ns), (METRICS[1], "byte", by / 2),
                                    (METRICS[2], "byte", by / 2)):
                        w.writerow([i, 1, "sluice", "host", name, 1, 13, "(256, 1, 1)", "(8, 528, 1)", 0,
                                    "9.0", "Command line profiler metrics", m, u, f"{v:,.0f}"])
                    i += 1
        return 0
    if a.cmd == "ncu":
        ks = parse_ncu(a.csv, a.steps)
        if not ks:
            sys.exit(f"kernel_profile: {a.csv}: no kernel rows with {', '.join(METRICS)}")
        with open(a.out, "w") as f:
            json.dump({"steps": a.steps, "tool": "ncu", "kernels": ks}, f)
        tot = sum(k["ms_per_step"] for k in ks)
        print(f"kernel_profile: {len(ks)} kernels, {tot:.2f} ms per step -> {a.out}")
        return 0
    s = json.load(open(a.sluice))
    L = ["## Profile: kernels of one training step", ""]
    L += table("sluice (Nsight Compute, gpu__time_duration, DRAM bytes read + written)", s["kernels"],
               a.top, True)
    if a.torch:
        try:
            t = json.load(open(a.torch))
            L += [""] + table(f"PyTorch (torch.profiler, {t.get('device', 'cuda')} time)", t["kernels"], a.top,
                              False)
        except (OSError, ValueError, KeyError) as e:
            L += ["", f"PyTorch's profile: not read ({e})."]
    text = "\n".join(L) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
