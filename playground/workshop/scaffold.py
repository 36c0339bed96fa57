"""Files for the attendee: eject a family into an editable folder, start a new one, export a package."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..compiler.toolchain import CUDA_FLAGS, CXX_FLAGS, engine_headers, nvidia_library
from ..core.errors import UsageError
from ..family import render
from ..family.registry import Family, Variant
from .todos import starter_files

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def _toml_value(v) -> str:
    if isinstance(v, str):  # multi-line: a literal string, so backslashes in a note stay as written
        return "'''\n" + v.strip() + "\n'''" if "\n" in v and "'''" not in v else json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def to_toml(data: dict, prefix: str = "") -> str:
    """Enough TOML for task.toml: scalars, lists, tables and arrays of tables."""
    lines, tables = [], []
    for k, v in data.items():
        if isinstance(v, dict):
            tables.append(f"\n[{prefix}{k}]\n" + to_toml(v, f"{prefix}{k}."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables += [f"\n[[{prefix}{k}]]\n" + to_toml(x) for x in v]
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + ("\n" if lines else "") + "".join(tables)


def _write(folder: Path, files: dict[str, str], force: bool) -> list[Path]:
    """Write each file under folder (made if missing); nothing the user wrote is overwritten without --force,
    and a folder that is a file or cannot be written is one UsageError."""
    targets = [folder / name for name in files]
    _refuse_overwrite(targets, force)
    try:
        for path, text in zip(targets, files.values()):
            path.parent.mkdir(parents=True, exist_ok=True)  # a header listed as include/x.h
            path.write_text(text)
    except OSError as e:
        blocker = next((p for p in (folder, *folder.parents) if p.exists()), folder)
        why = f"{blocker} is not a folder" if not blocker.is_dir() else e.strerror or str(e)
        raise UsageError(f"{folder}: cannot write there ({why})") from None
    return targets


def _refuse_overwrite(paths: list[Path], force: bool) -> None:
    existing = [p for p in paths if p.exists() and not p.is_dir()]
    if existing and not force:
        if len(existing) > 2:  # the folder and a count: a list of every path is longer than a terminal line
            root = Path(os.path.commonpath(existing))
            shown = f"{len(existing)} files in {root} ({existing[0].relative_to(root)}, …)"
        else:
            shown = ", ".join(map(str, existing))
        raise UsageError(f"will not overwrite {shown} (use --force)")


def eject(fam: Family, folder: Path, variants: list[Variant], params: dict, force: bool = False,
          starter: bool = False, exercise: dict | None = None) -> list[Path]:
    """Write the family's sources, rendered with these parameters, the headers they include and its spec.

    starter: each `// kplay:todo` region becomes its TODO (playground/exercise.py); exercise: the started
    folder's [exercise] table (family, variant, hints) in place of `exercise = true`.
    """
    files = {name: text for v in variants for name, text in render.sources(fam, v, params).items()}
    files.update({name: render.header(fam, v, name) for v in variants for name in v.includes})  # builds on its own
    if starter:
        files = starter_files(files, fam.path)[0]
    used = ", ".join(f"{k}={v}" for k, v in params.items())
    task = {
        "name": fam.name,
        "summary": fam.summary + (f" (ejected with {used})" if used else " (ejected)"),
        "note": fam.note,
        "dtypes": list(fam.dtypes),
        "bench": fam.bench,
        **({"default_variant": fam.default_variant} if fam.default_variant in ("all", *(v.name for v in variants)) else {}),
        **({"baselines": list(fam.baselines)} if fam.baselines else {}),
        **({"forms": list(fam.forms)} if fam.forms else {}),
        **({"grade_dtypes": list(fam.grade_dtypes)} if fam.grade_dtypes else {}),
        **({"sanitize_sizes": list(fam.sanitize_sizes)} if fam.sanitize_sizes else {}),
        **({"distributions": list(fam.distributions)} if fam.distributions else {}),
        **({"exercise": exercise} if exercise else {}),  # a folder kplay start wrote; an ejected one is the user's
        **({"default_variant": exercise["variant"]} if exercise else {}),
        **({"values": fam.values} if fam.values else {}),
        "sizes": {k: _size_table(fam, k) for k in fam.sizes},
        "test_sizes": list(fam.test_sizes),
        "variants": {v.name: _variant_table(v) for v in variants},
    }
    then = "kplay check ." if exercise else "kplay run ."  # a started exercise is checked
    files["task.toml"] = f"# Written by kplay: edit the sources, then `{then}`\n" + to_toml(task)
    files["spec.py"] = (fam.path / "spec.py").read_text()
    return _write(folder, files, force)


def _size_table(fam: Family, key: str) -> int | dict:
    """A size as task.toml declares it: the default alone, or with its help, its largest value and the range
    its drawn sizes come from."""
    more = {"help": fam.size_help.get(key), "max": fam.size_max.get(key),
            "draw": list(fam.size_draw[key]) if key in fam.size_draw else None}
    more = {k: v for k, v in more.items() if v}
    return {"default": fam.sizes[key], **more} if more else fam.sizes[key]


def _variant_table(v: Variant) -> dict:
    table = {"device": v.device, "sources": list(v.sources), "note": v.note}
    for key in ("cflags", "cuda_cflags", "ldflags", "libraries", "includes", "dtypes"):
        if getattr(v, key):
            table[key] = list(getattr(v, key))
    for key in ("math", "arch"):  # what it is graded in, and the GPU it is built for
        if getattr(v, key):
            table[key] = getattr(v, key)
    return table


def new(name: str, folder: Path, force: bool = False) -> list[Path]:
    """A new family that passes as it is: an element-wise op with a reference and awkward test sizes."""
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise UsageError(f"kernel name '{name}': use letters, digits and _, not starting with a digit")
    files = {t.name.removeprefix("new_").replace("kernel", name): t.read_text().replace("KERNEL", name)
             for t in sorted(TEMPLATES.glob("new_*"))}
    return _write(folder, files, force)


def export(fam: Family, folder: Path, variant: Variant, params: dict, force: bool = False) -> list[Path]:
    """A pip-installable package: setup.py with CppExtension/CUDAExtension (the seeds' ahead-of-time path)."""
    package = f"{fam.name}_ext"
    cuda = any(s.endswith(".cu") for s in variant.sources)
    files = {f"{package}/csrc/{n}": t for n, t in render.sources(fam, variant, params).items()}
    if not files:
        raise UsageError(f"{fam.name}/{variant.name} has no C++ sources to export")
    sources = sorted(files)
    headers = {**engine_headers(), **{n: render.header(fam, variant, n) for n in variant.includes}}
    files.update({f"{package}/csrc/{n}": t for n, t in headers.items()})  # csrc is on the include path
    found = [nvidia_library(lib) for lib in variant.libraries]  # (headers, shared object) of each
    sub = dict(PACKAGE=package, FAMILY=fam.name, VARIANT=variant.name, EXTENSION="CUDAExtension" if cuda else "CppExtension",
               INCLUDES="[" + ", ".join(["str(CSRC)", *(repr(inc) for inc, _ in found)]) + "]",
               DATA=repr(sorted({f"{Path(n).parent.relative_to(package).as_posix()}/*" for n in files})),
               LDFLAGS=repr([*variant.ldflags, *(so for _, so in found)]),
               SOURCES=repr(sources), CFLAGS=repr([*CXX_FLAGS, *variant.cflags]),
               NVCCFLAGS=repr([*CUDA_FLAGS, *variant.cuda_cflags]), DEVICE=variant.device if variant.device != "any" else "cpu",
               DTYPE=fam.dtypes[0], SIZES=repr({**fam.sizes, **(fam.test_sizes[-1] if fam.test_sizes else {})}))
    for template in sorted(TEMPLATES.glob("export_*")):
        target = template.name.removeprefix("export_").replace("PACKAGE", package).replace("+", "/")
        files[target] = re.sub(r"@(\w+)@", lambda m: sub[m.group(1)], template.read_text())
    files[f"{package}/spec.py"] = (fam.path / "spec.py").read_text()
    return _write(folder, files, force)

