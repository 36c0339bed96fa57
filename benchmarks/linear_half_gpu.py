"""The tensor-core ladder on the GPU: F.linear in bfloat16 (cuBLAS) against every 16-bit rung of linear, forward.

    python benchmarks/linear_half_gpu.py [--dtype bfloat16] [--runs 3] [--out benchmarks/results]

At three shapes, (batch, in, out) = 4096^3, 8192^3 and (4096, 4096, 1024): builds each rung through kplay (the
same sources and flags as `kplay run`; a Hopper rung only on Hopper), checks its y against float64 F.linear
within the family's tolerance for 16-bit inputs, then times the forward with kplay's timer (3 warm-ups, CUDA
events, the contenders taking turns, at least 30 samples and --budget seconds) --runs times; a row is the
median of the runs' medians, with every run's median beside it. Each rung's share of cuBLAS and of the tensor
cores' dense peak (SMs x max clock x FMAs per SM per clock x 2, playground.run.peaks). Target: the top rung at
90% of cuBLAS or more at every shape, and every rung faster than the one below at 4096^3.
Writes DATE-COMMIT-MACHINE-linear-half.md (and .json, and .png where matplotlib is) under --out, and prints the
table; --plot-from JSON draws the picture elsewhere.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import ROOT, gpu_slug, results_name, spec as load_spec  # first: it puts the repository on sys.path

import torch

import playground
from playground.family import registry
from playground.run.peaks import peaks
from playground.run.timing import bench

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024)]  # (batch, in, out)
TARGET = 90.0  # the top rung's share of cuBLAS, %, at every shape
CUBLAS = "F.linear (cuBLAS)"


def rungs(fam) -> list[str]:
    """The CUDA rungs that take 16-bit inputs, in the ladder's order; those built for another GPU left out."""
    capability = "{}.{}".format(*torch.cuda.get_device_capability())
    return [v.name for v in fam.variants.values() if v.device == "cuda" and "bfloat16" in fam.dtypes_of(v)
            and (not v.arch or v.arch.rstrip("a") == capability)]


def one_shape(spec, shape, dtype, ops: dict, budget_s: float, runs: int) -> list[dict]:
    """Rows for one shape: cuBLAS first, then each rung; checked once, timed `runs` times (median of medians)."""
    sizes = dict(zip(("batch", "in", "out"), shape))
    x, w, b, _ = spec.make_inputs(sizes, dtype, "cpu", torch.Generator().manual_seed(0))
    x, w, b = x.cuda(), w.cuda(), b.cuda()
    calls = {CUBLAS: lambda: torch.nn.functional.linear(x, w, b)}
    calls |= {name: (lambda o=o: spec.linear(o, x, w, b)) for name, o in ops.items()}
    ref = torch.nn.functional.linear(x.double(), w.double(), b.double())
    tol = spec.product_tolerance(x, w, dtype, extra=b)
    errors = {name: (fn().double() - ref).abs().max().item() for name, fn in calls.items()}
    timed = [bench(calls, "cuda", budget_s=budget_s) for _ in range(runs)]
    flops = spec.flops(sizes)
    peak = peaks("cuda").flops(str(dtype).removeprefix("torch.")) if peaks("cuda") else None
    rows = []
    for name in calls:
        medians = sorted(t[name].median_s for t in timed)
        median = medians[len(medians) // 2]
        rows.append({"contender": name, "median_ms": median * 1e3, "runs_ms": [t[name].median_s * 1e3 for t in timed],
                     "iqr_ms": [timed[0][name].q1_s * 1e3, timed[0][name].q3_s * 1e3],
                     "tflops": flops / median / 1e12, "pct_of_peak": 100 * flops / median / 1e9 / peak if peak else None,
                     "max_abs_err": errors[name], "tolerance": tol, "ok": errors[name] <= tol})
    for r in rows:
        r["pct_of_cublas"] = 100 * rows[0]["median_ms"] / r["median_ms"]
    return rows


def markdown(tables: dict, dtype: str, meta: dict, verdict: dict) -> list[str]:
    lines = [f"# linear forward in {dtype} on {meta['gpu']}: the tensor-core ladder against cuBLAS", "",
             f"torch {meta['torch']} · CUDA {meta['cuda']} · made by: python benchmarks/linear_half_gpu.py "
             f"--dtype {dtype} --runs {meta['runs']}", "",
             "CUDA events, 3 warm-ups, contenders taking turns; a row is the median of the runs' medians. "
             "% of peak: of the tensor cores' dense rate (" + meta["peak_source"] + ").", ""]
    for shape, rows in tables.items():
        lines += [f"## (batch, in, out) = {shape}", "",
                  "| contender | median ms | runs' medians, ms | TFLOP/s | % of cuBLAS | % of peak | max err (tol) |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            peak = f"{r['pct_of_peak']:.1f}%" if r["pct_of_peak"] else ""
            lines.append(f"| {r['contender']} | {r['median_ms']:.3f} | {', '.join(f'{t:.3f}' for t in r['runs_ms'])} "
                         f"| {r['tflops']:.1f} | {r['pct_of_cublas']:.1f}% | {peak} | {r['max_abs_err']:.1e} "
                         f"({r['tolerance']:.1e}){'' if r['ok'] else ' FAIL'} |")
        lines.append("")
    return lines + [f"Target (the top rung at {TARGET:.0f}% of cuBLAS or more at every shape, each rung faster than "
                    f"the one below at 4096^3, every check passed): {'met' if verdict['met'] else 'NOT met'}."]


def ladder_plot(record: dict, path: Path) -> None:
    """Each rung's share of cuBLAS at each shape, a bar per shape, the target as a line: the climb in one
    picture (PNG)."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend

    shapes = list(record["tables"])
    rungs = [r["contender"] for r in record["tables"][shapes[0]][1:]]
    fig = Figure(figsize=(8, 0.45 * len(rungs) * len(shapes) / 2 + 2.2))
    ax = fig.add_subplot()
    height = 0.8 / len(shapes)
    for s, shape in enumerate(shapes):
        rows = {r["contender"]: r for r in record["tables"][shape]}
        y = [len(rungs) - 1 - k - s * height for k in range(len(rungs))]
        pct = [rows[name]["pct_of_cublas"] for name in rungs]
        ax.barh(y, pct, height=height, label=f"(batch, in, out) = {shape}")
        for k, v in zip(y, pct):
            ax.text(v + 1, k, f"{v:.0f}%", va="center", fontsize=7)
    ax.axvline(TARGET, color="gray", linestyle="--", linewidth=1)
    ax.text(TARGET, 0.98, f" target {TARGET:.0f}%\n (top rung)", color="gray", fontsize=8, va="top",
            transform=ax.get_xaxis_transform())  # at the top, beside the lowest rungs' short bars
    ax.set_yticks([len(rungs) - 1 - k - (len(shapes) - 1) * height / 2 for k in range(len(rungs))], rungs)
    ax.set_xlim(0, 120)
    ax.set_xlabel(f"% of F.linear (cuBLAS), {record['dtype']} forward")
    ax.set_title(f"The tensor-core ladder on {record['gpu']}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    ap.add_argument("--runs", type=int, default=3, help="timing runs; a row is the median of their medians")
    ap.add_argument("--budget", type=float, default=0.5, help="seconds of timing a run (at least 30 samples each)")
    ap.add_argument("--shapes", default="", help="batch,in,out;... in place of the three shapes")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--plot-from", type=Path, help="only draw the PNG from a JSON this script wrote")
    args = ap.parse_args()
    if args.plot_from:
        ladder_plot(json.loads(args.plot_from.read_text()), args.plot_from.with_suffix(".png"))
        return 0
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    spec, fam, dtype = load_spec("linear"), registry.find("linear"), getattr(torch, args.dtype)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";")] if args.shapes else SHAPES
    ops = {name: playground.load("linear", variant=name, device="cuda") for name in rungs(fam)}
    tables = {shape: one_shape(spec, shape, dtype, ops, args.budget, args.runs) for shape in shapes}
    first = tables[shapes[0]]
    climbs = all(b["median_ms"] < a["median_ms"] for a, b in zip(first[1:], first[2:]))
    top = {str(s): rows[-1]["pct_of_cublas"] for s, rows in tables.items()}
    ok = all(r["ok"] for rows in tables.values() for r in rows)
    verdict = {"top": first[-1]["contender"], "top_pct_of_cublas": top, "climbs": climbs, "checks_pass": ok,
               "met": climbs and ok and min(top.values()) >= TARGET}
    p = peaks("cuda")
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "runs": args.runs, "peak_source": p.source.get(args.dtype, "unknown") if p else "unknown"}
    lines = markdown(tables, args.dtype, meta, verdict)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = results_name("linear-half", gpu_slug(meta["gpu"]))
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (args.out / f"{stem}.json").write_text(json.dumps({**meta, "dtype": args.dtype, "verdict": verdict,
                                                       "tables": {str(s): r for s, r in tables.items()}}, indent=1))
    try:
        ladder_plot(json.loads((args.out / f"{stem}.json").read_text()), args.out / f"{stem}.png")
    except ImportError:
        print(f"no matplotlib here: draw the PNG elsewhere with --plot-from {stem}.json")
    print("\n".join(lines))
    return 0 if verdict["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
