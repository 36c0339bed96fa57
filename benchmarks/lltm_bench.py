"""LLTM forward and backward per call: Python eager, torch.compile, and the cpp and cuda ops.

    python benchmarks/lltm_bench.py --device cuda --out benchmarks/results   # (16,32,128) and (1024,512,1024)
    python benchmarks/lltm_bench.py --device cpu --out benchmarks/results    # (16,32,128)

Each contender is first checked (new_h, new_cell and the five gradients against the float64 reference,
within the spec's tolerance; gradcheck in float64), then timed as the tutorial does: the forward on
leaves that require grad, the backward as (new_h.sum() + new_cell.sum()).backward() on a fresh forward.
Two clocks: a synchronized wall clock per call (what a training loop feels, host overhead included) and,
on CUDA, events around the call, both from an idle GPU. Contenders take turns, so drift hits all alike;
each turn starts with one untimed step of the same contender, as a training loop runs a cell step after step.
The same loop without that step (cold: every call follows another contender's) is reported beside it.
Medians are reported.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from playground import registry  # noqa: E402
from playground.build import build  # noqa: E402
from playground.spec import module as load_spec  # noqa: E402

FAMILY = registry.find("lltm")
SPEC = load_spec(FAMILY)
SIZES = {"cuda": [(16, 32, 128), (1024, 512, 1024)], "cpu": [(16, 32, 128)]}
TARGET = 1.3  # issue 4: cuda >= 1.3x eager, and faster than torch.compile, forward and backward


def python_autograd(ops):
    """The same device kernels with autograd in Python (torch.library.register_autograd), to compare."""
    name = f"{ops.name}::lltm_forward"

    def setup_context(ctx, inputs, output):
        _, new_cell, gates, X = output
        ctx.save_for_backward(new_cell, gates, X, inputs[1])

    def backward(ctx, grad_h, grad_cell, *_):
        new_cell, gates, X, weights = ctx.saved_tensors
        zero = new_cell.new_zeros(()).expand_as(new_cell)
        grad_h, grad_cell = (zero if g is None else g for g in (grad_h, grad_cell))
        return ops.lltm_backward(grad_h, grad_cell, new_cell, gates, X, weights)

    torch.library.register_autograd(name, backward, setup_context=setup_context)

    def lltm(*args):
        new_h, new_cell, _, _ = ops.lltm_forward(*args)
        return new_h, new_cell

    return lltm


def contenders(device: str, compile: bool) -> tuple[dict, dict]:
    """{name: function}, and the builds' cold compile times."""
    fns = {"python": SPEC.lltm_reference}
    if compile:
        fns["compile"] = torch.compile(SPEC.lltm_reference, dynamic=False)
    builds = {}
    wanted = [("cpp", "cpp", {})]
    if device == "cuda":
        wanted += [("cuda", "cuda", {}), ("cuda streams=2", "cuda", {"streams": 2}),
                   ("cuda threads=1024", "cuda", {"threads": 1024})]
    for label, variant, params in wanted:
        t = time.perf_counter()
        ops, info = build(FAMILY, FAMILY.variants[variant], FAMILY.parse_params([f"{k}={v}" for k, v in params.items()]))
        builds[label] = {"seconds": round(time.perf_counter() - t, 1), "cached": info.cached}
        fns[label] = SPEC.lltm_function(ops, variant)
        if label in ("cpp", "cuda"):
            fns[f"{label} (py autograd)"] = python_autograd(ops)
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


def time_all(pairs: dict, cuda: bool, budget_s: float, warm: bool = True, min_n: int = 30, max_n: int = 3000) -> dict:
    """{key: {"wall": [...], "events": [...]}} in seconds; every (prepare, run) pair takes its turn, once per
    clock, both from an idle GPU (so the host's path to the first kernel counts in the events too).

    warm: each timed call follows one untimed step of the same contender, as a training loop runs one cell
    step after step (the tutorial's loop). Cold (warm=False), every timed call follows another contender's
    (a backward, its own untimed forward: that is how it gets a graph), and pays for the host's caches
    holding that one's code: the host's path to the first kernel then takes tens of microseconds longer.
    """
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for prepare, run in pairs.values():  # warm-up: lazy init, allocator, torch.compile's first calls
        for _ in range(5):
            run(*prepare())
    sync()
    samples = {k: {"wall": [], "events": []} for k in pairs}

    def timed(prepare, run, clock):
        if warm:
            run(*prepare())
        args = prepare()
        sync()
        if clock == "wall":
            t = time.perf_counter()
            out = run(*args)
            sync()
            return time.perf_counter() - t
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        out = run(*args)
        end.record()
        end.synchronize()
        del out
        return begin.elapsed_time(end) / 1e3

    start = time.perf_counter()
    for n in range(max_n):
        for clock in ("wall", "events") if cuda else ("wall",):
            for key, (prepare, run) in pairs.items():
                samples[key][clock].append(timed(prepare, run, clock))
        if n + 1 >= min_n and time.perf_counter() - start > budget_s:
            break
    return samples


def matmul_floor(size, device, budget_s) -> dict:
    """The forward's and the backward's matmuls alone (what any variant that keeps cuBLAS must pay),
    and the same products in the transposed layout, in case cuBLAS picks a faster kernel for it."""
    input, weights, _, old_h, *_ = inputs_for(size, device)
    X = torch.cat([old_h, input], 1)
    d_gates = torch.randn(size[0], weights.shape[0], device=device)
    Xt, d_gates_t, weights_t = X.t().contiguous(), d_gates.t().contiguous(), weights.t().contiguous()
    got = time_all({"forward": (tuple, lambda: X @ weights.t()),
                    "backward": (tuple, lambda: (d_gates.t() @ X, d_gates @ weights)),
                    "forward, transposed": (tuple, lambda: weights @ Xt),
                    "backward, transposed": (tuple, lambda: (Xt @ d_gates, weights_t @ d_gates_t))},
                   device == "cuda", budget_s)
    return {k: median_us(v) for k, v in got.items()}


def median_us(samples: dict) -> dict:
    return {clock: round(statistics.median(s) * 1e6, 1) for clock, s in samples.items() if s}


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
        got = time_all(pairs, device == "cuda", budget_s, warm=warm)
        for (name, step), samples in got.items():
            rows[name][step if warm else f"{step}, cold"] = median_us(samples)
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
            "fwd ×eager", "bwd ×eager", "fwd ×compile", "bwd ×compile", "cold: fwd, bwd ×eager"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]

    def x(name, base, step):
        vals = [speedup(rows, name, base, step, c) for c in clocks]
        return " (".join(f"{v:.2f}" if v else "—" for v in vals) + (")" if len(vals) > 1 else "")

    for name, r in rows.items():
        times = [f"{r[st].get(c, float('nan')):.1f}" for st in ("forward", "backward") for c in clocks]
        gc = {True: "pass", False: "FAIL"}.get(r.get("gradcheck"), "—")
        lines.append("| " + " | ".join([name, *times, f"{r['max_err']:.1e}", "ok" if r["ok"] else "FAIL", gc,
                                         x(name, "python", "forward"), x(name, "python", "backward"),
                                         x(name, "compile", "forward"), x(name, "compile", "backward"),
                                         x(name, "python", "forward, cold") + ", " + x(name, "python", "backward, cold")]) + " |")
    text = head + "\n".join(lines) + "\n"
    if "matmul_floor_us" in result:
        f = result["matmul_floor_us"]
        text += ("\nThe matmuls alone (cuBLAS, events; transposed layout in brackets): forward "
                 f"{f['forward'].get('events')} ({f['forward, transposed'].get('events')}) µs, backward "
                 f"{f['backward'].get('events')} ({f['backward, transposed'].get('events')}) µs.\n")
    return text


def verdict(results: list[dict], device: str) -> list[str]:
    """Issue 4's targets, stated against the synchronized wall clock, in the warm loop (time_all says why)."""
    out = []
    for res in results:
        rows, s = res["rows"], res["size"]
        size = f"({s['batch']}, {s['features']}, {s['state']})"
        if device == "cuda":
            for step in ("forward", "backward"):
                e, c = speedup(rows, "cuda", "python", step, "wall"), speedup(rows, "cuda", "compile", step, "wall")
                ok = e is not None and e >= TARGET and (c is None or c > 1)
                cold = (speedup(rows, "cuda", "python", f"{step}, cold", c) for c in ("wall", "events"))
                out.append(f"{size} cuda {step}: {e:.2f}x eager, " + (f"{c:.2f}x compile" if c else "no compile")
                           + f" -> {'MET' if ok else 'NOT MET'} (cold loop: {'x, '.join(f'{v:.2f}' for v in cold)}x "
                           "eager, wall and events)")
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
          f"{env['threads']} CPU threads. Times are medians in µs; speedups on the synchronized wall clock "
          f"(on CUDA, events in brackets). Each timed call follows an untimed step of the same contender; "
          f"the last column is the cold loop, without that step.\n\n" + "\n".join(table(r, args.device) for r in results) +
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
