"""Where the LLTM cuda-fast forward's synchronized wall clock goes at (1024, 512, 1024), in one GPU call.

    python3 benchmarks/lltm_host_probe.py --out $OUT [--family DIR ...] [--matmuls]

For eager and each cuda-fast build (the one in snippets/, and any --family folder: a changed copy of
snippets/lltm, to compare in the same run; a copy from before the split has the fast op as its variant
cuda): forward and backward in the cold loop (lltm_bench.time_all, warm=False: wall clock) and the warm one
(an untimed step of the same contender first: wall clock and events), and forward without autograd; then one
profiled warm loop (torch.profiler, CPU and GPU on one timeline), cut per call into host time to the first
and to the biggest kernel, GPU busy, GPU idle between kernels, and the tail to the synchronize's return, with
one call's timeline written to --out. Floors beside them: a bare synchronize, one tiny launch and its
synchronize. --matmuls adds a cold profile and the matmuls alone in several forms (GPU time: cuBLAS,
cuBLASLt, split-K parts, transposed). All timing is playground.run.timing.bench.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: common

import torch  # noqa: E402

import lltm_bench as lb  # noqa: E402
from playground.family import registry  # noqa: E402
from playground.compiler.build import build  # noqa: E402
from playground.run.timing import bench  # noqa: E402

SIZE = (1024, 512, 1024)


def wall_us(fns: dict) -> dict:
    """Median synchronized wall clock of each fn() in µs, taking turns."""
    return {k: round(st.median_s * 1e6, 1) for k, st in bench(fns, "cuda", budget_s=0.5, wall=True).items()}


def profiled(fns, inputs, out_dir, n=25, warm=False):
    """Steps taking turns between contenders, as in the benchmark; per call from one profile: host time
    to the first kernel's start, GPU busy, idle between kernels, tail to the synchronize's return (µs);
    and one call's timeline (CPU ops and kernels, µs from the call's start) written to out_dir."""
    from torch.profiler import ProfilerActivity, profile, record_function

    runs = {(name, step): pair for name, fn in fns.items() for step, pair in lb.SPEC.timings(fn, inputs).items()}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            for (name, step), (prepare, run) in runs.items():
                if warm:
                    run(*prepare())
                args = prepare()
                torch.cuda.synchronize()
                with record_function(f"rec|{name}|{step}|{i}"):
                    out = run(*args)
                    torch.cuda.synchronize()
                del out, args
    events = prof.events()
    cuda_kind = torch.autograd.DeviceType.CUDA
    recs = [e for e in events if e.name.startswith("rec|") and e.device_type != cuda_kind]
    kernels = sorted((e for e in events if e.device_type == cuda_kind and not e.name.startswith("rec|")),
                     key=lambda e: e.time_range.start)
    cpu = sorted((e for e in events if e.device_type != cuda_kind and not e.name.startswith("rec|")),
                 key=lambda e: e.time_range.start)
    out = {}
    for name, step in runs:
        rows, mine = [], [r for r in recs if r.name.split("|")[1:3] == [name, step]]
        for c in mine:
            s, e = c.time_range.start, c.time_range.end
            ks = [k for k in kernels if s <= k.time_range.start <= e]
            if not ks or int(c.name.split("|")[3]) < 3:
                continue
            busy = sum(k.time_range.elapsed_us() for k in ks)
            first, last = ks[0].time_range.start, max(k.time_range.end for k in ks)
            big = max(ks, key=lambda k: k.time_range.elapsed_us())
            rows.append({"wall": e - s, "to_first_kernel": first - s, "to_biggest_kernel": big.time_range.start - s,
                         "busy": busy, "idle_between": (last - first) - busy, "tail": e - last, "kernels": len(ks)})
        out[f"{name} {step}"] = {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]} if rows else {}
        c = next((r for r in mine if r.name.endswith("|10")), None)
        if c is not None:
            s, e = c.time_range.start, c.time_range.end
            lines = [f"{x.time_range.start - s:8.1f} +{x.time_range.elapsed_us():7.1f}  cpu  {x.name[:100]}"
                     for x in cpu if s <= x.time_range.start <= e]
            lines += [f"{k.time_range.start - s:8.1f} +{k.time_range.elapsed_us():7.1f}  GPU  {k.name[:100]}"
                      for k in kernels if s <= k.time_range.start <= e]
            lines.sort(key=lambda ln: float(ln.split()[0]))
            (out_dir / f"timeline-{'warm' if warm else 'cold'}-{name.replace(' ', '_')}-{step}.txt").write_text("\n".join(lines) + "\n")
    return out


REPS = 20


def gpu_us(fns: dict) -> dict:
    """GPU time per call of each fn: REPS back-to-back calls between two events (host overhead hidden), from
    an idle GPU after an untimed round of the same (bench's warm loop: no L2 flush), median over samples."""
    batches = {k: (lambda f=f: [f() for _ in range(REPS)]) for k, f in fns.items()}
    return {k: round(st.median_s * 1e6 / REPS, 1) for k, st in bench(batches, "cuda", budget_s=1.0, warm=True).items()}


def matmuls(inputs):
    """The forward's and the backward's matmuls alone, GPU time: whole, transposed, in split-K parts (as
    lltm.cpp's partial_products), the forward's also through cuBLASLt and without the cat."""
    input, weights, bias, old_h, *_ = inputs
    X = torch.cat([old_h, input], 1)
    dG = torch.randn(X.shape[0], weights.shape[0], device="cuda")
    state = old_h.shape[1]

    def parts(a, b, p):
        s = a.shape[1] // p
        return torch.bmm(a.as_strided((p, a.shape[0], s), (s * a.stride(1), a.stride(0), a.stride(1))),
                         b.as_strided((p, s, b.shape[1]), (s * b.stride(0), b.stride(0), b.stride(1))))

    forward = {"fwd X@W^T (mm)": lambda: X @ weights.t(), "fwd addmm (eager)": lambda: torch.addmm(bias, X, weights.t()),
               "fwd two mm, no cat": lambda: (old_h @ weights[:, :state].t(), input @ weights[:, state:].t())}
    for p in (2, 4, 6, 8, 12):
        if X.shape[1] % p == 0:
            forward[f"fwd split {p} (bmm)"] = lambda p=p: parts(X, weights.t(), p)
    out = gpu_us({"cat": lambda: torch.cat([old_h, input], 1)})
    for lib in ("cublas", "cublaslt"):  # a global setting: one library's contenders at a time
        torch.backends.cuda.preferred_blas_library(lib)
        out |= {f"{lib}: {k}": v for k, v in gpu_us(forward).items()}
    torch.backends.cuda.preferred_blas_library("cublas")
    backward = {"d_X mm": lambda: dG @ weights, "d_W mm": lambda: dG.t() @ X,
                "d_W^T = X^T dG (mm)": lambda: X.t() @ dG, "d_X^T = W^T dG^T (mm)": lambda: weights.t() @ dG.t()}
    for p in (2, 4):
        backward[f"d_W split {p} bmm only"] = lambda p=p: parts(dG.t(), X, p)
        backward[f"d_W split {p} + sum"] = lambda p=p: parts(dG.t(), X, p).sum(0)
        backward[f"d_X split {p} bmm only"] = lambda p=p: parts(dG, weights, p)
    return out | gpu_us(backward)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--family", type=Path, action="append", default=[], help="a changed copy of snippets/lltm")
    ap.add_argument("--matmuls", action="store_true", help="also time the forward's matmul alone, several ways")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    fns = {"eager": lb.SPEC.lltm_reference}
    for folder in [None, *args.family]:
        fam = lb.FAMILY if folder is None else registry.load_family(folder.resolve())
        variant = lb.FAST if lb.FAST in fam.variants else "cuda"  # before the split, the fast op was cuda
        t = time.perf_counter()
        ops, _ = build(fam, fam.variants[variant], fam.parse_params([]))
        name = lb.FAST if folder is None else f"{lb.FAST} {folder.name}"
        print(f"built {name}: {time.perf_counter() - t:.0f} s", flush=True)
        fns[name] = lb.SPEC.lltm_function(ops, lb.FAST)
    inputs = lb.inputs_for(SIZE, "cuda")
    small = torch.zeros(16, device="cuda")
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "floors_wall_us": wall_us({"synchronize alone": lambda: None, "one tiny launch": lambda: small.add_(1)})}
    for name, fn in fns.items():
        report.setdefault("check", {})[name] = lb.check(fn, inputs)
    pairs = {(name, step): pair for name, fn in fns.items() for step, pair in lb.SPEC.timings(fn, inputs).items()}
    got = lb.time_all(pairs, "cuda", 3.0, warm=False)
    report["bench_us"] = {f"{n} {s}": v for (n, s), v in got.items()}
    plain = [x.detach().clone() for x in inputs[:5]]
    with torch.no_grad():
        report["no_grad_fwd_wall_us"] = wall_us({name: (lambda fn=fn: fn(*plain)) for name, fn in fns.items()})
    got = lb.time_all(pairs, "cuda", 3.0, warm=True)
    report["warm_us"] = {f"{n} {s}": v for (n, s), v in got.items()}
    report["profile, warm"] = profiled(fns, inputs, args.out, warm=True)
    if args.matmuls:
        report["profile"] = profiled(fns, inputs, args.out)
        report["gpu_us_matmuls"] = matmuls(inputs)
    (args.out / "lltm-host-probe.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
