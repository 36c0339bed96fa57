"""The pool under a class's load: each exercise graded alone, then every student at once, on one pool.

    python3 benchmarks/pool.py --out benchmarks/results              # the GPU box: sum's four rungs, lltm/cuda
    python3 benchmarks/pool.py --cpu --students 6 --out /tmp          # here: sum/cpp on two CPU workers

It starts `kplay pool start` (one worker per GPU, or --cpu-workers), makes a token and a solved folder per
student (two per exercise), grades one of each exercise alone (the solo figures), then all the students at
once, each from a client process that sees no GPU and no nvcc (CUDA_VISIBLE_DEVICES= and a PATH without the
toolkit), as a student's laptop, then each exercise alone again. It reports the batch's wall time against
N x one grade / workers, each student's time against the solo run of the same kernel (with both noises and
record.same's verdict), the board's ranks both ways, and how far each kernel moved between its two lone
runs. Each table is written to --out as soon as it is known. --local also times
four concurrent `kplay run lltm --device cuda --variant cuda-fast` (no pool) against one alone: the lease.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playground.core import record  # noqa: E402

GPU_EXERCISES = [("sum", "tree"), ("sum", "first-add"), ("sum", "shuffle"), ("sum", "fast"), ("lltm", "cuda")]
CPU_EXERCISES = [("sum", "cpp"), ("linear", "cpp"), ("lltm", "cpp")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def laptop_env() -> dict:
    """A student's machine: no GPU visible, no CUDA toolkit on the PATH."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "nvcc").exists())
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PATH": path, "COLUMNS": "80", "NO_COLOR": "1"}


def start_pool(folder: Path, cpu_workers: int) -> subprocess.Popen:
    from playground.pool import cluster as pool
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "pool", "start", "--dir", str(folder), "--host",
                             "127.0.0.1", "--port", str(free_port()), "--endpoint-port", str(free_port()),
                             "--cpu-workers", str(cpu_workers)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            if pool.status(pool.Pool(folder))["workers"]:
                return proc
        except Exception:
            pass
        time.sleep(0.5)
    raise SystemExit("the pool did not start within 120 s")


def solved(family: str, variant: str, folder: Path, name: str) -> None:
    """A started folder with the exercise's own solution in it (written as kplay start would, without its
    build of the starter)."""
    from playground.family import registry
    from playground.workshop.scaffold import eject

    fam = registry.find(family)
    v = fam.variants[variant]
    eject(fam, folder, [v], fam.parse_params([]), exercise={"family": family, "variant": variant, "student": name,
                                                            "id": "bench", "hints": []})


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def grade(folder: Path, token: Path, sanitize: bool) -> tuple[dict, float, str]:
    """One student's `kplay check --pool --json` from a laptop-like process: (record, seconds, its report)."""
    say(f"{folder.name}: sent")
    t = time.perf_counter()
    extra = [] if sanitize else ["--no-sanitize"]
    done = subprocess.run([sys.executable, str(ROOT / "cli.py"), "check", str(folder), "--pool", str(token), "--json",
                           *extra], capture_output=True, text=True, env=laptop_env())
    seconds = time.perf_counter() - t
    say(f"{folder.name}: answered in {seconds:.1f} s (exit {done.returncode})")
    try:
        return json.loads(done.stdout), seconds, done.stderr
    except ValueError:
        raise SystemExit(f"{folder.name}: {done.stderr.strip()[-400:]}")


def stats_of(rec: dict):
    """The variant's time (its whole call, on the clock that counts) as timing.Stats, or None."""
    v = rec.get("run", {}).get("variants", [{}])[0]
    return record.Stats.from_dict(v["time"]) if v.get("time") else None


def ranks(records: list[dict]) -> dict[str, int]:
    """Each student's rank on the board built from these records (ties share one)."""
    from playground.workshop import board

    entries = [board.entry(r, Path(f"{r['student']}.json")) for r in records]
    return {e.student: k for g in board.rank(entries) for k, e in g.rows}


def local_lease(runs: int = 4) -> list[str]:
    """`kplay run lltm --device cuda --variant cuda-fast` alone, then four at once (no pool): the lease's work."""
    argv = [sys.executable, str(ROOT / "cli.py"), "run", "lltm", "--device", "cuda", "--variant", "cuda-fast",
            "--batch", "1024", "--features", "512", "--state", "1024", "--json"]

    def one() -> dict:
        return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)

    solo = one()
    with ThreadPoolExecutor(runs) as ex:
        together = list(ex.map(lambda _: one(), range(runs)))
    lines = ["| run | forward | backward | x eager (call) | waited | timed from-to (s, from the first) | warnings |",
             "|---|---|---|---|---|---|---|"]
    first = min(r["lease"]["timed_from"] for r in together)
    for name, r in [("alone", solo), *((f"together {k + 1}", r) for k, r in enumerate(together))]:
        v, lease = r["variants"][0], r["lease"]
        steps = {k: t["median_s"] * 1e6 for k, t in v[v["clock"]].items()}
        span = f"{lease['timed_from'] - first:.2f}-{lease['timed_to'] - first:.2f}" if r is not solo else "-"
        lines.append(f"| {name} | {steps.get('forward', 0):.0f} µs | {steps.get('backward', 0):.0f} µs | "
                     f"{v['speedup']:.2f} | {lease['waited_s']:.1f} s | {span} | {'; '.join(r['warnings']) or '-'} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="CPU exercises on CPU workers (no GPU needed)")
    parser.add_argument("--students", type=int, default=0, help="how many (default: two per exercise)")
    parser.add_argument("--cpu-workers", type=int, default=2)
    parser.add_argument("--no-sanitize", action="store_true")
    parser.add_argument("--local", action="store_true", help="only four concurrent local lltm runs (the lease), no pool")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None, help="the pool's and students' folders (default: a temporary one)")
    args = parser.parse_args()
    from playground.pool import cluster as pool
    exercises = CPU_EXERCISES if args.cpu else GPU_EXERCISES
    n = args.students or 2 * len(exercises)
    name = "lease-gpu.md" if args.local else "pool-cpu.md" if args.cpu else "pool-gpu.md"
    lines: list[str] = []

    def emit(more: list[str]) -> None:  # each table as soon as it is known: a run cut short keeps what it had
        lines.extend(more)
        print("\n".join(more), flush=True)
        if args.out:
            (args.out / name).write_text("\n".join(lines) + "\n")

    if args.local:
        emit(["Four concurrent local runs (no pool), lltm cuda-fast at (1024, 512, 1024):", "", *local_lease()])
        return
    with tempfile.TemporaryDirectory(prefix="kplay-pool-bench-") as tmp:
        tmp = args.work or Path(tmp)
        folder = tmp / "pool"
        proc = start_pool(folder, args.cpu_workers)
        say(f"pool started: {[w['name'] for w in pool.status(pool.Pool(folder))['workers']]}")
        try:
            run_class(pool.Pool(folder), exercises, n, tmp, not args.no_sanitize, emit)
        finally:
            proc.terminate()
            proc.wait(60)


def run_class(p, exercises: list, n: int, tmp: Path, sanitize: bool, emit) -> None:
    """Solo grades, the whole class at once, one report from a laptop, solo grades again; each table to emit."""
    from playground.pool import cluster as pool
    students = []
    for k in range(n):
        family, variant = exercises[k % len(exercises)]
        name = f"s{k + 1:02d}-{family}-{variant}"
        solved(family, variant, tmp / name, name)
        say(f"started {name}")
        students.append((name, (family, variant), tmp / name, pool.add_student(p, name, tmp)))
    firsts = {}  # each exercise's first student
    for _, ex, folder, token in students:
        firsts.setdefault(ex, (folder, token))
    solo = {ex: grade(folder, token, sanitize) for ex, (folder, token) in firsts.items()}
    workers = len(pool.status(p)["workers"])
    t = time.perf_counter()
    with ThreadPoolExecutor(n) as ex:
        done = list(ex.map(lambda s: grade(s[2], s[3], sanitize), students))
    wall = time.perf_counter() - t
    emit(table(students, solo, done, wall, statistics.median(s for _, s, _ in solo.values()), workers))
    emit(same_report(students[0], sanitize))
    again = {ex: grade(folder, token, sanitize) for ex, (folder, token) in firsts.items()}  # alone, once more
    emit(spread(solo, again))


def spread(solo: dict, again: dict) -> list[str]:
    """Each exercise graded alone before the class and again after it: how far one kernel's time moves between
    two lone runs, the yardstick for the class's ratios."""
    lines = ["", "| exercise | solo before | solo after | ratio | same | SM MHz before, after |", "|---|---|---|---|---|---|"]
    for ex in solo:
        a, b = stats_of(solo[ex][0]), stats_of(again[ex][0])
        if a and b:
            lines.append(f"| {'/'.join(ex)} | {a.median_s * 1e6:.1f} µs ± {100 * a.noise:.1f}% | "
                         f"{b.median_s * 1e6:.1f} µs ± {100 * b.noise:.1f}% | {b.median_s / a.median_s:.3f} | "
                         f"{'yes' if record.same(a, b) else 'no'} | {_mhz(a)}, {_mhz(b)} |")
    return lines


def _mhz(stats) -> str:
    """The SM clock over a timing's kept samples (NVML): low-high, or one figure."""
    if not stats.clock_mhz:
        return "-"
    low, _, high = stats.clock_mhz
    return f"{low}" if low == high else f"{low}-{high}"


def same_report(student, sanitize: bool) -> list[str]:
    """One student's `kplay check DIR --pool TOKEN` from the laptop-like process beside a local `kplay check DIR`
    on this machine: the reports, and whether their verdict lines agree."""
    name, _, folder, token = student
    extra = [] if sanitize else ["--no-sanitize"]
    base = [sys.executable, str(ROOT / "cli.py"), "check", str(folder), *extra]
    pooled = subprocess.run([*base, "--pool", str(token)], capture_output=True, text=True, env=laptop_env())
    local = subprocess.run([*base, "--name", name], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "80", "NO_COLOR": "1"})
    verdict = lambda text: [ln.split(" · ")[0] for ln in text.splitlines() if "cases passed" in ln or ln in ("PASS", "FAIL")]  # noqa: E731
    agree = verdict(pooled.stdout) == verdict(local.stdout) and pooled.returncode == local.returncode
    return ["", f"{name}: the pool's report from a process with no GPU and no nvcc, and a local check here: "
                f"verdict lines {'agree' if agree else 'DIFFER'} (exit {pooled.returncode} and {local.returncode})",
            "", "```", "$ CUDA_VISIBLE_DEVICES= kplay check DIR --pool TOKEN", pooled.stdout.rstrip(),
            pooled.stderr.rstrip(), "$ kplay check DIR", local.stdout.rstrip(), "```"]


def table(students, solo, done, wall, one, workers) -> list[str]:
    ideal = len(students) * one / workers
    lines = [f"{len(students)} students at once on {workers} worker(s): {wall:.1f} s; "
             f"N x one grade / workers = {len(students)} x {one:.1f} s / {workers} = {ideal:.1f} s "
             f"(ratio {wall / ideal:.2f})", "",
             "| student | worker | cases | time | solo | ratio | same | rank | solo rank | waited | while timing | SM MHz |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    records = [rec for rec, _, _ in done]
    together = ranks(records)
    alone = ranks([{**solo[ex][0], "student": name} for name, ex, _, _ in students])
    for (name, ex, _, _), (rec, _, _) in zip(students, done):
        mine, theirs = stats_of(rec), stats_of(solo[ex][0])
        if not (mine and theirs):
            lines.append(f"| {name} | {rec.get('worker', '?')} | {rec['passed']}/{rec['checked']} | - |")
            continue
        lines.append(f"| {name} | {rec.get('worker', '?')} | {rec['passed']}/{rec['checked']} | "
                     f"{mine.median_s * 1e6:.1f} µs ± {100 * mine.noise:.1f}% | "
                     f"{theirs.median_s * 1e6:.1f} µs ± {100 * theirs.noise:.1f}% | "
                     f"{mine.median_s / theirs.median_s:.3f} | {'yes' if record.same(mine, theirs) else 'no'} | "
                     f"{together.get(name)} | {alone.get(name)} | {rec['run'].get('lease', {}).get('waited_s', 0):.1f} s | "
                     f"{_others(rec['run'])} | {_mhz(mine)} |")
    return lines


def _others(run: dict) -> str:
    """Who else the timing saw: NVML's other processes on the GPU, or the others' share of the timed CPU cores."""
    seen = run.get("neighbours") or {}
    if seen.get("gpu_others") is not None:
        return f"{seen['gpu_others']} other GPU process(es)"
    return f"CPU {100 * seen['cpu_busy']:.0f}% busy" if seen.get("cpu_busy") is not None else seen.get("note") or "-"


if __name__ == "__main__":
    main()
