"""kplay: read, edit, compile, check and time small PyTorch C++ and CUDA kernels."""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from functools import wraps
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from playground import registry
from playground.errors import KplayError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
                  context_settings={"help_option_names": ["-h", "--help"]})
out = Console()
err = Console(stderr=True)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


Path_ = Annotated[Optional[list[str]], typer.Option("--path", help="Extra folder of kernel families (also $KPLAY_PATH).")]
Json = Annotated[bool, typer.Option("--json", help="Print plain JSON instead of tables.")]
Params = Annotated[Optional[list[str]], typer.Option("--param", "-p", help="Template parameter NAME=VALUE, e.g. threads=512.")]
Variant = Annotated[Optional[str], typer.Option(help="Variant name, or 'all'.")]


def friendly(command):
    """Domain errors become one red line (plus compiler details) and their exit code; KPLAY_DEBUG=1 shows the traceback."""

    @wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            err.print("[red]interrupted[/]")  # the child and its build are killed; the cache stays consistent
            raise typer.Exit(130) from None
        except KplayError as e:
            if os.environ.get("KPLAY_DEBUG"):
                raise
            err.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            for line in getattr(e, "details", []):
                err.print(line, highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None

    return wrapper


@app.command("list")
@friendly
def list_(json_: Json = False, path: Path_ = None):
    """List the kernel families: summary, variants, devices."""
    rows = [{"name": f.name, "summary": f.summary, "variants": list(f.variants), "devices": f.devices, "path": str(f.path)}
            for f in registry.families(path).values()]
    if json_:
        print(json.dumps(rows, indent=2))
        return
    from playground.report import family_table

    out.print(family_table(rows))


@app.command()
@friendly
def show(name: str, device: Device = Device.cpu, variant: Variant = None, param: Params = None, path: Path_ = None):
    """Show what a kernel teaches, then its rendered source, highlighted."""
    from rich.markdown import Markdown
    from rich.panel import Panel
    from rich.syntax import Syntax

    from playground.render import sources

    fam = registry.find(name, path)
    dev = "cuda" if device == Device.auto else device.value
    params = fam.parse_params(param or [])
    out.print(Panel(Markdown(fam.note.strip() or fam.summary), title=f"{fam.name}: {fam.summary}", title_align="left"))
    for v in fam.pick_variants(dev, variant):
        out.print(f"[b]{v.name}[/b] ({v.device}): {v.note}")
        for file, text in sources(fam, v, params).items():
            lexer = "cuda" if file.endswith(".cu") else "cpp"
            out.print(Panel(Syntax(text, lexer, line_numbers=True, word_wrap=True), title=str(fam.path / file), title_align="left"))


@app.command()
@friendly
def run(
    name: Annotated[str, typer.Argument(help="A kernel family (kplay list) or the path of a snippet folder.")],
    n: Annotated[Optional[str], typer.Option(help="Number of elements, e.g. 1e7.")] = None,
    values: Annotated[Optional[str], typer.Option(help="Explicit values, e.g. 4,3,2,1 (print_array).")] = None,
    batch: Annotated[Optional[str], typer.Option(help="Batch size (lltm, linear).")] = None,
    features: Annotated[Optional[str], typer.Option(help="Input features (lltm).")] = None,
    state: Annotated[Optional[str], typer.Option(help="State size (lltm).")] = None,
    in_: Annotated[Optional[str], typer.Option("--in", help="Input features (linear).")] = None,
    out_: Annotated[Optional[str], typer.Option("--out", help="Output features (linear).")] = None,
    size: Annotated[Optional[list[str]], typer.Option(help="Any size NAME=VALUE the kernel declares.")] = None,
    device: Annotated[Device, typer.Option(help="auto picks cuda when a GPU is there.")] = Device.auto,
    variant: Variant = None,
    dtype: Annotated[Optional[str], typer.Option(help="float32, float64, int32, ... (kernel's first by default).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the inputs.")] = 0,
    param: Params = None,
    timeout: Annotated[float, typer.Option(help="Seconds the kernel may run (builds excluded).")] = 120.0,
    no_bench: Annotated[bool, typer.Option("--no-bench", help="Check only, no timing: the fastest edit loop.")] = False,
    no_compile: Annotated[bool, typer.Option("--no-compile", help="Skip the torch.compile baseline (lltm).")] = False,
    json_: Json = False,
    path: Path_ = None,
):
    """Build, check and time a kernel against its PyTorch reference. Exit code: the verdict."""
    from playground import isolate, runner

    sizes = {k: v for k, v in dict(n=n, values=values, batch=batch, features=features, state=state,
                                   **{"in": in_, "out": out_}).items() if v is not None}
    for pair in size or []:
        key, _, value = pair.partition("=")
        sizes[key] = value
    request = dict(name=name, device=device.value, variant=variant, dtype=dtype, seed=seed,
                   sizes=sizes, params=param or [], paths=path)
    runner.plan(**request)  # bad input fails here, before torch is imported
    with _progress() as on_event:
        result = isolate.run({**request, "bench": not no_bench, "compile_baseline": not no_compile}, timeout, on_event)
    if json_:
        print(json.dumps(result, indent=2))
    else:
        from playground.report import run_report

        out.print(run_report(result))
    raise typer.Exit(result["exit_code"])


@app.command()
@friendly
def bench(
    name: Annotated[str, typer.Argument(help="A kernel family (kplay list) or the path of a snippet folder.")],
    sizes: Annotated[Optional[str], typer.Option(help="1e3,1e4,1e5 (a list), 1e3..1e9 (powers of ten) or 1e3..1e9:x2.")] = None,
    over: Annotated[Optional[str], typer.Option(help="The size to sweep (default: task.toml's \\[bench] size, else the first size).")] = None,
    tie: Annotated[Optional[str], typer.Option(help="Sizes that follow the swept one, e.g. in,out (linear).")] = None,
    size: Annotated[Optional[list[str]], typer.Option(help="A fixed size NAME=VALUE for the other sizes.")] = None,
    device: Annotated[Device, typer.Option(help="auto picks cuda when a GPU is there.")] = Device.auto,
    variant: Annotated[str, typer.Option(help="Variant name, or 'all'.")] = "all",
    dtype: Annotated[Optional[str], typer.Option(help="float32, float64, ... (kernel's first by default).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for the inputs.")] = 0,
    param: Params = None,
    timeout: Annotated[float, typer.Option(help="Seconds each point may run (builds excluded).")] = 120.0,
    json_: Json = False,
    csv: Annotated[Optional[str], typer.Option(help="Write one row per (size, variant) to this CSV file.")] = None,
    plot: Annotated[Optional[str], typer.Option(help="Write the chart to this PNG file (needs matplotlib).")] = None,
    path: Path_ = None,
):
    """Sweep one size: each point a full run (check and timing); a table, a chart, and optionally a PNG."""
    from playground import sweep

    if plot:
        from playground.plot import require

        require()
    for target in filter(None, (csv, plot)):  # fail now, not after a long sweep
        if not Path(target).resolve().parent.is_dir():
            raise KplayError(f"{target}: the folder {Path(target).resolve().parent} does not exist")
    fixed = {key: value for key, _, value in (pair.partition("=") for pair in size or [])}
    base = dict(name=name, device=device.value, variant=variant, dtype=dtype, seed=seed, sizes=fixed, params=param or [], paths=path)
    tied = None if tie is None else [t for t in tie.split(",") if t]
    swept = sweep.settings(registry.find(name, path), over, tied, sizes)
    points = sweep.requests(base, swept)  # every point validated before torch is imported
    points = [{**point, "compile_baseline": False} for point in points]  # a sweep shows the first baseline only
    with _sweep_progress(len(points), swept.key) as (on_point, on_event):
        records, error = sweep.run(points, timeout, on_point, on_event)
    if json_:
        print(json.dumps(records, indent=2))
    elif records:
        from playground.report import sweep_chart, sweep_table

        out.print(sweep_table(records, swept.key))
        out.print(sweep_chart(records, swept.key))
    if csv and records:
        sweep.write_csv(records, csv)
    if plot and any("skipped" not in r for r in records):
        from playground.plot import save

        save(records, swept.key, plot)
    if error:
        raise error
    raise typer.Exit(0 if all(r.get("ok", True) for r in records) else 1)


def _sweep_progress(total: int, key: str):
    """A bar over the points, the current step of the current point beside it."""
    from contextlib import contextmanager

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    @contextmanager
    def manager():
        with Progress(TextColumn("{task.fields[point]}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                      TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal) as progress:
            task = progress.add_task("starting", total=total, point="")

            def on_point(k, request):
                progress.update(task, completed=k, point=f"{key}={request['sizes'][key]:,}", description="starting (importing torch)")

            yield on_point, _events(progress, task, cached_lines=False)
            progress.update(task, completed=total)

    return manager()


def _progress():
    """A spinner with elapsed seconds while compiling; one line per finished build."""
    from contextlib import contextmanager

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    @contextmanager
    def manager():
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=err, transient=True, disable=not err.is_terminal) as progress:
            task = progress.add_task("starting (importing torch)", total=None)
            yield _events(progress, task)

    return manager()


def _events(progress, task, cached_lines: bool = True):
    """The child's events as progress: what it does now, and one line per finished build."""

    def on_event(event, **data):
        if event == "build_start":
            progress.update(task, description=f"compiling {data['variant']}")
        elif event == "build_done" and (cached_lines or not data["cached"]):
            how = "cached build" if data["cached"] else f"compiled in {data['seconds']:.1f} s"
            progress.console.print(f"[green]✓[/] {data['variant']}: {how}", highlight=False)
        elif event == "check":
            progress.update(task, description=f"checking {data['variant']} at {data['case']}")
        elif event == "phase" and data["phase"] == "time":
            progress.update(task, description="timing")

    return on_event


@app.command()
@friendly
def doctor():
    """Check the set-up: python, torch, GPU, nvcc, ninja, compiler, cache."""
    from playground.doctor import diagnose
    from playground.report import checks_table

    rows = diagnose()
    out.print(checks_table(rows))
    raise typer.Exit(0 if all(ok for _, ok, _ in rows) else 1)


@app.command()
@friendly
def clean():
    """Empty kplay's build cache."""
    from playground.build import clear_cache
    from playground.toolchain import cache_dir

    freed = clear_cache()
    out.print(f"removed {freed / 1e6:.1f} MB from {cache_dir()}")


Force = Annotated[bool, typer.Option("--force", help="Overwrite existing files.")]


@app.command()
@friendly
def eject(name: str, folder: Annotated[Optional[str], typer.Argument(help="Where to write (default ./NAME).")] = None,
          device: Annotated[Optional[Device], typer.Option(help="Only this device's variants.")] = None,
          variant: Variant = None, param: Params = None, force: Force = False, path: Path_ = None):
    """Copy a kernel into a folder you edit: its sources rendered with your --param values, and its spec."""
    from playground.scaffold import eject as write

    fam = registry.find(name, path)
    if variant and variant != "all":
        chosen = [fam.variant(variant)]
    else:
        devices = [device.value] if device and device != Device.auto else fam.devices
        chosen = list({v.name: v for d in devices for v in fam.pick_variants(d, "all")}.values())
    target = Path(folder or fam.name)
    for f in write(fam, target, chosen, fam.parse_params(param or []), force):
        out.print(f"wrote {f}")
    out.print(f"edit the sources, then: [b]kplay run {_as_path(target)}[/b]")


@app.command()
@friendly
def new(name: str, folder: Annotated[Optional[str], typer.Argument(help="Where to write (default ./NAME).")] = None,
        force: Force = False):
    """Scaffold a new kernel family (C++ op, reference, test sizes) that passes as it is."""
    from playground.scaffold import new as write

    target = Path(folder or name)
    for f in write(name, target, force):
        out.print(f"wrote {f}")
    out.print(f"try it: [b]kplay run {_as_path(target)}[/b]")


@app.command()
@friendly
def export(name: str, folder: Annotated[str, typer.Argument(help="The package folder to write.")],
           device: Device = Device.cpu, variant: Variant = None, param: Params = None, force: Force = False,
           path: Path_ = None):
    """Write a standalone pip-installable package (setup.py with CppExtension/CUDAExtension) for one variant."""
    from playground.scaffold import export as write

    fam = registry.find(name, path)
    dev = "cuda" if device == Device.auto else device.value
    v = fam.variant(variant) if variant else fam.pick_variants(dev, None)[0]
    for f in write(fam, Path(folder), v, fam.parse_params(param or []), force):
        out.print(f"wrote {f}")
    out.print(f"build and test it: [b]pip install --no-build-isolation {folder} && python -m pytest {folder}/tests[/b]")


def _as_path(folder) -> str:
    """A folder as `kplay run` reads it: a bare name would mean the built-in family."""
    return str(folder) if folder.is_absolute() or str(folder).startswith(".") else f"./{folder}"


if __name__ == "__main__":
    sys.exit(app())
