"""Find kernel families (folders with a task.toml) without importing torch."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from .errors import UsageError

BUILTIN = Path(__file__).resolve().parent.parent / "snippets"
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Param:
    name: str
    default: int | str
    choices: tuple = ()
    min: int | None = None
    max: int | None = None
    help: str = ""

    def parse(self, text: str) -> int | str:
        """Validate a value given on the command line."""
        value: int | str = text
        if isinstance(self.default, int):
            try:
                value = int(text)
            except ValueError:
                raise UsageError(f"--param {self.name}={text}: expected an integer") from None
        if self.choices and value not in self.choices:
            valid = ", ".join(map(str, self.choices))
            raise UsageError(f"--param {self.name}={text}: valid values are {valid}")
        if self.min is not None and value < self.min or self.max is not None and value > self.max:
            raise UsageError(f"--param {self.name}={text}: must be in [{self.min}, {self.max}]")
        return value


@dataclass(frozen=True)
class Variant:
    name: str
    device: str  # "cpu", "cuda" or "any" (pure PyTorch, nothing to build)
    sources: tuple[str, ...] = ()
    note: str = ""
    cflags: tuple[str, ...] = ()
    cuda_cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()  # NVIDIA libraries torch links, e.g. cublasLt: headers and linking found for you
    includes: tuple[str, ...] = ()  # headers in the family's folder that the sources #include (hashed, -I folder)

    def runs_on(self, device: str) -> bool:
        return self.device in (device, "any")


@dataclass(frozen=True)
class Family:
    name: str
    path: Path
    summary: str
    note: str
    dtypes: tuple[str, ...]
    sizes: dict[str, int]  # name -> default: each is an option of `kplay run NAME --SIZE VALUE`
    test_sizes: tuple[dict, ...]
    params: dict[str, Param]
    variants: dict[str, Variant]
    bench: bool | dict = True  # false: check only; a [bench] table: time it, and how kplay bench sweeps it
    default_variant: str = ""
    size_help: dict[str, str] = field(default_factory=dict)
    size_max: dict[str, int] = field(default_factory=dict)  # a size's largest value, where the family sets one
    values: dict = field(default_factory=dict)  # [values]: the input given as a list; its length sets `size`
    extra: dict = field(default_factory=dict)

    @property
    def devices(self) -> list[str]:
        return [d for d in DEVICES if any(v.runs_on(d) for v in self.variants.values())]

    def variants_for(self, device: str) -> list[Variant]:
        return [v for v in self.variants.values() if v.runs_on(device)]

    def pick_variants(self, device: str, name: str | None) -> list[Variant]:
        """The variants a run uses: one by name, 'all', or the family's default."""
        avail = self.variants_for(device)
        if not avail:
            why = " (no GPU here, or --device cpu)" if device == "cpu" else ""
            raise UsageError(f"{self.name} in {self.path} has only {' and '.join(self.devices)} variants "
                             f"({', '.join(self.variants)}); this run is on {device}{why}")
        name = name or self.default_variant or avail[0].name
        if name == "all":
            return avail
        for v in avail:
            if v.name == name:
                return [v]
        if name in self.variants:
            raise UsageError(f"{self.name}/{name} is a {self.variants[name].device} variant and this run is on {device}"
                             + (" (this machine has no GPU)" if device == "cpu" else ""))
        names = ", ".join(v.name for v in avail)
        raise UsageError(f"{self.name} has no {device} variant '{name}'; valid: {names}, all")

    def variant(self, name: str) -> Variant:
        """A variant by name, whatever its device."""
        if name not in self.variants:
            raise UsageError(f"{self.name} has no variant '{name}'; valid: {', '.join(self.variants)}")
        return self.variants[name]

    def parse_params(self, pairs: list[str]) -> dict[str, int | str]:
        """Turn ['threads=512'] into the full parameter dict, defaults filled in."""
        values = {p.name: p.default for p in self.params.values()}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            if not sep:
                raise UsageError(f"--param {pair}: expected NAME=VALUE")
            if key not in self.params:
                valid = ", ".join(self.params) or "none"
                raise UsageError(f"{self.name} has no parameter '{key}'; valid: {valid}")
            values[key] = self.params[key].parse(text)
        return values


def _variant(name: str, raw: dict, shared: tuple = ()) -> Variant:
    return Variant(
        name=name,
        device=raw.get("device", "cpu"),
        sources=tuple(raw.get("sources", ())),
        note=raw.get("note", ""),
        cflags=tuple(raw.get("cflags", ())),
        cuda_cflags=tuple(raw.get("cuda_cflags", ())),
        ldflags=tuple(raw.get("ldflags", ())),
        libraries=tuple(raw.get("libraries", ())),
        includes=tuple(dict.fromkeys([*shared, *raw.get("includes", ())])),
    )


def load_family(path: Path) -> Family:
    """Read one family folder's task.toml."""
    toml = path / "task.toml"
    if not path.exists():
        raise UsageError(f"{path} does not exist")
    try:
        raw = tomllib.loads(toml.read_text())
    except OSError:
        raise UsageError(f"{path} is not a kernel folder: it has no task.toml") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{toml}: {e}") from None
    try:
        return _family(path, raw)
    except (TypeError, AttributeError, ValueError) as e:
        raise UsageError(f"{toml}: {e}") from None


def _sizes(raw: dict) -> tuple[dict, dict, dict]:
    """[sizes]: `n = 10_000_000`, or `n = { default = 10_000_000, max = 10**9, help = "elements" }`:
    (defaults, help, maxima)."""
    tables = {k: v if isinstance(v, dict) else {"default": v} for k, v in raw.items()}
    for k, v in tables.items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", k) or not isinstance(v.get("default"), int):
            raise ValueError(f"size {k}: a lower-case name with an integer default, e.g. {k} = 1000")
        if not isinstance(v.get("max", v["default"]), int) or v.get("max", v["default"]) < v["default"]:
            raise ValueError(f"size {k}: max = {v['max']!r} must be an integer of at least the default")
    return ({k: v["default"] for k, v in tables.items()}, {k: v.get("help", "") for k, v in tables.items()},
            {k: v["max"] for k, v in tables.items() if "max" in v})


def _values(raw: dict, sizes: dict) -> dict:
    """[values]: `size = "n"` (the size the list's length sets) and its help."""
    if raw and raw.get("size") not in sizes:
        raise ValueError(f"[values] size = {raw.get('size')!r}: it must name one of the sizes ({', '.join(sizes)})")
    return dict(raw)


def _family(path: Path, raw: dict) -> Family:
    params = {k: Param(name=k, **{**v, "choices": tuple(v.get("choices", ()))}) for k, v in raw.get("params", {}).items()}
    known = {"summary", "note", "dtypes", "sizes", "test_sizes", "params", "variants", "bench", "default_variant", "includes",
             "values"}
    sizes, size_help, size_max = _sizes(raw.get("sizes", {}))
    shared = tuple(raw.get("includes", ()))
    return Family(
        name=raw.get("name", path.name),
        path=path,
        summary=raw.get("summary", ""),
        note=raw.get("note", ""),
        dtypes=tuple(raw.get("dtypes", ["float32"])),
        sizes=sizes,
        size_help=size_help,
        size_max=size_max,
        values=_values(raw.get("values", {}), sizes),
        test_sizes=tuple(raw.get("test_sizes", ())),
        params=params,
        variants={k: _variant(k, v, shared) for k, v in raw.get("variants", {}).items()},
        bench=raw.get("bench", True),
        default_variant=raw.get("default_variant", ""),
        extra={k: v for k, v in raw.items() if k not in known},
    )


def search_path(extra: list[str] | None = None) -> list[Path]:
    """Folders holding families: --path options, then $KPLAY_PATH, then the built-in snippets."""
    env = [p for p in os.environ.get("KPLAY_PATH", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in [*(extra or []), *env]] + [BUILTIN]


def families(extra: list[str] | None = None) -> dict[str, Family]:
    """Every family on the search path; an earlier folder shadows a later one of the same name."""
    found: dict[str, Family] = {}
    for root in reversed(search_path(extra)):
        for toml in sorted(root.glob("*/task.toml")):
            fam = load_family(toml.parent)
            found[fam.name] = fam
    return dict(sorted(found.items()))


def shadowing(fam: Family) -> str:
    """A warning when a family from --path or $KPLAY_PATH has a built-in's name, else ''."""
    builtin = BUILTIN / fam.name
    if fam.path.resolve() == builtin.resolve() or not (builtin / "task.toml").exists():
        return ""
    return f"{fam.name} from {fam.path} has the name of a built-in family; this run uses {fam.path}"


def is_path(name: str) -> bool:
    """`./mysum`, `/tmp/x/sum`: a folder named on the command line, not a family looked up by name."""
    return bool(re.search(r"[/\\]", name)) or name.startswith(".")


def find(name: str, extra: list[str] | None = None) -> Family:
    """A family by name, or by the path of its folder (an ejected or hand-made snippet)."""
    if is_path(name):
        return load_family(Path(name).expanduser().resolve())
    for root in search_path(extra):  # a folder of that name: found without reading the others
        if (root / name / "task.toml").exists():
            return load_family(root / name)
    known = families(extra)
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(known)}"
    raise UsageError(f"unknown kernel '{name}'{hint}")
