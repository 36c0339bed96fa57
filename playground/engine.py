"""The one door: what each kplay command does, for the CLI and the notebook magic alike.

Each function takes what was asked (a Request, made and validated by `request`, or a folder) and returns a
record: plain data or files written, never a print. The CLI declares options and renders what comes back;
the magic runs the CLI in a child process and calls this module for its cells.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from .child import spawn
from .compiler import build, disasm, toolchain
from .compiler import doctor as checks
from .core import events
from .core.errors import KplayError, UsageError
from .family import registry, render
from .family.request import Request, split_sizes  # noqa: F401  the door's own names
from .family.request import make as request  # noqa: F401  the door's own name
from .insight import profile as profiler
from .insight import sanitize as sanitizer
from .pool import client, cluster
from .report import plot as plots
from .report import tables
from .run import compare, runner
from .workshop import board as boards
from .workshop import board_page, exercise, scaffold, sweep, todos
from .workshop import folder as started
from .workshop import watch as watcher

find = registry.find


def families(paths=None, options: frozenset[str] = frozenset()) -> tuple[list[dict], list[str]]:
    """`kplay list`: a row per family, and warnings (a folder refused, a size named like an option, a
    family from --path that hides a built-in)."""
    found, refused = registry.scan(paths)
    rows = [{"name": f.name, "summary": f.summary, "variants": list(f.variants), "devices": f.devices,
             "exercises": exercise.exercises(f), "path": str(f.path)} for f in found.values()]
    warnings = [*(f"{r} (not listed)" for r in refused), *filter(None, (registry.clash(f, options) for f in found.values())),
                *(f"{f.name} from {f.path} hides the built-in {f.name}: kplay run {f.name} runs it"
                  for f in found.values() if registry.shadowing(f))]
    return rows, warnings


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def need_gpu(what: str) -> None:
    """A GPU, asked before a tool starts the child (the tool's own message would be less clear)."""
    if not has_gpu():
        raise UsageError(f"{what}: no CUDA GPU is visible here")


# ---- run, sanitize, profile, bench -------------------------------------------------------------------------

def sanitized_device(tool: str, device: str) -> str:
    """--sanitize checks CUDA kernels: a known tool, the tool there, and not --device cpu (each one line, exit 2)."""
    sanitizer.tool_name(tool)
    if device == "cpu":
        raise UsageError("--sanitize checks CUDA kernels: drop --device cpu")
    need_gpu(f"--sanitize {tool}")  # before the tool: installing it would not help a machine with no GPU
    sanitizer.executable()
    return "cuda"


def run(req: Request, on_event=events.ignore, sanitize: str | None = None, pool: Path | None = None) -> dict:
    """`kplay run`: the run record, from a child here, under a sanitizer, or from a worker of the class's pool."""
    if pool:
        if sanitize:
            raise UsageError("--sanitize runs the tool on this machine: it cannot go with --pool")
        on_event(events.PHASE, phase="pool")
        return client.run(req, pool)
    return sanitizer.run(req, sanitize, on_event) if sanitize else spawn.run(req, on_event)


def runs(req: Request, on_event=events.ignore, sanitize: str | None = None, pool: Path | None = None) -> list[dict]:
    """`kplay run`: its record, then with --variant all and no --dtype one more per dtype the other variants
    take first (linear's tensor-core steps: bfloat16), each against the baselines in that dtype."""
    first = run(req, on_event, sanitize, pool)
    later = dataclasses.replace(req, own_dtypes=False, given_params=())  # the first run warned of unused params
    more = [_run_or_error(dataclasses.replace(later, dtype=d), on_event, sanitize, pool)
            for d in first.get("other_dtypes", [])]
    if more:  # --json prints the first record: the others inside it, and the verdict of them all
        first |= {"other_runs": more, "all_ok": all(r.get("ok", False) for r in [first, *more]),
                  "all_exit_code": max(r["exit_code"] for r in [first, *more])}
    return [first, *more]


def _run_or_error(req: Request, on_event, sanitize: str | None, pool: Path | None) -> dict:
    """A follow-on run of `runs`: its record, or its error as one (the runs before it keep their tables)."""
    try:
        return run(req, on_event, sanitize, pool)
    except KplayError as e:
        return {"dtype": req.dtype, "error": str(e), "exit_code": e.exit_code}


def against(path: Path, req: Request) -> dict:
    """An earlier run's --json record, to compare this run with."""
    return compare.load(path, req)


def profile(req: Request, on_event=events.ignore, ncu: bool = True) -> dict:
    """`kplay profile`: one call of each contender at the requested size, and the kernels it launched."""
    return profiler.run(req, on_event, ncu=ncu)


def check_profile_device(device: str) -> None:
    profiler.check_device(device)


def writable(csv: str | None, *pngs: str | None) -> None:
    """Fail now, not after a long sweep: matplotlib for a PNG, an existing folder for each file."""
    if any(pngs):
        plots.require()
    for target in filter(None, (csv, *pngs)):
        folder = Path(target).resolve().parent
        if not folder.is_dir():
            raise UsageError(f"{target}: the folder {folder} does not exist")


def bench_points(base: Request, over: str | None, tie: str | None, sizes: str | None, fixed: dict, name: str, paths):
    """`kplay bench`: the sweep's requests and its swept size, every point validated before anything runs."""
    swept = sweep.settings(registry.find(name, paths), over, None if tie is None else [t for t in tie.split(",") if t],
                           sizes)
    return sweep.requests(base, swept, fixed), swept.key


sweep_run = sweep.run  # each point a whole run in its own child: (records, what stopped the sweep early)


def sweep_files(records: list[dict], key: str, csv: str | None, plot: str | None, roofline: str | None) -> None:
    """The sweep's CSV and PNGs (a point that was skipped draws nothing)."""
    if csv and records:
        tables.write_csv(records, csv)
    drawn = any("skipped" not in r for r in records)
    if plot and drawn:
        plots.save(records, key, plot)
    if roofline and drawn:
        plots.roofline(records, key, roofline)


# ---- show: the source, and what the compiler made of it ----------------------------------------------------

def sources(fam, device: str, variant: str | None, params: dict, starter: bool) -> list[tuple]:
    """`kplay show`: (variant, {file: text}, is it the starter) for each chosen variant, the starter's text
    where it is one."""
    shown = []
    for v in fam.chosen(device, variant):
        full = render.sources(fam, v, params)
        text = exercise.starter_sources(fam, v, params) if starter else full
        shown.append((v, text, text != full))
    return shown


def code(fam, kind: str, variant: str | None, params: dict, kernel: str | None, on_event, starter: bool = False):
    """`kplay show --ptx/--sass/--asm`: a record per chosen variant (its functions, its loops); an exercise's
    starter is built from a copy in a temporary folder, named in `shown_as`."""
    device = "cpu" if kind == "asm" else "cuda"
    chosen = fam.chosen(device, variant)
    if starter and any(exercise.starter_sources(fam, v, params) != render.sources(fam, v, params) for v in chosen):
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kplay-starter-") as tmp:
            scaffold.eject(fam, Path(tmp), list(fam.variants.values()), params, starter=True)
            return code(registry.load_family(Path(tmp)), kind, variant, params, kernel, on_event) | {
                "shown_as": f"the starter of {fam.path}"}
    for v in chosen:
        disasm.require(kind, fam, v)  # every refusal before the first build
    records = []
    for v in chosen:
        found, lines, loops = disasm.compiled(kind, fam, v, params, on_event)
        found = disasm.pick(found, kernel, f"{fam.name}/{v.name}")
        records.append({"family": fam.name, "variant": v.name, "kind": kind, "functions": disasm.to_json(found, lines),
                        "loops": loops, "sources": [str(fam.path / s) for s in v.sources],
                        "shown": [s for s in v.sources if s.endswith(".cu") == (kind != "asm")]})
    return {"records": records, "shown_as": str(fam.path)}


# ---- the workshop: eject, new, export, start, check, hint, watch, board ------------------------------------

def eject(fam, folder: Path, device: str | None, variant: str | None, params: list[str] | dict, force: bool,
          starter: bool):
    """`kplay eject`: the chosen variants' files, rendered with their parameters (NAME=VALUE pairs, or parsed)."""
    if variant and variant != "all":
        chosen = [fam.variant(variant)]
    else:
        devices = [device] if device and device != "auto" else fam.devices
        chosen = list({v.name: v for d in devices for v in fam.pick_variants(d, "all")}.values())
    values = params if isinstance(params, dict) else fam.parse_params(params, chosen)
    return scaffold.eject(fam, folder, chosen, values, force, starter=starter)


def new(name: str, folder: Path, force: bool) -> list:
    return scaffold.new(name, folder, force)


def export(fam, folder: Path, device: str, variant: str | None, params: list[str], force: bool) -> list:
    v = fam.variant(variant) if variant else fam.pick_variants("cuda" if device == "auto" else device, None)[0]
    return scaffold.export(fam, folder, v, fam.parse_params(params, [v]), force)


def start(name: str, folder: Path, params: list[str], force: bool, student: str | None, paths,
          warn=lambda line: None):
    """`kplay start NAME[/VARIANT] DIR`: the exercise's name (family/variant), the files written, and whether it
    must be checked elsewhere (a CUDA exercise with no GPU here: warned of before anything is written)."""
    fam_name, variant = (name, None) if Path(name).exists() or "/" not in name else name.rsplit("/", 1)
    fam = registry.find(fam_name, paths)
    gpu = has_gpu()
    v = exercise.pick(fam, variant, gpu=variant is None and gpu)
    taken = f"{fam.name}/{v.name}"
    elsewhere = v.device == "cuda" and not gpu
    if elsewhere:
        warn(f"{taken} is a CUDA exercise and there is no GPU here: check it on the class's pool, or a GPU machine")
    return taken, exercise.start(fam, v, folder, fam.parse_params(params, [v]), force, student), elsewhere


def check(folder: Path, device: str, student: str | None, timeout: float, sanitize: bool, pool: Path | None,
          on_event=events.ignore, seed: int | None = None) -> dict:
    """`kplay check`: the graded record, here or on the pool (where the token says who the student is); at a
    fresh seed unless one is given."""
    if pool:
        on_event(events.PHASE, phase="pool")
        rec = client.check(folder, pool, timeout, sanitize, seed)
        if rec.get("error") and not rec.get("dtypes"):  # the pool could not run it: the same one line as here
            raise UsageError(rec["error"])
        return rec
    return exercise.grade(folder, device, student, on_event, timeout, sanitize=sanitize, seed=seed)


unusable = started.unusable
score = exercise.score
exercise_table = started.table


def hint(folder: Path, number: int | None):
    """The next hint (or hint `number`), how many were shown before, how many there are."""
    return started.next_hint(folder, number)


def watch(folder: str):
    return watcher.folder(folder)


serve_watch = watcher.serve


def board(results: list[Path], out_dir: Path) -> tuple[list, list[str], list]:
    """`kplay board`: the ranked groups, the warnings about the records, the files written."""
    entries, warnings = boards.load([str(p) for p in results])
    groups = boards.rank(entries)
    boards.targets(out_dir)  # a file kplay did not write is refused before anything is written
    return groups, warnings, boards.write(groups, out_dir, board_page.page(groups))


def board_table(groups):
    return boards.table(groups)


def pool_results(folder: Path) -> Path:
    """A pool's results folder (a folder that is not a pool's is refused)."""
    p = cluster.Pool(folder)
    p.config
    return p.results


def follow(folder: Path):
    """Now, then at every change of the pool's results folder: the records there each time."""
    from itertools import chain

    from watchfiles import watch as changes

    results = pool_results(folder)
    for _ in chain([None], changes(results, recursive=True)):
        yield sorted(results.glob("*/*.json"))


# ---- the build cache and the set-up --------------------------------------------------------------------------

def clean(on_wait) -> tuple[int, list[str], Path]:
    freed, kept = build.clear_cache(on_wait=on_wait)
    return freed, kept, toolchain.cache_dir()


builds_in_flight = toolchain.builds_in_flight
diagnose = checks.diagnose


resolve_device = runner.resolve_device


def variant_files(fam, variant, params: dict, starter: bool) -> dict[str, str]:
    """A variant's sources and headers as `kplay eject` writes them, or as its exercise's starter."""
    files = {**render.sources(fam, variant, params), **{n: render.header(fam, variant, n) for n in variant.includes}}
    return todos.starter_files(files, fam.path)[0] if starter else files


render_text = render.render


# ---- the class's pool ----------------------------------------------------------------------------------------

def pool_start(folder: Path, host: str, port: int, endpoint_port: int, cpu_workers: int, say) -> None:
    cluster.needs_dask()
    p = cluster.create(folder, host, port, endpoint_port)
    joined = cluster.join_file(p, folder / "join.json")
    say(f"pool folder {folder}; other servers join with kplay pool join {shlex.quote(str(joined))} (keep it secret)")
    cluster.serve(p, cpu_workers, say)


def add_students(folder: Path, names: list[str], out: Path | None) -> list[Path]:
    p, out = cluster.Pool(folder), out or folder.parent / f"{folder.name}-tokens"  # not in the pool's folder
    p.config  # a folder that is not a pool's is refused before any file is written
    out.mkdir(parents=True, exist_ok=True)
    return [cluster.add_student(p, name, out) for name in names]


def pool_join(join_file: Path, folder: Path, cpu_workers: int, name: str | None, say) -> None:
    cluster.needs_dask()
    p, scheduler = cluster.from_join_file(join_file, folder)
    cluster.join(p, scheduler, cpu_workers, name, say)


def pool_status(folder: Path) -> dict:
    cluster.needs_dask()
    try:
        return cluster.status(cluster.Pool(folder))
    except OSError as e:
        raise UsageError(f"the pool's scheduler cannot be reached: {e}") from None

