"""Where the LLTM cuda-fast forward's time goes, and an old and a new build side by side, in one GPU call.

    python3 benchmarks/lltm_fwd_probe.py --old /path/to/old/lltm --out $OUT [--wait PID]

--old is a copy of the lltm family folder before a change (task.toml and sources), e.g. from
`git worktree add /tmp/old <commit>`: --old /tmp/old/snippets/lltm (a copy from before the split has the
fast op as its variant cuda); the new builds are the ones in snippets/. For each size: check (seven outputs
against float64, gradcheck in float64), then time eager, the old and the new cuda-fast builds, forward and
backward, with CUDA events and the synchronized wall clock (lltm_bench.time_all: playground.run.timing.bench),
then the matmuls alone in several layouts and split-K, then one profile of a few forwards per contender (GPU
time per kernel, and the GPU-busy time against the events). --wait PID waits for that process (a test run
sharing the GPU) to end before timing anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

import torch  # noqa: E402

import lltm_bench as lb  # noqa: E402
from playground.family import registry  # noqa: E402
from playground.compiler.build import build  # noqa: E402

SIZES = [(1024, 512, 1024), (16, 32, 128)]
NEW_PARAMS = [{}, {"fwd_split": 4, "bwd_split": 2}]
DEVICE = "cuda"  # --dry-cpu: the cpp variants on the CPU, to try this script without a GPU


def built(family, params):
    """The family's fast op (cuda-fast; cuda in a copy from before the split), or cpp in the CPU dry run."""
    variant = (lb.FAST if lb.FAST in family.variants else "cuda") if DEVICE == "cuda" else "cpp"
    ops, _ = build(family, family.variants[variant], family.parse_params([f"{k}={v}" for k, v in params.items()]))
    return lb.SPEC.lltm_function(ops, lb.FAST if DEVICE == "cuda" else "cpp")


def matmuls(size, budget_s):
    """The forward's matmul (and the backward's d_X) alone: layouts, addmm with the bias, split-K."""
    input, weights, bias, old_h, *_ = lb.inputs_for(size, DEVICE)
    X = torch.cat([old_h, input], 1)
    K, G = X.shape[1], weights.shape[0]
    d_gates = torch.randn(size[0], G, device=DEVICE)
    Xt, Wt = X.t().contiguous(), weights.t().contiguous()

    def split(a, b, parts):  # the same as lltm.cpp's partial_products
        k = a.shape[1]
        return torch.bmm(a.unflatten(1, (parts, k // parts)).transpose(0, 1), b.unflatten(0, (parts, k // parts)))

    pairs = {"cat": lambda: torch.cat([old_h, input], 1),
             "fwd X@W^T (mm)": lambda: X @ weights.t(),
             "fwd addmm(b, X, W^T) (eager)": lambda: torch.addmm(bias, X, weights.t()),
             "fwd X@Wt (Wt contiguous)": lambda: X @ Wt,
             "fwd W@X^T (view)": lambda: weights @ X.t(),
             "fwd W@Xt (Xt contiguous)": lambda: weights @ Xt}
    for p in (2, 3, 4):
        if K % p == 0:
            pairs[f"fwd split-K {p} (bmm)"] = lambda p=p: split(X, weights.t(), p)
    pairs["bwd d_X = dG@W (mm)"] = lambda: d_gates @ weights
    for p in (2, 3, 4):
        if G % p == 0:
            pairs[f"bwd d_X split-K {p} + sum"] = lambda p=p: split(d_gates, weights, p).sum(0)
    pairs["bwd d_W = dG^T@X (mm)"] = lambda: d_gates.t() @ X
    got = lb.time_all({k: (tuple, f) for k, f in pairs.items()}, DEVICE, budget_s)
    return {k: v.get("events", v["wall"]) for k, v in got.items()}


def profile(fns, inputs, n=20):
    """GPU time per kernel over n forwards of each contender (torch.profiler), and the busy total per call."""
    from torch.profiler import ProfilerActivity, profile as prof_

    out = {}
    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    for name, fn in fns.items():
        prepare, run = lb.SPEC.timings(fn, inputs)["forward"]
        for _ in range(3):
            run(*prepare())
        sync()
        with prof_(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                run(*prepare())
                sync()
        kernels = {}
        kind = torch.autograd.DeviceType.CUDA if DEVICE == "cuda" else torch.autograd.DeviceType.CPU
        for e in prof.events():
            if e.device_type == kind:
                kernels.setdefault(e.name[:90], []).append(e.time_range.elapsed_us())
        if not kernels:  # no device events listed apart: the profiler's own table instead
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12), flush=True)
        rows = sorted(((k, sum(v) / n, len(v) / n) for k, v in kernels.items()), key=lambda r: -r[1])
        out[name] = {"busy_us": round(sum(r[1] for r in rows), 1),
                     "kernels": [{"name": k, "us_per_call": round(t, 1), "per_call": c} for k, t, c in rows]}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="the lltm family folder before the change")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wait", type=int, help="pid to wait for before timing")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per group")
    ap.add_argument("--dry-cpu", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DEVICE
    DEVICE = "cpu" if args.dry_cpu else "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    fns = {"python": lb.SPEC.lltm_reference, "old": built(registry.load_family(args.old.resolve()), {})}
    for params in NEW_PARAMS:
        fns["new" + "".join(f" {k}={v}" for k, v in params.items())] = built(lb.FAMILY, params)
    print(f"builds: {time.time() - t0:.0f} s", flush=True)
    if args.wait:
        while os.path.exists(f"/proc/{args.wait}"):
            time.sleep(0.5)
        print(f"waited for {args.wait}: {time.time() - t0:.0f} s", flush=True)
    report = {"gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry run)", "torch": torch.__version__,
              "sizes": []}
    for size in SIZES:
        inputs = lb.inputs_for(size, DEVICE)
        rows = {}
        for name, fn in fns.items():
            rows[name] = lb.check(fn, inputs)
            if name != "python":
                rows[name]["gradcheck"] = bool(lb.SPEC.gradcheck(fn, DEVICE))
        pairs = {}
        for name, fn in fns.items():
            for step, pair in lb.SPEC.timings(fn, inputs).items():
                pairs[(name, step)] = pair
        got = lb.time_all(pairs, DEVICE, args.budget * (2 if size[0] > 100 else 1))
        for (name, step), medians in got.items():
            rows[name][step] = medians
        entry = {"size": size, "rows": rows, "matmuls_us": matmuls(size, args.budget / 2)}
        if size[0] > 100:
            try:
                entry["profile"] = profile(fns, inputs)
            except Exception as e:  # a profiler failure must not cost the timings
                print(f"profile failed: {e!r}", flush=True)
        report["sizes"].append(entry)
        (args.out / "lltm-fwd-probe.json").write_text(json.dumps(report, indent=1))
    print(summary(report), flush=True)
    (args.out / "lltm-fwd-probe.md").write_text(summary(report))


def summary(report):
    lines = [f"# LLTM cuda-fast forward probe, {report['gpu']}, torch {report['torch']}\n"]
    for entry in report["sizes"]:
        rows, b = entry["rows"], entry["rows"]["python"]
        lines.append(f"\n## (batch, features, state) = {tuple(entry['size'])}\n")
        lines.append("| variant | fwd wall | fwd events | bwd wall | bwd events | fwd ×eager wall (ev) | "
                     "bwd ×eager wall (ev) | max err | ok | gradcheck |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for name, r in rows.items():
            f, w = r["forward"], r["backward"]
            ev = lambda t: t.get("events", t["wall"])  # noqa: E731 (the CPU dry run has no events)
            lines.append(f"| {name} | {f['wall']} | {ev(f)} | {w['wall']} | {ev(w)} | "
                         f"{b['forward']['wall'] / f['wall']:.2f} ({ev(b['forward']) / ev(f):.2f}) | "
                         f"{b['backward']['wall'] / w['wall']:.2f} ({ev(b['backward']) / ev(w):.2f}) | "
                         f"{r['max_err']:.1e} | {r['ok']} | {r.get('gradcheck', '—')} |")
        lines.append("\nmatmuls alone (events µs): " + ", ".join(f"{k} {v}" for k, v in entry["matmuls_us"].items()))
        for name, p in entry.get("profile", {}).items():
            lines.append(f"\nprofile {name}: GPU busy {p['busy_us']} µs per forward (events: "
                         f"{rows[name]['forward'].get('events')} µs)")
            for k in p["kernels"][:6]:
                lines.append(f"    {k['us_per_call']:8.1f} µs  x{k['per_call']:.0f}  {k['name']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
