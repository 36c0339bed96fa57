"""The command line's help and option values in words: placeholders a person reads (N, SECONDS, DIR, NAME; a
flag has none) instead of Python's types, and whole numbers written as sizes are (1e3, 10_000)."""

from __future__ import annotations

import inspect
import re

import typer
from rich.console import Console
from rich.markup import escape

WORDS = {"timeout": "SECONDS", "param": "NAME=VALUE", "size": "NAME=VALUE", "sizes": "SIZES", "tie": "SIZES",
         "over": "SIZE", "against": "FILE", "csv": "FILE", "plot": "FILE", "roofline": "FILE", "host": "HOST",
         "seed": "N", "number": "N", "port": "N", "endpoint_port": "N", "cpu_workers": "N", "pool": "TOKEN-FILE",
         "folder": "DIR", "out_dir": "DIR", "dir": "DIR", "path": "DIR", "join_file": "FILE", "results": "RESULTS"}


def whole(value) -> int:
    """An integer option written as sizes are: 1000, 1e3 or 1_000."""
    text = str(value).strip().replace("_", "")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not x.is_integer() or abs(x) >= 2 ** 63:
        raise typer.BadParameter(f"{value!r} is not a whole number (1000, 1e3 and 1_000 are)")
    return int(x)


def at_least(low: int):
    """A parser of whole numbers no smaller than `low`."""
    def parse(value) -> int:
        if (n := whole(value)) < low:
            raise typer.BadParameter(f"{n} is below {low}")
        return n
    return parse


def paths_there(paths: list[str] | None) -> list[str] | None:
    """--path: a folder that is not there is warned of (a typo would find nothing, silently)."""
    from ..family.registry import missing_paths

    for line in missing_paths(paths):
        Console(stderr=True).print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    return paths or []  # never None: typer 0.12 takes len() of what a callback returns


def worded(command) -> None:
    """Each option's placeholder in words, in this command and those under it; --help's too. A docstring's
    paragraphs flow to the terminal's width (rich markup keeps a source line's breaks as they are)."""
    for sub in getattr(command, "commands", {}).values():
        worded(sub)
    if command.help:
        command.help = re.sub(r"(?<=\S)[ \t]*\n[ \t]*(?=\S)", " ", inspect.cleandoc(command.help))
    made = command.get_help_option

    def help_option(ctx, made=made):  # --help is made per call, outside command.params: a flag, no placeholder
        option = made(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for p in command.params:
        flag = getattr(p, "is_flag", False)
        if p.metavar is None and p.name != "device":  # device: its choices, auto|cpu|cuda
            p.metavar = "" if flag else WORDS.get(p.name.rstrip("_"), "NAME")
        if not any(o.startswith("-") for o in p.opts):  # an argument: its placeholder is its name, no type beside it
            p.display_type_rich = lambda ctx: ""  # (typer >= 0.20 prints the annotation there)
