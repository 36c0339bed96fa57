"""kplay: read, edit, compile, check and time small PyTorch C++ and CUDA kernels."""

from __future__ import annotations

import json
import os
import re
import sys
from contextlib import contextmanager
from enum import Enum
from functools import wraps
from importlib import metadata
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from playground import events, registry
from playground.errors import KplayError, UsageError

out = Console()
err = Console(stderr=True)


class OneLineErrors(TyperGroup):
    """Typer's own usage errors (a bad option, a missing argument) as one red line and exit 2, like kplay's."""

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
Path_ = Annotated[Optional[list[str]], typer.Option("--path", help="Extra folder of kernel families (also $KPLAY_PATH).")]
Json = Annotated[bool, typer.Option("--json", help="Print plain JSON instead of tables.")]
Params = Annotated[Optional[list[str]], typer.Option("--param", "-p", help="Template parameter NAME=VALUE, e.g. threads=512.")]
Variant = Annotated[Optional[str], typer.Option(help="Variant name, or 'all'.")]
Sizes = Annotated[Optional[list[str]], typer.Option("--size", help="A size NAME=VALUE; also --NAME VALUE for any size the kernel declares.")]
Dev = Annotated[Device, typer.Option(help="auto picks cuda when a GPU is there.")]
Dtype = Annotated[Optional[str], typer.Option(help="float32, float64, int32, ... (the kernel's first by default).")]
Seed = Annotated[int, typer.Option(help="Seed for the inputs.")]
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


@app.callback()
def main(_: Annotated[bool, typer.Option("--version", callback=version, is_eager=True, help="Show kplay's version.")] = False):
    """kplay: read, edit, compile, check and time small PyTorch C++ and CUDA kernels."""


@app.command("list")
@friendly
def list_(ctx: typer.Context, json_: Json = False, path: Path_ = None):
    """List the kernel families: summary, variants, devices."""
    from playground.exercise import exercises

    found, refused = registry.scan(path)
    rows = [{"name": f.name, "summary": f.summary, "variants": list(f.variants), "devices": f.devices,
             "exercises": exercises(f), "path": str(f.path)} for f in found.values()]
    if json_:
        print(json.dumps(rows, indent=2))
    else:
        from playground.report import family_table

        out.print(family_table(rows))
    for warning in [*(f"{r} (not listed)" for r in refused), *_list_warnings(found.values(), family_options(ctx))]:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)


def _list_warnings(found, options: frozenset[str]) -> list[str]:
    """A family kplay run refuses (a size named like an option), and one from --path that hides a built-in."""
    clashes = [registry.clash(f, options) for f in found]
    hidden = [f"{f.name} from {f.path} hides the built-in {f.name}: kplay run {f.name} runs it"
              for f in found if registry.shadowing(f)]
    return [*filter(None, clashes), *hidden]


Kernel = Annotated[Optional[str], typer.Option("--kernel", help="Only the function(s) whose name contains this.")]


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
    fam = registry.find(name, path)
    params = fam.parse_params(param or [], fam.named(variant))
    starter = _is_exercise(fam) and not solution
    kinds = [k for k, on in (("ptx", ptx), ("sass", sass), ("asm", asm)) if on]
    if len(kinds) > 1:
        raise UsageError(f"--{kinds[0]} and --{kinds[1]}: choose one")
    if kinds and starter and _marked(fam, kinds[0], variant, params):  # the starter's code: built from an ejected copy
        import tempfile

        from playground.scaffold import eject as write

        with tempfile.TemporaryDirectory(prefix="kplay-starter-") as tmp:
            write(fam, Path(tmp), list(fam.variants.values()), params, starter=True)
            return _show_code(registry.load_family(Path(tmp)), kinds[0], variant, params, kernel, json_,
                              shown_as=f"the starter of {fam.path}")
    if kinds:
        return _show_code(fam, kinds[0], variant, params, kernel, json_)
    if kernel or json_:
        raise UsageError(f"{'--kernel' if kernel else '--json'} goes with --ptx, --sass or --asm")
    _show_source(fam, device, variant, params, starter)


def _is_exercise(fam) -> bool:
    from playground.exercise import is_exercise

    return is_exercise(fam)


def _marked(fam, kind: str, variant: str | None, params: dict) -> bool:
    """Whether the variant(s) `_show_code` shows have a region (unmarked ones are shown from the family's own files)."""
    from playground import exercise, render

    chosen = ([fam.variant(variant)] if variant and variant != "all"
              else fam.pick_variants("cpu" if kind == "asm" else "cuda", variant))
    return any(exercise.starter_sources(fam, v, params) != render.sources(fam, v, params) for v in chosen)


def _show_source(fam, device: Device, variant: str | None, params: dict, starter: bool = False) -> None:
    """The note, the sizes and parameters, then each chosen variant's rendered sources."""
    from rich.markdown import Markdown
    from rich.panel import Panel
    from rich.syntax import Syntax

    from playground.exercise import starter_sources
    from playground.render import sources
    from playground.report import sizes_table

    named = variant and variant != "all"  # reading a variant's source needs no device: shown whatever its own
    chosen = [fam.variant(variant)] if named else fam.pick_variants("cuda" if device == Device.auto else device.value, variant)
    out.print(f"[b]{fam.name}[/b]: {escape(fam.summary)}")  # a panel's title would be cut at the border
    out.print(Panel(Markdown(fam.note.strip() or fam.summary)))
    out.print(sizes_table(fam, chosen))
    out.print(path_lines("files in ", str(fam.path), out.width), highlight=False)
    for v in chosen:
        out.print(f"[b]{v.name}[/b] ({v.device}): {v.note}")
        for file, text in (starter_sources if starter else sources)(fam, v, params).items():
            syntax = Syntax(text, "cuda" if file.endswith(".cu") else "cpp", line_numbers=True, word_wrap=True)
            out.print(Panel(syntax, title=escape(file), title_align="left"))  # the file's name, whole


def path_lines(head: str, path: str, width: int) -> str:
    """head + path in lines of at most width, broken only after a '/' (never inside a name)."""
    lines, line = [], head
    for part in re.split(r"(?<=/)", path):
        if line.strip() and len(line) + len(part) > width:
            lines.append(line)
            line = "  "
        line += part
    return "\n".join([*lines, line])


def _show_code(fam, kind: str, variant: str | None, params: dict, kernel: str | None, json_: bool,
               shown_as: str | None = None) -> None:
    """`show --ptx/--sass/--asm`: a variant by name whatever its device (the build needs no GPU), else the first.
    shown_as: the folder a title names, where fam is a temporary copy (an exercise's starter)."""
    from playground import disasm
    from playground.report import code_listing, loop_line

    if variant and variant != "all":
        chosen = [fam.variant(variant)]
    else:
        chosen = fam.pick_variants("cpu" if kind == "asm" else "cuda", variant)
    for v in chosen:
        disasm.require(kind, fam, v)  # every refusal before the first build
    records = []
    for v in chosen:
        with _progress() as on_event:
            found, lines, loops = disasm.compiled(kind, fam, v, params, on_event)
        found = disasm.pick(found, kernel, f"{fam.name}/{v.name}")
        functions = disasm.to_json(found, lines)
        records.append({"family": fam.name, "variant": v.name, "kind": kind, "functions": functions, "loops": loops})
        if not json_:
            shown = [s for s in v.sources if s.endswith(".cu") == (kind != "asm")]
            folder = path_lines("from ", shown_as or str(fam.path), out.width)
            title = f"[b]{fam.name}/{v.name}[/b] · {kind} · {escape(', '.join(shown))}\n{escape(folder)}"
            for loop in loops if kind == "asm" else []:
                title += "\n" + loop_line(loop).markup
            own = {str(fam.path / s) for s in v.sources}
            out.print(code_listing(functions, loops if kind == "asm" else [], title, own))
    if json_:
        print(json.dumps(records, indent=2))


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
        pool: PoolToken = None):
    """Build, check and time a kernel against its PyTorch baselines. Exit code: the verdict.

    The kernel's sizes are options too: [b]kplay run sum --n 1e7[/b], [b]kplay run lltm --batch 64[/b]
    ([b]kplay run NAME --help[/b] lists them).
    """
    from playground import compare, isolate, request

    if help_ or name is None:
        return _family_help(ctx, name, path, help_, variant)
    if against and (no_bench or sanitize):
        raise UsageError(f"--against compares timings: it cannot go with {'--no-bench' if no_bench else '--sanitize'}")
    if sanitize:
        device = _sanitized_device(sanitize, device)
    req = request.make(name, device=device.value, variant=variant, dtype=dtype, seed=seed,
                       sizes=_sizes(ctx.args, size), params=param or [], paths=path,
                       bench=not no_bench and not sanitize, baselines=baseline or (),
                       skip_baselines=skip_baseline or (), timeout=timeout, lineinfo=bool(sanitize),
                       options=family_options(ctx))
    before = compare.load(against, req) if against else None
    with _progress() as on_event:
        result = (_pooled(req, pool, sanitize, on_event) if pool else _sanitized(req, sanitize, on_event) if sanitize
                  else isolate.run(req, on_event))
    _show_run(result, json_, sanitize, verbose, before, explain)
    raise typer.Exit(result["exit_code"])


def _pooled(req, token: Path, sanitize, on_event) -> dict:
    """The run on a worker of the class's pool (a tool runs here only: --sanitize and --pool do not go together)."""
    from playground import remote

    if sanitize:
        raise UsageError("--sanitize runs the tool on this machine: it cannot go with --pool")
    on_event(events.PHASE, phase="pool")
    return remote.run(req, token)


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
    from playground import isolate, request, watch as watcher

    if help_:
        return _family_help(ctx, None, None, help_)
    if folder is None:
        raise UsageError("kplay watch: missing the kernel's FOLDER (kplay eject NAME DIR writes one)")
    root = watcher.folder(folder)
    sizes = _sizes(ctx.args, size)

    def make():  # a fresh request for every run: the save may have changed task.toml
        return request.make(str(root), device=device.value, variant=variant, dtype=dtype, sizes=sizes,
                            params=param or [], bench=not no_bench, timeout=timeout, options=family_options(ctx))

    def attempt() -> dict:
        req = make()
        with _progress() as on_event:
            return isolate.run(req, on_event)

    make()  # a bad option is one line and exit 2 now, not an error on every save
    watcher.serve(attempt, root, out.print)
    err.print("stopped watching")


def _sanitized(req, tool: str, on_event) -> dict:
    from playground import sanitize

    return sanitize.run(req, tool, on_event)


def _show_run(result: dict, json_: bool, sanitize: str | None, verbose: bool, before: dict | None,
              explain: bool = False) -> None:
    """The run's table (a run the sanitizer's finding ended has none), then what the sanitizer found, or
    the comparison with an earlier run."""
    from playground import compare, report, sanitize as sanitizer

    if json_:
        against = {"against": compare.record(before, result)} if before and "variants" in result else {}
        print(json.dumps(result | against, indent=2))
        return

    if "variants" in result:
        out.print(report.run_report(result, explain))
    if sanitize:
        out.print(sanitizer.report(result, verbose))
    if before and "variants" in result:
        out.print(report.against_table(before, result))
    if result.get("worker"):
        out.print(f"ran on the pool's {escape(result['worker'])}", highlight=False)


def _sanitized_device(tool: str, device: Device) -> Device:
    """--sanitize checks CUDA kernels: a known tool, the tool there, and not --device cpu (each one line, exit 2)."""
    from playground import sanitize

    sanitize.tool_name(tool)
    if device == Device.cpu:
        raise UsageError("--sanitize checks CUDA kernels: drop --device cpu")
    _need_gpu(f"--sanitize {tool}")  # before the tool: installing it would not help a machine with no GPU
    sanitize.executable()
    return Device.cuda


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _need_gpu(what: str) -> None:
    """A GPU, asked before a tool starts the child (the tool's own message would be less clear)."""
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"{what}: no CUDA GPU is visible here")


@app.command(context_settings=FAMILY_OPTIONS)
@friendly
def profile(ctx: typer.Context, name: Name = None, size: Sizes = None, device: Dev = Device.cuda,
            variant: Variant = None, dtype: Dtype = None, seed: Seed = 0, param: Params = None, timeout: Timeout = 120.0,
            no_ncu: Annotated[bool, typer.Option("--no-ncu", help="Skip the second run under Nsight Compute (ncu).")] = False,
            json_: Json = False, path: Path_ = None, help_: Help = False):
    """Profile one call at the requested size: its kernels, their time and launch, GB/s; ncu's figures where it can.

    The family's first baseline (e.g. torch.sum) is profiled beside it. [b]kplay profile sum --variant fast --n 1e8[/b]
    """
    from playground import profile as profiler, request

    if help_ or name is None:
        return _family_help(ctx, name, path, help_, variant)
    profiler.check_device(device.value)
    req = request.make(name, device="cuda", variant=variant, dtype=dtype, seed=seed, sizes=_sizes(ctx.args, size),
                       params=param or [], paths=path, timeout=timeout, one_baseline=True, mode="profile",
                       options=family_options(ctx))
    with _progress() as on_event:
        result = profiler.run(req, on_event, ncu=not no_ncu)
    if json_:
        print(json.dumps(result, indent=2))
    else:
        out.print(profiler.report(result))


def _family_help(ctx: typer.Context, name: str | None, path, help_: bool, variant: str | None = None) -> None:
    """The command's help, then (with a NAME) that family's sizes and parameters (with a --variant, only the
    parameters that one takes); no NAME and no --help: an error."""
    if not help_:
        raise UsageError(f"kplay {ctx.info_name}: missing the kernel's NAME (kplay list shows them)")
    out.print(ctx.get_help() or "")
    if name is None:
        return
    from playground.report import sizes_table

    fam = registry.find(name, path)
    out.print(f"[b]{fam.name}[/b]'s sizes and parameters:")
    out.print(sizes_table(fam, fam.named(variant) if variant else None))


def _sizes(args: list[str], pairs: list[str] | None) -> dict:
    """`--n 1e7`, `--rows=1e5` (the options kplay did not declare itself) and `--size n=1e7`, as {name: text}
    (None: a name without its value). Only split here: request checks the names and the values."""
    sizes, rest = {}, list(args)

    def given(key: str, value) -> None:
        if key in sizes:
            raise UsageError(f"--{key} is given twice ({sizes[key]} and {value}): give it once")
        sizes[key] = value

    while rest:
        arg = rest.pop(0)
        if not arg.startswith("--") or len(arg) < 3:
            raise UsageError(f"unexpected argument '{arg}' (sizes are given as --NAME VALUE)")
        key, eq, value = arg[2:].partition("=")
        given(key, value if eq else rest.pop(0) if rest and not rest[0].startswith("--") else None)
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--size {pair}: expected NAME=VALUE")
        given(key, value)
    return sizes


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
    from playground import request, sweep

    _writable(csv, plot, roofline)
    fixed = _sizes(ctx.args, size)
    swept = sweep.settings(registry.find(name, path), over, None if tie is None else [t for t in tie.split(",") if t], sizes)
    base = request.make(name, device=device.value, variant=variant, dtype=dtype, seed=seed, sizes=fixed,
                        params=param or [], paths=path, baselines=baseline or (), one_baseline=True, timeout=timeout,
                        options=family_options(ctx))
    points = sweep.requests(base, swept, fixed)  # every point validated before torch is imported
    with _sweep_progress(len(points), swept.key) as (on_point, on_event):
        records, error = sweep.run(points, on_point, on_event)
    _sweep_outputs(records, swept.key, json_, csv, plot, roofline)
    if error:
        raise error
    raise typer.Exit(0 if all(r.get("ok", True) for r in records) else 1)


def _writable(csv: str | None, *pngs: str | None) -> None:
    """Fail now, not after a long sweep: matplotlib for --plot and --roofline, an existing folder for each file."""
    if any(pngs):
        from playground.plot import require

        require()
    for target in filter(None, (csv, *pngs)):
        folder = Path(target).resolve().parent
        if not folder.is_dir():
            raise UsageError(f"{target}: the folder {folder} does not exist")


def _sweep_outputs(records: list[dict], key: str, json_: bool, csv: str | None, plot: str | None,
                   roofline: str | None = None) -> None:
    from playground import report

    if json_:
        print(json.dumps(records, indent=2))
    elif records:
        out.print(report.sweep_table(records, key))
        out.print(report.sweep_chart(records, key))
    if csv and records:
        report.write_csv(records, csv)
    if plot and any("skipped" not in r for r in records):
        from playground.plot import save

        save(records, key, plot)
    if roofline and any("skipped" not in r for r in records):
        from playground.plot import roofline as draw_roofline

        draw_roofline(records, key, roofline)


@contextmanager
def _sweep_progress(total: int, key: str):
    """A bar over the points, the current step of the current point beside it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.fields[point]}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=err, transient=True, disable=not err.is_interactive) as progress:
        task = progress.add_task("starting", total=total, point="")

        def on_point(k, request):
            progress.update(task, completed=k, point=f"{key}={request.sizes[key]:,}", description="starting (importing torch)")

        yield on_point, _events(progress, task, cached_lines=False)
        progress.update(task, completed=total)


@contextmanager
def _progress():
    """A spinner with elapsed seconds while compiling; one line per finished build."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=err, transient=True, disable=not err.is_interactive) as progress:  # TTY_INTERACTIVE=0: none
        task = progress.add_task("starting (importing torch)", total=None)
        yield _events(progress, task)


PHASES = {"time": "timing", "profile": "profiling", "ncu": "profiling under ncu",
          "pool": "sent to the pool: graded when a worker is free"}


def _events(progress, task, cached_lines: bool = True):
    """The child's events as progress: what it does now, and one line per finished build."""

    def on_event(event, **data):
        if event == events.BUILD_START:
            progress.update(task, description=f"compiling {data['variant']}")
        elif event == events.BUILD_DONE and (cached_lines or not data["cached"]):
            how = "cached build" if data["cached"] else f"compiled in {data['seconds']:.1f} s"
            progress.console.print(f"[green]✓[/] {data['variant']}: {how}", highlight=False)
        elif event == events.CHECK:
            progress.update(task, description=f"checking {data['variant']} at {data['case']}")
        elif event == events.PHASE and data["phase"] in PHASES:
            progress.update(task, description=PHASES[data["phase"]])
        elif event == events.WAIT:
            progress.update(task, description=f"waiting for the {data['device'].partition('-')[0].upper()}: "
                                              "another run is timing on it")

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
    from playground.toolchain import builds_in_flight, cache_dir

    def waiting():
        names = builds_in_flight()
        shown = f": {', '.join(names[:4])}{f' and {len(names) - 4} more' if len(names) > 4 else ''}" if names else ""
        err.print(f"waiting for the builds in flight to finish{shown}", highlight=False, soft_wrap=True)

    freed, kept = clear_cache(on_wait=waiting)
    out.print(f"removed {freed / 1e6:.1f} MB from {cache_dir()}", soft_wrap=True)
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
    from playground.scaffold import eject as write

    fam = registry.find(name, path)
    if variant and variant != "all":
        chosen = [fam.variant(variant)]
    else:
        devices = [device.value] if device and device != Device.auto else fam.devices
        chosen = list({v.name: v for d in devices for v in fam.pick_variants(d, "all")}.values())
    target = Path(folder or fam.name)
    for f in write(fam, target, chosen, fam.parse_params(param or [], chosen), force, starter=starter):
        out.print(f"wrote {f}", soft_wrap=True)  # a long path stays one line, to copy
    out.print(f"edit the sources, then: [b]kplay run {_as_path(target)}[/b]")


@app.command()
@friendly
def new(name: str, folder: Folder = None, force: Force = False):
    """Scaffold a new kernel family (C++ op, reference, test sizes) that passes as it is."""
    from playground.scaffold import new as write

    target = Path(folder or name)
    for f in write(name, target, force):
        out.print(f"wrote {f}", soft_wrap=True)
    out.print(f"try it: [b]kplay run {_as_path(target)}[/b]")


@app.command()
@friendly
def export(name: str, folder: Annotated[str, typer.Argument(help="The package folder to write.")],
           device: Device = Device.cpu,
           variant: Annotated[Optional[str], typer.Option(help="The variant to package (default: the device's first).")] = None,
           param: Params = None, force: Force = False, path: Path_ = None):
    """Write a standalone pip-installable package (setup.py with CppExtension/CUDAExtension) for one variant."""
    from playground.scaffold import export as write

    fam = registry.find(name, path)
    dev = "cuda" if device == Device.auto else device.value
    v = fam.variant(variant) if variant else fam.pick_variants(dev, None)[0]
    for f in write(fam, Path(folder), v, fam.parse_params(param or [], [v]), force):
        out.print(f"wrote {f}", soft_wrap=True)
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
    from playground import exercise

    fam_name, variant = ((exercise_, None) if Path(exercise_).exists() or "/" not in exercise_
                         else exercise_.rsplit("/", 1))
    fam = registry.find(fam_name, path)
    v = exercise.pick(fam, variant, gpu=variant is None and _has_gpu())
    with _progress():
        written = exercise.start(fam, v, folder, fam.parse_params(param or [], [v]), force, name)
    for f in written:
        out.print(f"wrote {f}", soft_wrap=True)
    out.print(f"fill in the TODOs, then: [b]kplay check {_as_path(folder)}[/b] (stuck? [b]kplay hint {_as_path(folder)}[/b])")


Student = Annotated[Optional[str], typer.Option("--name", help="The student's name in the record (default: the one "
                                                                 "kplay start wrote in the folder).")]


@app.command()
@friendly
def check(folder: Annotated[Path, typer.Argument(help="A folder written by kplay start.", show_default=False)],
          device: Dev = Device.auto, name: Student = None, timeout: Timeout = 120.0, json_: Json = False,
          no_sanitize: Annotated[bool, typer.Option("--no-sanitize", help="Skip memcheck and racecheck of a CUDA "
                                                                         "kernel (faster; a race may then pass).")] = False,
          pool: PoolToken = None):
    """Grade an exercise: the check at every dtype, test size and the main size, the time against the reference;
    a CUDA kernel that passes is also run under memcheck and racecheck. With --pool, on a GPU of the class's pool.

    Exit code: the run's (0 passed, 1 check failed, 2 usage error, 3 build error, 4 crash).
    """
    from playground import exercise

    try:
        rec = _grade(folder, device.value, name, timeout, not no_sanitize, pool)
    except UsageError as e:
        if json_ and not pool:  # one record whatever happened: the board says "could not run" instead of refusing the class
            print(json.dumps(exercise.unusable(folder, name, e), indent=2))
        raise
    if json_:
        print(json.dumps(rec, indent=2))
        raise typer.Exit(rec["exit_code"])
    for k, part in enumerate(rec["dtypes"]):
        _show_part(part, rec["run"] if k == 0 else None)
    _show_sanitized(rec)
    out.print(f"[b]{escape(exercise.score(rec))}[/b]", highlight=False)
    if rec.get("worker"):
        out.print(f"graded on the pool's {escape(rec['worker'])} as {escape(rec['student'])}", highlight=False)
    raise typer.Exit(rec["exit_code"])


def _grade(folder: Path, device: str, name, timeout: float, sanitize: bool, pool: Path | None) -> dict:
    """The record of a local grade, or of the pool's (the student is who the token says: --name is not sent)."""
    from playground import exercise, remote

    with _progress() as on_event:
        if pool:
            on_event(events.PHASE, phase="pool")
            rec = remote.check(folder, pool, timeout, sanitize)
            if rec.get("error") and not rec.get("dtypes"):  # the pool could not run it: the same one line as here
                raise UsageError(rec["error"])
            return rec
        return exercise.grade(folder, device, name, on_event, timeout, sanitize=sanitize)


def _show_sanitized(rec: dict) -> None:
    """What memcheck and racecheck found (or that they could not run)."""
    from playground import sanitize

    if rec.get("sanitizer_note"):
        err.print(f"[yellow]note:[/] {escape(rec['sanitizer_note'])}", highlight=False, soft_wrap=True)
    for tool in rec.get("sanitized", []):
        if tool["sanitize"] is None:
            err.print(f"[red]error:[/] {escape(tool['what'])}", highlight=False, soft_wrap=True)
        else:
            out.print(sanitize.report({"sanitize": tool["sanitize"]}))


def _show_part(part: dict, run: dict | None) -> None:
    """One graded dtype: the first's whole report (run), another's one line, or its report where it failed."""
    if "error" in part:
        err.print(f"[red]error:[/] {escape(part['dtype'])}: {escape(part['error'])}", highlight=False, soft_wrap=True)
        for line in part["details"]:
            err.print(line, highlight=False, markup=False, soft_wrap=True)
    elif run is not None or part["passed"] < part["checked"]:
        _show_run(run or part["run"], False, None, False, None)
    else:
        out.print(f"{part['dtype']}: all {part['checked']} cases passed", highlight=False)


@app.command()
@friendly
def hint(folder: Annotated[Path, typer.Argument(help="A folder written by kplay start.", show_default=False)],
         number: Annotated[Optional[int], typer.Argument(help="Show this hint again.", show_default=False)] = None):
    """Show the exercise's next hint (what, then why), or hint NUMBER again; kplay remembers how far you got."""
    from playground import exercise

    found, shown, total = exercise.next_hint(folder, number)
    if found is None:
        out.print(f"no more hints: all {total} shown; [b]kplay hint {_as_path(folder)} N[/b] shows hint N again:")
        for h in exercise.table(folder)["hints"]:
            out.print(f"  {h['number']}. {escape(h['what'])}", highlight=False)
        return
    out.print(f"[b]hint {found['number']}/{total}[/b] · TODO {found['number']} in {escape(found['file'])}", highlight=False)
    out.print(f"  what: {escape(found['what'])}", highlight=False)
    if found.get("why"):
        out.print(f"  why: {escape(found['why'])}", highlight=False)


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
    from playground.pool import Pool

    if follow and not pool:
        raise UsageError("--follow needs --pool: it watches the pool's results folder")
    if not pool:
        return _board(results or [], out_dir)
    p = Pool(pool)
    p.config  # a folder that is not a pool's is refused
    if not follow:
        return _board(sorted(p.results.glob("*/*.json")), out_dir)
    from itertools import chain

    from watchfiles import watch

    for _ in chain([None], watch(p.results, recursive=True)):  # now, then at every change
        try:
            _board(sorted(p.results.glob("*/*.json")), out_dir)
        except UsageError as e:  # no record yet: wait for the first
            err.print(f"[yellow]waiting:[/] {escape(str(e))}", highlight=False, soft_wrap=True)


def _board(results: list[Path], out_dir: Path) -> None:
    from playground import board as b
    from playground.board_page import page

    entries, warnings = b.load([str(p) for p in results])
    groups = b.rank(entries)
    b.targets(out_dir)  # a file kplay did not write is refused before the table
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    out.print(b.table(groups))
    for written in b.write(groups, out_dir, page(groups)):
        out.print(f"wrote {written}", highlight=False, soft_wrap=True)


def _as_path(folder) -> str:
    """A folder as `kplay run` reads it: a bare name would mean the built-in family."""
    return str(folder) if folder.is_absolute() or str(folder).startswith(".") else f"./{folder}"


# ---- kplay pool: a class's grading pool --------------------------------------------------------------------

pool_app = typer.Typer(cls=OneLineErrors, no_args_is_help=True, rich_markup_mode="rich",
                       context_settings={"help_option_names": ["-h", "--help"]},
                       help='A class\'s grading pool on Dask distributed (pip install "kplay\\[pool]"): see the README.')
app.add_typer(pool_app, name="pool")
PoolDir = Annotated[Path, typer.Option("--dir", help="The pool's folder: its CA, certificate, tokens and results.")]
CpuWorkers = Annotated[int, typer.Option(help="CPU workers on a machine with no GPU (CPU exercises only).", min=1)]


@pool_app.command("start")
@friendly
def pool_start(dir_: PoolDir = Path("kplay-pool"),
               host: Annotated[str, typer.Option(help="The name or address students and workers reach this machine "
                                                      "by.")] = "localhost",
               port: Annotated[int, typer.Option(help="The scheduler's port (TLS).")] = 8786,
               endpoint_port: Annotated[int, typer.Option(help="The students' endpoint's port (HTTPS).")] = 8787,
               cpu_workers: CpuWorkers = 1):
    """The scheduler, one supervised worker per visible GPU, and the students' endpoint; until Ctrl-C."""
    from playground import pool

    pool.needs_dask()
    p = pool.create(dir_, host, port, endpoint_port)
    joined = pool.join_file(p, dir_ / "join.json")
    out.print(f"pool folder {dir_}; other servers join with [b]kplay pool join {joined}[/b] (keep it secret)",
              highlight=False, soft_wrap=True)
    pool.serve(p, cpu_workers, lambda line: out.print(escape(line), highlight=False, soft_wrap=True))


@pool_app.command("add-student")
@friendly
def pool_add_student(names: Annotated[list[str], typer.Argument(metavar="NAME...", help="One or more students.",
                                                                show_default=False)],
                     dir_: PoolDir = Path("kplay-pool"),
                     out_dir: Annotated[Optional[Path], typer.Option("--out", help="Where the token files go "
                                                                     "(default: the pool's tokens/).")] = None):
    """A token file per student (the endpoint, the CA, the token): hand each student theirs."""
    from playground import pool

    p, folder = pool.Pool(dir_), out_dir or dir_ / "tokens"
    p.config  # a folder that is not a pool's is refused before any file is written
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        out.print(f"wrote {pool.add_student(p, name, folder)}", highlight=False, soft_wrap=True)


@pool_app.command("join")
@friendly
def pool_join(join_file: Annotated[Path, typer.Argument(help="The join.json kplay pool start wrote.",
                                                        show_default=False)],
              dir_: PoolDir = Path("kplay-pool-worker"), cpu_workers: CpuWorkers = 1,
              name: Annotated[Optional[str], typer.Option(help="This server's name in the pool and in students' "
                                                               "reports (default: its host name).")] = None):
    """This server's GPUs as workers of the instructor's pool, supervised; until Ctrl-C."""
    from playground import pool

    pool.needs_dask()
    p, scheduler = pool.from_join_file(join_file, dir_)
    pool.join(p, scheduler, cpu_workers, name, lambda line: out.print(escape(line), highlight=False, soft_wrap=True))


@pool_app.command("status")
@friendly
def pool_status(dir_: PoolDir = Path("kplay-pool"), json_: Json = False):
    """The pool's workers, their GPUs, what each grades now, and what waits."""
    from playground import pool

    pool.needs_dask()
    try:
        state = pool.status(pool.Pool(dir_))
    except OSError as e:
        raise UsageError(f"the pool's scheduler cannot be reached: {e}") from None
    if json_:
        print(json.dumps(state, indent=2))
        return
    out.print(f"scheduler {state['scheduler']}: {len(state['workers'])} workers, {len(state['waiting'])} grades waiting",
              highlight=False)
    for w in state["workers"]:
        doing = ", ".join(w["grading"]) or "idle"
        out.print(f"  {escape(w['name'])}: {escape(doing)}", highlight=False, soft_wrap=True)


if __name__ == "__main__":
    app()
