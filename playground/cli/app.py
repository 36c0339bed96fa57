"""kplay: read, edit, compile, check and time small PyTorch C++ and CUDA kernels.

The commands declare their options, call the engine (playground/engine.py) and render what it returns.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from enum import Enum
from functools import wraps
from importlib import metadata
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from .. import engine
from ..core.errors import KplayError, UsageError
from ..report import show as shown
from ..report import tables as report
from ..report.help import at_least, paths_there, whole, worded
from ..report.progress import spinner, sweep_bar

out = Console()
err = Console(stderr=True)


class OneLineErrors(TyperGroup):
    """Typer's own usage errors (a bad option, a missing argument) as one red line and exit 2, like kplay's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        worded(self)

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except Exception as e:  # click's UsageError family: exit_code 2 and a message
            if type(e).__name__ == "NoArgsIsHelpError":  # plain `kplay`: the help, and no error
                if e.format_message():  # typer's rich help has printed itself already; plain click's has not
                    out.print(e.format_message(), markup=False, highlight=False)
                code = 0
            elif hasattr(e, "format_message") and getattr(e, "exit_code", None) == 2:
                command = e.ctx.command_path + ": " if getattr(e, "ctx", None) else ""
                err.print(f"[red]error:[/] {escape(command + e.format_message())}", highlight=False, soft_wrap=True)
                code = 2
            elif type(e).__name__ == "Abort":
                err.print("[red]interrupted[/]")
                code = 130
            else:
                raise
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True, rich_markup_mode="rich",
                  context_settings={"help_option_names": ["-h", "--help"]})


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


Name = Annotated[Optional[str], typer.Argument(help="A kernel family (kplay list) or the path of a snippet folder.",
                                               show_default=False)]
Path_ = Annotated[Optional[list[str]], typer.Option("--path", metavar="DIR", callback=paths_there,
                                                    help="Extra folder of kernel families (also $KPLAY_PATH).")]
Json = Annotated[bool, typer.Option("--json", help="Print plain JSON instead of tables.")]
Sandbox = Annotated[bool, typer.Option("--sandbox", envvar="KPLAY_SANDBOX", show_envvar=False,
                                       help="Build and run the kernel in a sandbox (bubblewrap): no network, no "
                                            "home folders, and all it starts ends with it. On: KPLAY_SANDBOX=1.")]


def sandboxed(on: bool) -> None:
    """--sandbox: every worker this process starts runs in the sandbox (one line where it cannot start)."""
    from ..child import sandbox

    if on:
        os.environ[sandbox.ENV] = "1"
        if why := sandbox.unavailable():
            raise UsageError(why)
Params = Annotated[Optional[list[str]], typer.Option("--param", "-p", help="Template parameter NAME=VALUE, e.g. threads=512.")]
Variant = Annotated[Optional[str], typer.Option(help="Variant name, or 'all'.")]
Sizes = Annotated[Optional[list[str]], typer.Option("--size", help="A size NAME=VALUE; also --NAME VALUE for any size the kernel declares.")]
Dev = Annotated[Device, typer.Option(help="auto picks cuda when a GPU is there.")]
Dtype = Annotated[Optional[str], typer.Option(help="float32, float64, int32, ... (the kernel's first by default).")]
Seed = Annotated[int, typer.Option(parser=whole, help="Seed for the inputs.")]
Timeout = Annotated[float, typer.Option(help="Seconds one call of the kernel may take, from its launch to its end "
                                               "(a check's case with its reference; builds excluded).")]
Baselines = Annotated[Optional[list[str]], typer.Option("--baseline", help="Time against this baseline only (repeatable).")]
Skip = Annotated[Optional[list[str]], typer.Option("--skip-baseline", help="Do not time this baseline (repeatable).")]
Sanitize = Annotated[Optional[str], typer.Option(metavar="TOOL", show_default=False,
                                                 help="Check only, under compute-sanitizer: memcheck, racecheck, synccheck or initcheck.")]
Help = Annotated[bool, typer.Option("--help", "-h", help="Show this message; with NAME, the kernel's sizes and parameters too.")]
Force = Annotated[bool, typer.Option("--force", help="Overwrite existing files.")]
Solution = Annotated[bool, typer.Option("--solution", help="An exercise's solution, not its starter.")]
Folder = Annotated[Optional[str], typer.Argument(help="Where to write (default ./NAME).", show_default=False)]
Kernel = Annotated[Optional[str], typer.Option("--kernel", help="Only the function(s) whose name contains this.")]
PoolToken = Annotated[Optional[Path], typer.Option("--pool", envvar="KPLAY_POOL", show_default=False, metavar="TOKEN-FILE",
                                                   help="Grade on the class's pool, with the token file your "
                                                        "instructor gave you (also $KPLAY_POOL).")]

# `kplay run sum --n 1e7`: a family's sizes are options of its own, parsed by kplay (--help lists them).
FAMILY_OPTIONS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


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
            err.print(f"[red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            for line in getattr(e, "details", []):
                err.print(line, highlight=False, markup=False, soft_wrap=True)
            if os.environ.get("KPLAY_DEBUG"):
                import traceback

                traceback.print_exc()
            raise typer.Exit(e.exit_code) from None

    return wrapper


def version(show: bool) -> None:
    if show:
        out.print(f"kplay {metadata.version('kplay')}")
        raise typer.Exit()


def say(line: str) -> None:
    out.print(escape(line), highlight=False, soft_wrap=True)


def warn(line: str, kind: str = "warning") -> None:
    err.print(f"[yellow]{kind}:[/] {escape(line)}", highlight=False, soft_wrap=True)


def wrote(files) -> None:
    for f in files:
        out.print(f"wrote {escape(str(f))}", highlight=False, soft_wrap=True)  # a long path stays one line, to copy


def emit(data, as_json: bool, render) -> None:
    """--json: the record as plain JSON; otherwise what render() builds from it."""
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        out.print(render())


def as_path(folder) -> str:
    """A folder as `kplay run` reads it (a bare name would mean the built-in family), quoted for the shell and
    escaped for rich: a printed command works when pasted."""
    folder = Path(folder)
    return escape(shlex.quote(str(folder) if folder.is_absolute() or str(folder).startswith(".") else f"./{folder}"))


@app.callback()
def main(_: Annotated[bool, typer.Option("--version", callback=version, is_eager=True, help="Show kplay's version.")] = False):
    """kplay: read, edit, compile, check and time small PyTorch C++ and CUDA kernels."""


@app.command("list")
@friendly
def list_(ctx: typer.Context, json_: Json = False, path: Path_ = None):
    """List the kernel families: summary, variants, devices."""
    rows, warnings = engine.families(path, family_options(ctx))
    emit(rows, json_, lambda: report.family_table(rows))
    for warning in warnings:
        warn(warning)


@app.command()
@friendly
def show(name: Annotated[str, typer.Argument(help="A kernel family or the path of a snippet folder.")],
         device: Device = Device.cpu, variant: Variant = None, param: Params = None, path: Path_ = None,
         ptx: Annotated[bool, typer.Option("--ptx", help="The CUDA kernels' PTX under their source lines.")] = False,
         sass: Annotated[bool, typer.Option("--sass", help="The CUDA kernels' SASS (needs nvdisasm).")] = False,
         asm: Annotated[bool, typer.Option("--asm", help="The C++ functions' machine code, and which loops vectorized.")] = False,
         kernel: Kernel = None, json_: Json = False, solution: Solution = False):
    """Show what a kernel teaches, its sizes and parameters, then its rendered source, highlighted.

    With [b]--ptx[/b], [b]--sass[/b] or [b]--asm[/b]: what the compiler made of it, each source line
    above its instructions (CUDA is built for the configured GPU arch: no GPU needed).
    """
    fam = engine.find(name, path)
    params = fam.parse_params(param or [], fam.named(variant))
    starter = engine.exercise.is_exercise(fam) and not solution
    kinds = [k for k, on in (("ptx", ptx), ("sass", sass), ("asm", asm)) if on]
    if len(kinds) > 1:
        raise UsageError(f"--{kinds[0]} and --{kinds[1]}: choose one")
    if not kinds:
        if kernel or json_:
            raise UsageError(f"{'--kernel' if kernel else '--json'} goes with --ptx, --sass or --asm")
        dev = "cuda" if device == Device.auto else device.value
        return out.print(shown.source(fam, engine.sources(fam, dev, variant, params, starter), out.width))
    with spinner(err) as on_event:
        code = engine.code(fam, kinds[0], variant, params, kernel, on_event, starter)
    if json_:
        return print(json.dumps([{k: r[k] for k in ("family", "variant", "kind", "functions", "loops")}
                                 for r in code["records"]], indent=2))
    out.print(shown.code(code, out.width))


@app.command(context_settings=FAMILY_OPTIONS)
@friendly
def run(ctx: typer.Context, name: Name = None, size: Sizes = None, device: Dev = Device.auto, variant: Variant = None,
        dtype: Dtype = None, seed: Seed = 0, param: Params = None, timeout: Timeout = 120.0,
        no_bench: Annotated[bool, typer.Option("--no-bench", help="Check only, no timing: the fastest edit loop.")] = False,
        baseline: Baselines = None, skip_baseline: Skip = None, json_: Json = False, sanitize: Sanitize = None,
        verbose: Annotated[bool, typer.Option("--verbose", help="With --sanitize: the tool's whole output.")] = False,
        path: Path_ = None, help_: Help = False,
        against: Annotated[Optional[Path], typer.Option(help="A --json record of an earlier run: faster, slower or same, per variant.")] = None,
        explain: Annotated[bool, typer.Option("--explain", help="Every C++ loop's vectorization verdict, however many.")] = False,
        pool: PoolToken = None, sandbox: Sandbox = False):
    """Build, check and time a kernel against its PyTorch baselines. Exit code: the verdict.

    The kernel's sizes are options too: [b]kplay run sum --n 1e7[/b], [b]kplay run lltm --batch 64[/b]
    ([b]kplay run NAME --help[/b] lists them).
    """
    if help_ or name is None:
        return family_help(ctx, name, path, help_, variant)
    sandboxed(sandbox)
    if against and (no_bench or sanitize):
        raise UsageError(f"--against compares timings: it cannot go with {'--no-bench' if no_bench else '--sanitize'}")
    dev = engine.sanitized_device(sanitize, device.value) if sanitize else device.value
    req = engine.request(name, device=dev, variant=variant, dtype=dtype, seed=seed,
                         sizes=engine.split_sizes(ctx.args, size), params=param or [], paths=path,
                         bench=not no_bench and not sanitize, baselines=baseline or (),
                         skip_baselines=skip_baseline or (), timeout=timeout, lineinfo=bool(sanitize),
                         options=family_options(ctx))
    before = engine.against(against, req) if against else None
    with spinner(err) as on_event:
        results = engine.runs(req, on_event, sanitize, pool)  # several: --variant all over the variants' dtypes
    for k, result in enumerate(results[:1] if json_ else results):  # --json: the first holds the others
        show_run(result, json_, sanitize, verbose, before, explain, first=k == 0)
    raise typer.Exit(max(r["exit_code"] for r in results))


def show_run(result: dict, json_: bool, sanitize: str | None = None, verbose: bool = False, before: dict | None = None,
             explain: bool = False, first: bool = True) -> None:
    """The run's table (none where a sanitizer's finding ended it), what it found, --against's table (this dtype's)."""
    if json_:
        return print(json.dumps(engine.compare.with_against(before, result, first), indent=2))
    before = engine.compare.matched(before, result, first)
    if "variants" in result or "error" in result:  # a follow-on dtype's run may end in an error
        out.print(report.run_report(result, explain) if "variants" in result else report.error_line(result))
    if sanitize:
        out.print(engine.sanitizer.report(result, verbose))
    if before and "variants" in result:
        out.print(report.against_table(before, result))
    if result.get("worker"):
        out.print(f"ran on the pool's {escape(result['worker'])}", highlight=False)


@app.command(context_settings=FAMILY_OPTIONS)
@friendly
def watch(ctx: typer.Context,
          folder: Annotated[Optional[str], typer.Argument(help="A kernel folder (kplay eject writes one).", show_default=False)] = None,
          size: Sizes = None, device: Dev = Device.auto, variant: Variant = None, dtype: Dtype = None,
          param: Params = None, timeout: Timeout = 120.0,
          no_bench: Annotated[bool, typer.Option("--no-bench", help="Check only, no timing.")] = False, help_: Help = False):
    """Rerun the kernel in FOLDER on every save: the verdict, and once it passes, its time against the last
    passing version (faster, slower or the same within the noise). Ctrl-C ends it.
    """
    if help_:
        return family_help(ctx, None, None, help_)
    if folder is None:
        raise UsageError("kplay watch: missing the kernel's FOLDER (kplay eject NAME DIR writes one)")
    root = engine.watch(folder)
    sizes = engine.split_sizes(ctx.args, size)

    def make():  # a fresh request for every run: the save may have changed task.toml
        return engine.request(str(root), device=device.value, variant=variant, dtype=dtype, sizes=sizes,
                              params=param or [], bench=not no_bench, timeout=timeout, options=family_options(ctx))

    def attempt() -> dict:
        req = make()
        with spinner(err) as on_event:
            return engine.run(req, on_event)

    make()  # a bad option is one line and exit 2 now, not an error on every save
    engine.serve_watch(attempt, root, out.print)
    err.print("stopped watching")


@app.command(context_settings=FAMILY_OPTIONS)
@friendly
def profile(ctx: typer.Context, name: Name = None, size: Sizes = None, device: Dev = Device.cuda,
            variant: Variant = None, dtype: Dtype = None, seed: Seed = 0, param: Params = None, timeout: Timeout = 120.0,
            no_ncu: Annotated[bool, typer.Option("--no-ncu", help="Skip the second run under Nsight Compute (ncu).")] = False,
            json_: Json = False, path: Path_ = None, help_: Help = False):
    """Profile one call at the requested size: its kernels, their time and launch, GB/s; ncu's figures where it can.

    The family's first baseline (e.g. torch.sum) is profiled beside it. [b]kplay profile sum --variant fast --n 1e8[/b]
    """
    if help_ or name is None:
        return family_help(ctx, name, path, help_, variant)
    engine.check_profile_device(device.value)
    req = engine.request(name, device="cuda", variant=variant, dtype=dtype, seed=seed,
                         sizes=engine.split_sizes(ctx.args, size), params=param or [], paths=path, timeout=timeout,
                         one_baseline=True, mode="profile", options=family_options(ctx))
    with spinner(err) as on_event:
        result = engine.profile(req, on_event, ncu=not no_ncu)
    emit(result, json_, lambda: engine.profiler.report(result))


def family_help(ctx: typer.Context, name: str | None, path, help_: bool, variant: str | None = None) -> None:
    """The command's help, then (with a NAME) that family's sizes and parameters (with a --variant, only the
    parameters that one takes); no NAME and no --help: an error."""
    if not help_:
        raise UsageError(f"kplay {ctx.info_name}: missing the kernel's NAME (kplay list shows them)")
    out.print(ctx.get_help() or "")
    if name is not None:
        fam = engine.find(name, path)
        out.print(f"[b]{fam.name}[/b]'s sizes and parameters:")
        out.print(report.sizes_table(fam, fam.named(variant) if variant else None))


def family_options(ctx: typer.Context) -> frozenset[str]:
    """The long options of the commands that take a family's sizes as options of their own (run, watch,
    profile, bench), asked of Click: a size may take none of these names, since the command's own would win."""
    group = ctx.find_root().command  # the commands Click parsed this call with: not built a second time
    return frozenset(opt[2:] for command in group.commands.values() if command.context_settings.get("ignore_unknown_options")
                     for param in command.params for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--"))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@friendly
def bench(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A kernel family (kplay list) or the path of a snippet folder.")],
    sizes: Annotated[Optional[str], typer.Option(help="1e3,1e4,1e5 (a list), 1e3..1e9 (powers of ten) or 1e3..1e9:x2.")] = None,
    over: Annotated[Optional[str], typer.Option(help="The size to sweep (default: task.toml's \\[bench] size, else the first size).")] = None,
    tie: Annotated[Optional[str], typer.Option(help="Sizes that follow the swept one, e.g. in,out (linear).")] = None,
    size: Sizes = None, device: Dev = Device.auto,
    variant: Annotated[str, typer.Option(help="Variant name, or 'all'.")] = "all",
    dtype: Dtype = None, seed: Seed = 0, param: Params = None, timeout: Timeout = 120.0, baseline: Baselines = None,
    json_: Json = False,
    csv: Annotated[Optional[str], typer.Option(help="Write one row per (size, variant) to this CSV file.")] = None,
    plot: Annotated[Optional[str], typer.Option(help="Write the chart to this PNG file (needs matplotlib).")] = None,
    roofline: Annotated[Optional[str], typer.Option(help="Write the roofline (GFLOP/s against FLOP/byte, the device's "
                                                   "ceilings on a GPU) to this PNG file (needs matplotlib).")] = None,
    path: Path_ = None,
):
    """Sweep one size: each point a full run (check and timing); a table, a chart, and optionally a PNG."""
    engine.writable(csv, plot, roofline)
    fixed = engine.split_sizes(ctx.args, size)
    base = engine.request(name, device=device.value, variant=variant, dtype=dtype, seed=seed, sizes=fixed,
                          params=param or [], paths=path, baselines=baseline or (), one_baseline=True, timeout=timeout,
                          options=family_options(ctx))
    points, key = engine.bench_points(base, over, tie, sizes, fixed, name, path)
    with sweep_bar(err, len(points), key) as (on_point, on_event):
        records, error = engine.sweep_run(points, on_point, on_event)
    if json_:
        print(json.dumps(records, indent=2))
    elif records:
        out.print(report.sweep_table(records, key))
        out.print(report.sweep_chart(records, key))
    engine.sweep_files(records, key, csv, plot, roofline)
    if error:
        raise error
    raise typer.Exit(0 if all(r.get("ok", True) for r in records) else 1)


@app.command()
@friendly
def doctor():
    """Check the set-up: python, torch, GPU, nvcc, ninja, compiler, cache."""
    rows = engine.diagnose()
    out.print(report.checks_table(rows))
    raise typer.Exit(0 if all(ok for _, ok, _ in rows) else 1)


@app.command()
@friendly
def clean():
    """Empty kplay's build cache."""

    def waiting():
        names = engine.builds_in_flight()
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        err.print(f"waiting for the builds in flight to finish{': ' + shown if names else ''}", highlight=False,
                  soft_wrap=True)

    freed, kept, cache = engine.clean(waiting)
    out.print(f"removed {freed / 1e6:.1f} MB from {cache}", soft_wrap=True)
    for line in kept:
        err.print(f"[yellow]could not remove[/] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(1 if kept else 0)


@app.command()
@friendly
def eject(name: str, folder: Folder = None, device: Annotated[Optional[Device], typer.Option(help="Only this device's variants.")] = None,
          variant: Variant = None, param: Params = None, force: Force = False, path: Path_ = None,
          starter: Annotated[bool, typer.Option("--starter", help="An exercise's starter, TODOs and all "
                                                                  "(kplay start also writes the exercise).")] = False,
          _: Annotated[bool, typer.Option("--solution", hidden=True)] = False):
    """Copy a kernel into a folder you edit: its sources rendered with your --param values, and its spec.

    The whole kernel, an exercise's solution too: [b]kplay start[/b] gives a student the starter.
    """
    fam = engine.find(name, path)
    target = Path(folder or fam.name)
    wrote(engine.eject(fam, target, device and device.value, variant, param or [], force, starter))
    out.print(f"edit the sources, then: [b]kplay run {as_path(target)}[/b]", soft_wrap=True)


@app.command()
@friendly
def new(name: str, folder: Folder = None, force: Force = False):
    """Scaffold a new kernel family (C++ op, reference, test sizes) that passes as it is."""
    target = Path(folder or name)
    wrote(engine.new(name, target, force))
    out.print(f"try it: [b]kplay run {as_path(target)}[/b]", soft_wrap=True)


@app.command()
@friendly
def export(name: str, folder: Annotated[str, typer.Argument(help="The package folder to write.")],
           device: Device = Device.cpu,
           variant: Annotated[Optional[str], typer.Option(help="The variant to package (default: the device's first).")] = None,
           param: Params = None, force: Force = False, path: Path_ = None):
    """Write a standalone pip-installable package (setup.py with CppExtension/CUDAExtension) for one variant."""
    fam = engine.find(name, path)
    wrote(engine.export(fam, Path(folder), device.value, variant, param or [], force))
    python = Path(sys.executable)
    out.print("build and test it (one line, to paste):")
    out.print(f"[b]{python} -m pip install --no-build-isolation {folder} pytest && {python} -m pytest {folder}/tests[/b]",
              soft_wrap=True, highlight=False)


@app.command()
@friendly
def start(exercise_: Annotated[str, typer.Argument(metavar="NAME", help="NAME or NAME/VARIANT, e.g. sum/shuffle.",
                                                   show_default=False)],
          folder: Annotated[Path, typer.Argument(help="The student's folder (must be empty).", show_default=False)],
          param: Params = None, force: Force = False, path: Path_ = None,
          name: Annotated[Optional[str], typer.Option("--name", help="The student's name in the folder's records "
                                                                     "(default: $KPLAY_STUDENT, else the login and this start's id).")] = None):
    """Write an exercise's starter: each marked region a numbered TODO; it compiles and fails the check."""
    with spinner(err):
        taken, written, elsewhere = engine.start(exercise_, folder, param or [], force, name, path, warn)
    wrote(written)
    out.print(f"started {escape(taken)}: fill in the TODOs, then", highlight=False)
    out.print(f"  [b]kplay check {as_path(folder)}{' --pool TOKEN-FILE' * elsewhere}[/b]   (stuck? [b]kplay hint "
              f"{as_path(folder)}[/b])", highlight=False, soft_wrap=True)  # one line: pasted, it works


Student = Annotated[Optional[str], typer.Option("--name", help="The student's name in the record (default: the one "
                                                                 "kplay start wrote in the folder).")]


@app.command()
@friendly
def check(folder: Annotated[Path, typer.Argument(help="A folder written by kplay start.", show_default=False)],
          device: Dev = Device.auto, name: Student = None, timeout: Timeout = 120.0, json_: Json = False,
          no_sanitize: Annotated[bool, typer.Option("--no-sanitize", help="Skip memcheck and racecheck of a CUDA "
                                                                         "kernel (faster; a race may then pass).")] = False,
          pool: PoolToken = None, sandbox: Sandbox = False,
          seed: Annotated[Optional[int], typer.Option(parser=whole, help="Seed for the drawn sizes and inputs (default: a fresh one, "
                                                           "printed; give it to grade the same again).")] = None):
    """Grade an exercise: the check at every dtype, test size and the main size, the time against the reference;
    a CUDA kernel that passes is also run under memcheck and racecheck. With --pool, on a GPU of the class's pool.

    Exit code: the run's (0 passed, 1 check failed, 2 usage error, 3 build error, 4 crash).
    """
    sandboxed(sandbox)
    try:
        with spinner(err) as on_event:
            rec = engine.check(folder, device.value, name, timeout, not no_sanitize, pool, on_event, seed)
    except UsageError as e:
        if json_ and not pool:  # one record whatever happened: the board says "could not run" instead of refusing the class
            print(json.dumps(engine.unusable(folder, name, e), indent=2))
        raise
    if json_:
        print(json.dumps(rec, indent=2))
        raise typer.Exit(rec["exit_code"])
    for k, part in enumerate(rec["dtypes"]):
        show_part(part, rec["run"] if k == 0 else None)
    show_sanitized(rec)
    out.print(f"[b]{escape(engine.score(rec))}[/b]", highlight=False)
    if rec.get("seed") is not None:
        out.print(f"drawn at seed {rec['seed']} (--seed {rec['seed']} grades the same)", style="dim", highlight=False)
    if rec.get("worker"):
        out.print(f"graded on the pool's {escape(rec['worker'])} as {escape(rec['student'])}", highlight=False)
    raise typer.Exit(rec["exit_code"])


def show_sanitized(rec: dict) -> None:
    """What memcheck and racecheck found (or that they could not run)."""
    if rec.get("sanitizer_note"):
        warn(rec["sanitizer_note"], "note")
    for tool in rec.get("sanitized", []):
        if tool["sanitize"] is None:
            err.print(f"[red]error:[/] {escape(tool['what'])}", highlight=False, soft_wrap=True)
        else:
            out.print(engine.sanitizer.report({"sanitize": tool["sanitize"]}))


def show_part(part: dict, run: dict | None) -> None:
    """One graded dtype: the first's whole report (run), another's one line, or its report where it failed."""
    if "error" in part:
        err.print(f"[red]error:[/] {escape(part['dtype'])}: {escape(part['error'])}", highlight=False, soft_wrap=True)
        for line in part["details"]:
            err.print(line, highlight=False, markup=False, soft_wrap=True)
    elif run is not None or part["passed"] < part["checked"]:
        show_run(run or part["run"], False)
    else:
        out.print(f"{part['dtype']}: all {part['checked']} cases passed", highlight=False)


@app.command()
@friendly
def hint(folder: Annotated[Path, typer.Argument(help="A folder written by kplay start.", show_default=False)],
         number: Annotated[Optional[int], typer.Argument(parser=whole, help="Show this hint again.", show_default=False)] = None):
    """Show the exercise's next hint (what, then why), or hint N again; kplay remembers how far you got."""
    found, _, total = engine.hint(folder, number)
    if found is None:
        out.print(f"no more hints: all {total} shown; [b]kplay hint {as_path(folder)} N[/b] shows hint N again:")
        for h in engine.exercise_table(folder)["hints"]:
            out.print(f"  {h['number']}. {escape(h['what'])}", highlight=False)
        return
    out.print(f"[b]hint {found['number']}/{total}[/b] · TODO {found['number']} in {escape(found['file'])}", highlight=False)
    out.print(f"  what: {escape(found['what'])}", highlight=False)
    if found.get("why"):
        out.print(f"  why: {escape(found['why'])}", highlight=False)
    if found.get("code"):  # it compiles where the TODO is
        out.print("  code:", highlight=False)
        for line in found["code"].splitlines():  # never wrapped: pasted, it compiles
            out.print(f"    {escape(line)}", highlight=False, soft_wrap=True)


Results = Annotated[Optional[list[Path]], typer.Argument(metavar="RESULTS", show_default=False,
                                                         help="kplay check --json files, one per student.")]


@app.command()
@friendly
def board(results: Results = None,
          out_dir: Annotated[Path, typer.Option("--out", help="Where board.csv and board.html go.")] = Path("."),
          pool: Annotated[Optional[Path], typer.Option("--pool", metavar="POOL-DIR", show_default=False,
                                                       help="Every record a pool kept (its folder).")] = None,
          follow: Annotated[bool, typer.Option("--follow", help="With --pool: write the board again as results "
                                                                "arrive, until Ctrl-C.")] = False):
    """The class board: who passed what, ranked by cases passed then speedup; also board.csv and board.html.

    Collect each student's [b]kplay check DIR --json --name NAME > NAME.json[/b], then [b]kplay board *.json[/b];
    or, on a pool's server, [b]kplay board --pool kplay-pool --follow[/b].
    """
    if follow and not pool:
        raise UsageError("--follow needs --pool: it watches the pool's results folder")
    if not follow:
        return show_board(sorted(engine.pool_results(pool).glob("*/*.json")) if pool else results or [], out_dir)
    for found in engine.follow(pool):
        try:
            show_board(found, out_dir)
        except UsageError as e:  # no record yet: wait for the first
            warn(str(e), "waiting")


def show_board(results: list[Path], out_dir: Path) -> None:
    groups, warnings, written = engine.board(results, out_dir)
    for warning in warnings:
        warn(warning)
    out.print(engine.board_table(groups))
    wrote(written)


# ---- kplay pool: a class's grading pool --------------------------------------------------------------------

pool_app = typer.Typer(cls=OneLineErrors, no_args_is_help=True, rich_markup_mode="rich",
                       context_settings={"help_option_names": ["-h", "--help"]},
                       help='A class\'s grading pool on Dask distributed (pip install "kplay\\[pool]"): see the README.')
app.add_typer(pool_app, name="pool")
PoolDir = Annotated[Path, typer.Option("--dir", help="The pool's folder: its CA, certificate, tokens and results.")]
CpuWorkers = Annotated[int, typer.Option(parser=at_least(1),
                                          help="CPU workers on a machine with no GPU (CPU exercises only).")]


@pool_app.command("start")
@friendly
def pool_start(dir_: PoolDir = Path("kplay-pool"),
               host: Annotated[str, typer.Option(help="The name or address students and workers reach this machine "
                                                      "by.")] = "localhost",
               port: Annotated[int, typer.Option(parser=whole, help="The scheduler's port (TLS).")] = 8786,
               endpoint_port: Annotated[int, typer.Option(parser=whole, help="The students' endpoint's port (HTTPS).")] = 8787,
               cpu_workers: CpuWorkers = 1):
    """The scheduler, one supervised worker per visible GPU, and the students' endpoint; until Ctrl-C."""
    engine.pool_start(dir_, host, port, endpoint_port, cpu_workers, say)


@pool_app.command("add-student")
@friendly
def pool_add_student(names: Annotated[list[str], typer.Argument(metavar="NAME...", help="One or more students.",
                                                                show_default=False)],
                     dir_: PoolDir = Path("kplay-pool"),
                     out_dir: Annotated[Optional[Path], typer.Option("--out", help="Where the token files go "
                                                                     "(default: POOL-DIR-tokens/ beside the pool's folder).")] = None):
    """A token file per student (the endpoint, the CA, the token): hand each student theirs, then delete them."""
    wrote(engine.add_students(dir_, names, out_dir))


@pool_app.command("join")
@friendly
def pool_join(join_file: Annotated[Path, typer.Argument(help="The join.json kplay pool start wrote.",
                                                        show_default=False)],
              dir_: PoolDir = Path("kplay-pool-worker"), cpu_workers: CpuWorkers = 1,
              name: Annotated[Optional[str], typer.Option(help="This server's name in the pool and in students' "
                                                               "reports (default: its host name).")] = None):
    """This server's GPUs as workers of the instructor's pool, supervised; until Ctrl-C."""
    engine.pool_join(join_file, dir_, cpu_workers, name, say)


@pool_app.command("status")
@friendly
def pool_status(dir_: PoolDir = Path("kplay-pool"), json_: Json = False):
    """The pool's workers, their GPUs, what each grades now, and what waits."""
    state = engine.pool_status(dir_)
    if json_:
        return print(json.dumps(state, indent=2))
    out.print(f"scheduler {state['scheduler']}: {len(state['workers'])} workers, {len(state['waiting'])} grades waiting",
              highlight=False)
    for w in state["workers"]:
        out.print(f"  {escape(w['name'])}: {escape(', '.join(w['grading']) or 'idle')}", highlight=False, soft_wrap=True)

