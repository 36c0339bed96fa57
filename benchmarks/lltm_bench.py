"""LLTM forward and backward per call: Python eager, torch.compile, and the cpp, cuda and cuda-fast ops.

    python benchmarks/lltm_bench.py --device cuda --out benchmarks/results   # (16,32,128) and (1024,512,1024)
    python benchmarks/lltm_bench.py --device cpu --out benchmarks/results    # (16,32,128)

Each contender is first checked (new_h, new_cell and the five gradients against the float64 reference,
within the spec's tolerance; gradcheck in float64), then timed as the tutorial does: the forward on
leaves that require grad, the backward as (new_h.sum() + new_cell.sum()).backward() on a fresh forward.
The timing is kplay's own (playground.run.timing.bench): contenders take turns, so drift hits all alike.
Two clocks: a synchronized wall clock per call (what a training loop feels, host overhead included) and,
on CUDA, events around the call, both from an idle GPU, each timed call after one untimed step of the same
contender (warm), as a training loop runs a cell step after step. The same loop without that step (cold:
every call follows another contender's) is reported beside it, on the wall clock. Medians are reported.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from playground.family import registry  # noqa: E402
from playground.compiler.build import build  # noqa: E402
from playground.family.spec import module as load_spec  # noqa: E402
from playground.run.timing import bench  # noqa: E402

FAMILY = registry.find("lltm")
SPEC = load_spec(FAMILY)
SIZES = {"cuda": [(16, 32, 128), (1024, 512, 1024)], "cpu": [(16, 32, 128)]}
TARGET = 1.3  # the target: cuda-fast >= 1.3x eager, and faster than torch.compile, forward and backward
FAST, TUTORIAL = "cuda-fast", "cuda"  # the fast op, and the tutorial-shaped one whose gain it must show


def contenders(device: str, compile: bool) -> tuple[dict, dict]:
    """{name: function}, and the builds' cold compile times."""
    fns = {"python": SPEC.lltm_reference}
    if compile:
        fns["compile"] = torch.compile(SPEC.lltm_reference, dynamic=False)
    builds = {}
    wanted = [("cpp", "cpp", {})]
    if device == "cuda":
        wanted += [(TUTORIAL, TUTORIAL, {}), (FAST, FAST, {}), (f"{FAST} streams=2", FAST, {"streams": 2}),
                   (f"{FAST} threads=1024", FAST, {"threads": 1024})]
    for label, variant, params in wanted:
        t = time.perf_counter()
        ops, info = build(FAMILY, FAMILY.variants[variant], FAMILY.parse_params([f"{k}={v}" for k, v in params.items()]))
        builds[label] = {"seconds": round(time.perf_counter() - t, 1), "cached": info.cached}
        fns[label] = SPEC.lltm_function(ops, variant)
        if label == FAST:  # the same kernels with autograd in Python: what C++ autograd buys
            fns[f"{FAST} (py autograd)"] = SPEC.python_autograd(ops)
    return fns, builds


def inputs_for(size, device):
    batch, features, state = size
    gen = torch.Generator().manual_seed(0)
    return SPEC.make_inputs({"batch": batch, "features": features, "state": state}, torch.float32, device, gen)


def check(fn, inputs) -> dict:
    """Max error of the seven outputs against the float64 reference, and whether each is within tolerance."""
    ref = SPEC.reference(*inputs)
    tols, _ = SPEC.tolerance(*inputs, torch.float32)
    out = SPEC.forward_backward(fn, *inputs)
    errs = [(o.double() - r).abs().max().item() for o, r in zip(out, ref)]
    return {"max_err": max(errs), "ok": all(e <= t for e, t in zip(errs, tols))}


def time_all(pairs: dict, device: str, budget_s: float, warm: bool = True) -> dict:
    """{key: {clock: median µs}} of each (prepare, run) pair, by playground.run.timing.bench: the wall clock and,
    on CUDA, events too (warm loop only).

    warm: each timed call follows one untimed step of the same contender, as a training loop runs one cell
    step after step (the tutorial's loop), and starts from an idle GPU. Cold (warm=False), every timed call
    follows another contender's (a backward, its own untimed forward: that is how it gets a graph), and pays
    for the host's caches holding that one's code: the host's path to the first kernel then takes tens of
    microseconds longer. Cold is timed on the wall clock only: bench's cold events start on a busy GPU with
    L2 flushed, which measures the GPU's work, not the call.
    """
    clocks = {"wall": True, "events": False} if device == "cuda" and warm else {"wall": True}
    out: dict = {k: {} for k in pairs}
    for clock, wall in clocks.items():
        for key, stats in bench(pairs, device, budget_s=budget_s, wall=wall, warm=warm).items():
            out[key][clock] = round(stats.median_s * 1e6, 1)
    return out


def matmul_floor(size, device, budget_s) -> dict:
    """The forward's and the backward's matmuls alone (what any variant that keeps cuBLAS must pay),
    and the same products in the transposed layout, in case cuBLAS picks a faster kernel for it."""
    input, weights, _, old_h, *_ = inputs_for(size, device)
    X = torch.cat([old_h, input], 1)
    d_gates = torch.randn(size[0], weights.shape[0], device=device)
    Xt, d_gates_t, weights_t = X.t().contiguous(), d_gates.t().contiguous(), weights.t().contiguous()
    return time_all({"forward": (tuple, lambda: X @ weights.t()),
                     "backward": (tuple, lambda: (d_gates.t() @ X, d_gates @ weights)),
                     "forward, transposed": (tuple, lambda: weights @ Xt),
                     "backward, transposed": (tuple, lambda: (Xt @ d_gates, weights_t @ d_gates_t))},
                    device, budget_s)


def environment(device: str) -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
           "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.machine()),
           "threads": torch.get_num_threads()}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        try:
            env["nvidia-smi"] = subprocess.run(
                ["nvidia-smi", "--format=csv,noheader", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,clocks.mem"],
                capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["nvidia-smi"] = "unavailable"
    return env


def run_size(size, fns, device, budget_s) -> dict:
    inputs = inputs_for(size, device)
    rows = {}
    for name, fn in fns.items():
        rows[name] = check(fn, inputs)
        if name != "compile":
            rows[name]["gradcheck"] = SPEC.gradcheck(fn, device)
    pairs = {(name, step): pair for name, fn in fns.items() for step, pair in SPEC.timings(fn, inputs).items()}
    for warm in (True, False):
        for (name, step), medians in time_all(pairs, device, budget_s, warm=warm).items():
            rows[name][step if warm else f"{step}, cold"] = medians
    result = {"size": dict(zip(("batch", "features", "state"), size)), "rows": rows}
    if device == "cuda":
        result["matmul_floor_us"] = matmul_floor(size, device, budget_s / 4)
    return result


def speedup(rows, name, base, step, clock):
    try:
        return rows[base][step][clock] / rows[name][step][clock]
    except (KeyError, ZeroDivisionError):
        return None


def table(result: dict, device: str) -> str:
    """A markdown table: one row per contender, times in µs, speedups on the wall clock (events)."""
    rows, s = result["rows"], result["size"]
    clocks = ["wall", "events"] if device == "cuda" else ["wall"]
    head = f"### {device}, batch {s['batch']}, features {s['features']}, state {s['state']}\n\n"
    cols = ["variant", *(f"{st} {c} µs" for st in ("fwd", "bwd") for c in clocks), "max err", "check", "gradcheck",
            "fwd ×eager", "bwd ×eager", "fwd ×compile", "bwd ×compile", "cold wall: fwd, bwd ×eager"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]

    def x(name, base, step, clocks=clocks):
        vals = [speedup(rows, name, base, step, c) for c in clocks]
        return " (".join(f"{v:.2f}" if v else "—" for v in vals) + (")" if len(vals) > 1 else "")

    def cold(name):
        return ", ".join(x(name, "python", f"{step}, cold", ["wall"]) for step in ("forward", "backward"))

    for name, r in rows.items():
        times = [f"{r[st].get(c, float('nan')):.1f}" for st in ("forward", "backward") for c in clocks]
        gc = {True: "pass", False: "FAIL"}.get(r.get("gradcheck"), "—")
        lines.append("| " + " | ".join([name, *times, f"{r['max_err']:.1e}", "ok" if r["ok"] else "FAIL", gc,
                                         x(name, "python", "forward"), x(name, "python", "backward"),
                                         x(name, "compile", "forward"), x(name, "compile", "backward"),
                                         cold(name)]) + " |")
    text = head + "\n".join(lines) + "\n"
    if "matmul_floor_us" in result:
        f = result["matmul_floor_us"]
        text += ("\nThe matmuls alone (cuBLAS, events; transposed layout in brackets): forward "
                 f"{f['forward'].get('events')} ({f['forward, transposed'].get('events')}) µs, backward "
                 f"{f['backward'].get('events')} ({f['backward, transposed'].get('events')}) µs.\n")
    return text


def verdict(results: list[dict], device: str) -> list[str]:
    """The targets for cuda-fast, and its gain over the tutorial-shaped cuda, on the synchronized wall
    clock in the warm loop (time_all says why); on the CPU, cpp against eager."""
    out = []
    for res in results:
        rows, s = res["rows"], res["size"]
        size = f"({s['batch']}, {s['features']}, {s['state']})"
        if device == "cuda":
            for step in ("forward", "backward"):
                e, c = speedup(rows, FAST, "python", step, "wall"), speedup(rows, FAST, "compile", step, "wall")
                ok = e is not None and e >= TARGET and (c is None or c > 1)
                cold = speedup(rows, FAST, "python", f"{step}, cold", "wall")
                out.append(f"{size} {FAST} {step}: {e:.2f}x eager, " + (f"{c:.2f}x compile" if c else "no compile")
                           + f" -> {'MET' if ok else 'NOT MET'} (cold loop: {cold:.2f}x eager)")
            gains = [speedup(rows, FAST, TUTORIAL, step, "wall") for step in ("forward", "backward")]
            out.append(f"{size} {FAST} over {TUTORIAL} (the task.toml note's gain): forward {gains[0]:.2f}x, "
                       f"backward {gains[1]:.2f}x")
        else:
            both = {n: rows[n]["forward"]["wall"] + rows[n]["backward"]["wall"] for n in ("python", "cpp")}
            ok = both["cpp"] < both["python"]
            out.append(f"{size} cpp forward+backward {both['cpp']:.1f} µs vs eager {both['python']:.1f} µs "
                       f"-> {'MET' if ok else 'NOT MET'}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per size")
    ap.add_argument("--out", type=Path, help="folder for lltm-<device>.json and .md")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 for every contender
    env = environment(args.device)
    fns, builds = contenders(args.device, not args.no_compile)
    results = []
    for size in SIZES[args.device]:
        results.append(run_size(size, fns, args.device, args.budget))
        print(table(results[-1], args.device), flush=True)  # a partial result survives a time limit
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"lltm-{args.device}-partial.json").write_text(json.dumps(results, indent=1))
    verdicts = verdict(results, args.device)
    report = {"environment": env, "builds": builds, "results": results, "verdicts": verdicts}
    md = (f"# LLTM per call, {env.get('gpu', env['cpu'])}\n\n{env['date']}, torch {env['torch']}, CUDA {env['cuda']}, "
          f"{env['threads']} CPU threads. Times are medians in µs (playground.run.timing.bench); speedups on the "
          f"synchronized wall clock (on CUDA, events in brackets). Each timed call follows an untimed step of "
          f"the same contender; the last column is the cold loop, without that step (wall clock).\n\n" + "\n".join(table(r, args.device) for r in results) +
          "\n" + "\n".join(f"- {v}" for v in verdicts) + "\n")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        tag = "h200" if "H200" in env.get("gpu", "") else args.device
        (args.out / f"lltm-{tag}.json").write_text(json.dumps(report, indent=1))
        (args.out / f"lltm-{tag}.md").write_text(md)
        (args.out / f"lltm-{args.device}-partial.json").unlink(missing_ok=True)
    print("\n".join(f"- {v}" for v in verdicts))


if __name__ == "__main__":
    main()
