"""Find kernel families (folders with a task.toml) without importing torch."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from ..core.errors import UsageError
from . import constraints, data

_HOME = Path(__file__).resolve().parent.parent  # playground/
# the built-in families: playground/snippets in an installed wheel, the checkout's snippets/ beside playground/
BUILTIN = next((p for p in (_HOME / "snippets", _HOME.parent / "snippets") if p.is_dir()), _HOME / "snippets")
DEVICES = ("cpu", "cuda")
DTYPES = ("int32", "int64", "float16", "bfloat16", "float32", "float64")

# The value types a task.toml key may have, by the words an error shows.
TYPES = {
    "a string": lambda v: isinstance(v, str),
    "an integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "an integer or a string": lambda v: isinstance(v, (int, str)) and not isinstance(v, bool),
    "a table": lambda v: isinstance(v, dict),
    "a list": lambda v: isinstance(v, list),
    "a list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "a list of tables": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
    "true, false or a table": lambda v: isinstance(v, (bool, dict)),
}
# Every key task.toml may hold, table by table, and its type: anything else is a typo.
FAMILY_KEYS = {"name": "a string", "summary": "a string", "note": "a string", "dtypes": "a list of strings",
               "sizes": "a table", "test_sizes": "a list of tables", "params": "a table", "variants": "a table",
               "bench": "true, false or a table", "default_variant": "a string", "includes": "a list of strings",
               "values": "a table", "exercise": "true, false or a table", "baselines": "a list of strings",
               "forms": "a list of strings", "grade_dtypes": "a list of strings", "sanitize_sizes": "a list of tables",
               "distributions": "a list of strings"}
FORMS = ("2-D", "strided", "misaligned")  # the input forms a family may declare its op takes, beyond dense 1-D
VARIANT_KEYS = {"device": "a string", "sources": "a list of strings", "note": "a string", "cflags": "a list of strings",
                "cuda_cflags": "a list of strings", "ldflags": "a list of strings", "libraries": "a list of strings",
                "includes": "a list of strings", "math": "a string", "params": "a table", "constraints": "a list of tables",
                "arch": "a string", "dtypes": "a list of strings"}
MATH = ("tf32",)  # a variant's arithmetic where it is not its dtype's: spec.py's tolerance(..., math=) bounds it
SIZE_KEYS = {"default": "an integer", "max": "an integer", "help": "a string", "draw": "a list"}
PARAM_KEYS = {"default": "an integer or a string", "choices": "a list", "min": "an integer", "max": "an integer",
              "help": "a string"}
VALUES_KEYS = {"size": "a string", "help": "a string"}
BENCH_KEYS = {"size": "a string", "tie": "a list of strings", "sizes": "a string"}
EXERCISE_KEYS = {"family": "a string", "variant": "a string", "student": "a string", "id": "a string",
                 "hints": "a list of tables"}  # written by kplay start
HINT_KEYS = {"number": "an integer", "file": "a string", "line": "an integer", "what": "a string", "why": "a string",
             "code": "a string"}


def did_you_mean(word: str, known) -> str:
    close = difflib.get_close_matches(word, known, n=1)
    return f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known)}"


def check_keys(where: str, raw: dict, keys: dict) -> None:
    """Every key of a table known (else a did-you-mean) and of its type; where: '[variants.cpp] ' or ''."""
    for key, value in raw.items():
        if key not in keys:
            raise ValueError(f"{where}unknown key '{key}'; {did_you_mean(key, keys)}")
        if not TYPES[keys[key]](value):
            shown = json.dumps(value, default=str)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise ValueError(f"{where}{key} = {shown}: expected {keys[key]}")


@dataclass(frozen=True)
class Param:
    name: str
    default: int | str
    choices: tuple = ()
    min: int | None = None
    max: int | None = None
    help: str = ""

    def parse(self, text: str, owner: str = "") -> int | str:
        """Validate a value given on the command line; owner: the variant whose parameter it is, if not the family's."""
        value: int | str = text
        of = f" ({owner}'s)" if owner else ""
        if isinstance(self.default, int):
            try:
                value = int(text)
            except ValueError:
                raise UsageError(f"--param {self.name}={text}: expected an integer") from None
        if self.choices and value not in self.choices:
            valid = ", ".join(map(str, self.choices))
            raise UsageError(f"--param {self.name}={text}{of}: valid values are {valid}")
        if self.min is not None and value < self.min or self.max is not None and value > self.max:
            raise UsageError(f"--param {self.name}={text}{of}: must be in [{self.min}, {self.max}]")
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
    math: str = ""  # "tf32": float32 inputs rounded to TF32 on the tensor cores; the check's tolerance says so
    arch: str = ""  # the one GPU arch it is built for, e.g. "9.0a" (Hopper's wgmma, TMA); else the process's
    dtypes: tuple[str, ...] = ()  # the dtypes it takes, of the family's (empty: all of them)
    params: dict = field(default_factory=dict)  # name -> Param: its own, [variants.NAME.params], beside the family's
    constraints: tuple = ()  # constraints.Constraint: rules its parameters obey, checked before any build

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
    baselines: tuple[str, ...] = ()  # what spec.py times the kernel against, by name: checked before torch loads
    exercise: bool | dict = False  # true: show and eject give the starter; a table: a folder kplay start wrote
    grade_dtypes: tuple[str, ...] = ()  # what kplay check grades of a variant with no dtypes of its own (empty: all)
    sanitize_sizes: tuple[dict, ...] = ()  # small sizes kplay check runs memcheck and racecheck at (empty: test_sizes)
    forms: tuple[str, ...] = ()  # FORMS the op takes: the check runs the requested size in each
    distributions: tuple[str, ...] = ()  # data.DISTRIBUTIONS its data is drawn from (none: as spec.py makes it)
    size_draw: dict[str, tuple[int, int]] = field(default_factory=dict)  # a size's range for the drawn sizes

    @property
    def devices(self) -> list[str]:
        return [d for d in DEVICES if any(v.runs_on(d) for v in self.variants.values())]

    def variants_for(self, device: str) -> list[Variant]:
        return [v for v in self.variants.values() if v.runs_on(device)]

    def dtypes_of(self, variant: Variant) -> tuple[str, ...]:
        """The dtypes a variant takes: its own list, else the family's."""
        return variant.dtypes or self.dtypes

    def takes(self, variant: Variant, dtype: str | None) -> Variant:
        """The variant, if it takes the dtype (None: any); else one line naming the ones it does."""
        if dtype and dtype not in self.dtypes_of(variant):
            raise UsageError(f"{self.name}/{variant.name} takes {', '.join(self.dtypes_of(variant))}, not {dtype}")
        return variant

    def pick_variants(self, device: str, name: str | None, dtype: str | None = None) -> list[Variant]:
        """The variants a run uses: one by name, 'all' (those that take the dtype), or the family's default."""
        avail = self.variants_for(device)
        if not avail:
            why = " (no GPU here, or --device cpu)" if device == "cpu" else ""
            raise UsageError(f"{self.name} in {self.path} has only {' and '.join(self.devices)} variants "
                             f"({', '.join(self.variants)}); this run is on {device}{why}")
        name = name or self.default_variant or avail[0].name
        if name == "all":
            taking = [v for v in avail if not dtype or dtype in self.dtypes_of(v)]
            if not taking:
                raise UsageError(f"no {device} variant of {self.name} takes {dtype}")
            return taking
        for v in avail:
            if v.name == name:
                return [self.takes(v, dtype)]
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

    def chosen(self, device: str, name: str | None) -> list[Variant]:
        """The one rule for which variants a command takes: one named outright, whatever its device (reading or
        building a source needs no GPU); else the device's by pick_variants ('all', or the default)."""
        return [self.variant(name)] if name and name != "all" else self.pick_variants(device, name)

    def named(self, name: str | None) -> list[Variant]:
        """The variants a --variant names whatever their device: one, or all of them ('all' or none named)."""
        return [self.variant(name)] if name and name != "all" else list(self.variants.values())

    def parse_params(self, pairs: list[str], variants: list[Variant] | None = None) -> dict[str, int | str]:
        """Turn ['threads=512'] into the family's parameters, defaults filled in, plus the variants' own that
        are given. A variant's own applies to every one of `variants` (default: all) that declares it, and each
        must take the value; none declaring it is an error, and so is a combination one of them refuses (before
        anything is built or shown). params_for gives one variant's full set."""
        values = {p.name: p.default for p in self.params.values()}
        among = list(self.variants.values()) if variants is None else variants
        for pair in pairs:
            key, sep, text = pair.partition("=")
            if not sep:
                raise UsageError(f"--param {pair}: expected NAME=VALUE")
            if key in self.params:
                values[key] = self.params[key].parse(text)
                continue
            takers = [v for v in among if key in v.params]
            if not takers:
                raise UsageError(self._not_taken(key, among))
            values[key] = [v.params[key].parse(text, v.name) for v in takers][0]
        for v in among:
            self.params_for(v, values)
        return values

    def _not_taken(self, key: str, among: list[Variant]) -> str:
        """Why no chosen variant takes --param KEY: no such parameter, or only other variants have it."""
        owners = [v.name for v in self.variants.values() if key in v.params]
        if not owners:
            known = dict.fromkeys([*self.params, *(k for v in among for k in v.params)])
            return f"{self.name} has no parameter '{key}'; valid: {', '.join(known) or 'none'}"
        chosen = ", ".join(v.name for v in among)
        return (f"--param {key}: {chosen} {'has' if len(among) == 1 else 'have'} no such parameter; it is a "
                f"parameter of {', '.join(owners)} (pick one with --variant)")

    def params_for(self, variant: Variant, values: dict) -> dict[str, int | str]:
        """What the variant's sources are rendered with: the family's parameters and its own, `values` in place of
        the defaults. A combination that breaks one of its constraints is refused here, before any build."""
        params = {k: values.get(k, p.default) for k, p in {**self.params, **variant.params}.items()}
        for rule in variant.constraints:
            if not rule.holds(params):
                raise UsageError(f"{self.name}/{variant.name} cannot take {rule.refusal(params)}")
        return params


def _variant(name: str, raw: dict, path: Path, shared: tuple = (), family_params: dict | None = None) -> Variant:
    check_keys(f"[variants.{name}] ", raw, VARIANT_KEYS)
    if raw.get("device", "cpu") not in (*DEVICES, "any"):
        raise ValueError(f"[variants.{name}] device = {json.dumps(raw['device'])}: expected cpu, cuda or any")
    if raw.get("math", MATH[0]) not in MATH:
        raise ValueError(f"[variants.{name}] math = {json.dumps(raw['math'])}: expected {' or '.join(MATH)}")
    if not re.fullmatch(r"\d+\.\d+a?", raw.get("arch", "9.0")):
        raise ValueError(f"[variants.{name}] arch = {json.dumps(raw['arch'])}: expected a compute capability, e.g. "
                         "9.0 or 9.0a")
    variant = Variant(
        name=name,
        device=raw.get("device", "cpu"),
        sources=tuple(raw.get("sources", ())),
        note=raw.get("note", ""),
        cflags=tuple(raw.get("cflags", ())),
        cuda_cflags=tuple(raw.get("cuda_cflags", ())),
        ldflags=tuple(raw.get("ldflags", ())),
        libraries=tuple(raw.get("libraries", ())),
        includes=tuple(dict.fromkeys([*shared, *raw.get("includes", ())])),
        math=raw.get("math", ""),
        arch=raw.get("arch", ""),
        dtypes=tuple(raw.get("dtypes", ())),
        params=_params(raw.get("params", {}), f"variants.{name}.params"),
    )
    _files_exist(path, variant)
    return _constrained(variant, raw.get("constraints", []), family_params or {})


def _constrained(variant: Variant, raw: list, family_params: dict) -> Variant:
    """The variant with its constraints, each rule parsed; a name taken twice, a rule naming no whole-number
    parameter or one the defaults break is an error in task.toml."""
    where = f"[variants.{variant.name}]"
    for k in variant.params:
        if k in family_params:
            raise ValueError(f"{where} params.{k}: the family's [params.{k}] has that name already")
    taken = {**family_params, **variant.params}
    numbers = [k for k, p in taken.items() if isinstance(p.default, int)]
    rules = []
    for k, table in enumerate(raw, 1):
        check_keys(f"{where} constraints #{k}: ", table, constraints.KEYS)
        if "rule" not in table:
            raise ValueError(f'{where} constraints #{k}: no rule, e.g. {{ rule = "a * b <= 1024", why = "..." }}')
        rules.append(constraints.parse(table, numbers))
    defaults = {k: p.default for k, p in taken.items()}
    for rule in rules:
        if not rule.holds(defaults):
            raise ValueError(f"{where} constraints: the defaults break one, {rule.refusal(defaults)}")
    return dataclasses.replace(variant, constraints=tuple(rules))


def _variants(raw: dict, path: Path, shared: tuple, params: dict) -> dict[str, Variant]:
    """[variants.NAME] tables; shared: the family-level includes, which every variant gets; params: the family's."""
    for k, v in raw.items():
        if not isinstance(v, dict):
            raise ValueError(f"variants.{k}: expected a table, e.g. [variants.{k}] with device and sources")
    return {k: _variant(k, v, path, shared, params) for k, v in raw.items()}


def _files_exist(path: Path, variant: Variant) -> None:
    """Each listed source and header is a file in the family's folder (named here, not as a build's error)."""
    for name, what, key in [*((n, "source", "sources") for n in variant.sources),
                            *((n, "header", "includes") for n in variant.includes)]:
        if not (path / name).is_file():
            raise UsageError(f"{path.name}/{variant.name}: {what} {path / name} (task.toml {key}) does not exist")


def load_family(path: Path) -> Family:
    """Read one family folder's task.toml and check it: unknown keys, wrong types and missing files are named."""
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


def _sizes(raw: dict) -> tuple[dict, dict, dict, dict]:
    """[sizes]: `n = 10_000_000`, or `n = { default = 10_000_000, max = 10**9, help = "elements", draw = [2, 65537] }`:
    (defaults, help, maxima, the ranges its drawn sizes come from)."""
    tables = {k: v if isinstance(v, dict) else {"default": v} for k, v in raw.items()}
    for k, v in tables.items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", k):
            raise ValueError(f"[sizes] {k}: a size's name is lower-case letters, digits and _ (it is the option --NAME)")
        if "default" not in v:
            raise ValueError(f"[sizes] {k}: no default, e.g. {k} = {{ default = 1000 }}")
        check_keys(f"[sizes] {k}: ", v, SIZE_KEYS)
        if v.get("max", v["default"]) < v["default"]:
            raise ValueError(f"[sizes] {k}: max = {v['max']!r} must be at least the default")
        low_high = v.get("draw", [1, 1])
        if len(low_high) != 2 or not all(isinstance(b, int) and b >= 1 for b in low_high) or low_high[0] > low_high[1]:
            raise ValueError(f"[sizes] {k}: draw = {low_high!r}: expected [low, high], whole numbers, 1 <= low <= high")
    return ({k: v["default"] for k, v in tables.items()}, {k: v.get("help", "") for k, v in tables.items()},
            {k: v["max"] for k, v in tables.items() if "max" in v},
            {k: tuple(v["draw"]) for k, v in tables.items() if "draw" in v})


def _values(raw: dict, sizes: dict) -> dict:
    """[values]: `size = "n"` (the size the list's length sets) and its help."""
    check_keys("[values] ", raw, VALUES_KEYS)
    if raw and raw.get("size") not in sizes:
        raise ValueError(f"[values] size = {raw.get('size')!r}: it must name one of the sizes ({', '.join(sizes)})")
    return dict(raw)


def _params(raw: dict, table: str = "params") -> dict[str, Param]:
    """[params.NAME] tables (table: where they are, e.g. variants.cuda-2d.params)."""
    for k, v in raw.items():
        if not isinstance(v, dict) or "default" not in v:
            raise ValueError(f"[{table}.{k}]: a table with a default, e.g. default = 256")
        check_keys(f"[{table}.{k}] ", v, PARAM_KEYS)
    return {k: Param(name=k, **{**v, "choices": tuple(v.get("choices", ()))}) for k, v in raw.items()}


def _test_sizes(raw: list, sizes: dict) -> tuple[dict, ...]:
    """[[test_sizes]]: each names some of the sizes, the others keep their defaults."""
    for k, case in enumerate(raw, 1):
        check_keys(f"[[test_sizes]] #{k}: ", case, dict.fromkeys(sizes, "an integer"))
    return tuple(raw)


def _bench(raw: bool | dict, sizes: dict) -> bool | dict:
    """`bench = false` (check only), or a [bench] table: the swept size, the sizes tied to it, the range."""
    if isinstance(raw, dict):
        check_keys("[bench] ", raw, BENCH_KEYS)
        for k in [raw.get("size", next(iter(sizes), "")), *raw.get("tie", ())]:
            if k not in sizes:
                raise ValueError(f"[bench]: {k!r} is not one of the sizes ({', '.join(sizes)})")
    return raw


def _exercise(raw: bool | dict) -> bool | dict:
    if isinstance(raw, dict):
        check_keys("[exercise] ", raw, EXERCISE_KEYS)
        for hint in raw.get("hints", ()):
            check_keys("[[exercise.hints]] ", hint, HINT_KEYS)
    return raw


def _family(path: Path, raw: dict) -> Family:
    check_keys("", raw, FAMILY_KEYS)
    sizes, size_help, size_max, size_draw = _sizes(raw.get("sizes", {}))
    params = _params(raw.get("params", {}))
    variants = _variants(raw.get("variants", {}), path, tuple(raw.get("includes", ())), params)
    dtypes = _dtypes(raw, variants)
    default = raw.get("default_variant", "")
    if default not in ("", "all", *variants):
        raise ValueError(f"default_variant = {json.dumps(default)}: not a variant; {did_you_mean(default, ['all', *variants])}")
    return Family(
        name=raw.get("name", path.name),
        path=path,
        summary=raw.get("summary", ""),
        note=raw.get("note", ""),
        dtypes=dtypes,
        sizes=sizes,
        size_help=size_help,
        size_max=size_max,
        values=_values(raw.get("values", {}), sizes),
        test_sizes=_test_sizes(raw.get("test_sizes", []), sizes),
        params=params,
        variants=variants,
        bench=_bench(raw.get("bench", True), sizes),
        default_variant=default,
        baselines=tuple(dict.fromkeys(raw.get("baselines", ()))),
        exercise=_exercise(raw.get("exercise", False)),
        grade_dtypes=tuple(raw.get("grade_dtypes", ())),
        sanitize_sizes=_test_sizes(raw.get("sanitize_sizes", []), sizes),
        forms=_forms(raw.get("forms", [])),
        distributions=_distributions(raw.get("distributions", [])),
        size_draw=size_draw,
    )


def _dtypes(raw: dict, variants: dict[str, Variant]) -> tuple[str, ...]:
    """The family's dtypes; its grade_dtypes and each variant's own dtypes among them."""
    dtypes = tuple(raw.get("dtypes", ["float32"]))
    for dtype in dtypes:
        if dtype not in DTYPES:
            raise ValueError(f"dtypes: unknown dtype '{dtype}'; {did_you_mean(dtype, DTYPES)}")
    for dtype in raw.get("grade_dtypes", ()):
        if dtype not in dtypes:
            raise ValueError(f"grade_dtypes: '{dtype}' is not one of the dtypes ({', '.join(dtypes)})")
    for v in variants.values():
        for dtype in (d for d in v.dtypes if d not in dtypes):
            raise ValueError(f"[variants.{v.name}] dtypes: '{dtype}' is not one of the family's ({', '.join(dtypes)})")
    return dtypes


def _distributions(raw: list) -> tuple[str, ...]:
    for name in raw:
        if name not in data.DISTRIBUTIONS:
            raise ValueError(f"distributions: unknown distribution '{name}'; valid: {', '.join(data.DISTRIBUTIONS)}")
    return tuple(dict.fromkeys(raw))


def _forms(raw: list) -> tuple[str, ...]:
    for form in raw:
        if form not in FORMS:
            raise ValueError(f"forms: unknown form '{form}'; {did_you_mean(form, FORMS)}")
    return tuple(dict.fromkeys(raw))


def search_path(extra: list[str] | None = None) -> list[Path]:
    """Folders holding families: --path options, then $KPLAY_PATH, then the built-in snippets."""
    env = [p for p in os.environ.get("KPLAY_PATH", "").split(os.pathsep) if p]
    return [Path(p).expanduser().resolve() for p in [*(extra or []), *env]] + [BUILTIN]  # `--path .`: a named folder


def scan(extra: list[str] | None = None) -> tuple[dict[str, Family], list[str]]:
    """Every family on the search path (an earlier folder shadows a later one of the same name), and one
    line for each folder whose task.toml is refused: one broken family hides none of the others."""
    found: dict[str, Family] = {}
    refused = []
    for root in reversed(search_path(extra)):
        for toml in [*root.glob("task.toml"), *sorted(root.glob("*/task.toml"))]:  # --path a family's own folder too
            try:
                fam = load_family(toml.parent)
            except UsageError as e:
                refused.append(str(e))
                continue
            found[fam.name] = fam
    return dict(sorted(found.items())), refused


def families(extra: list[str] | None = None) -> dict[str, Family]:
    """Every family on the search path; a refused task.toml is an error."""
    found, refused = scan(extra)
    if refused:
        raise UsageError(refused[0])
    return found


def clash(fam: Family, options: Collection[str]) -> str:
    """An error when a size takes the name of a command's option (`--against`: the option would win), else ''."""
    taken = [k for k in fam.sizes if k in options]
    if not taken:
        return ""
    return (f"{fam.path / 'task.toml'}: the size '{taken[0]}' has the name of one of kplay's own options "
            f"(--{taken[0]}); rename it in [sizes]")


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
    known = scan(extra)[0]  # a refused family elsewhere does not stop the search
    if name in known:
        return known[name]
    if (Path(name) / "task.toml").exists():  # a folder here, named as a family: say how to run it
        raise UsageError(f"unknown kernel '{name}'; the folder {name} here holds one: give it as a path, "
                         f"{shlex.quote('./' + name)}")
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(known)}"
    raise UsageError(f"unknown kernel '{name}'{hint}")


def missing_paths(extra: list[str] | None = None) -> list[str]:
    """A warning for each --path or $KPLAY_PATH folder that is not there (a typo finds nothing, silently)."""
    env = [p for p in os.environ.get("KPLAY_PATH", "").split(os.pathsep) if p]
    return [f"{'--path' if p in (extra or []) else 'KPLAY_PATH'} {p}: no such folder" for p in [*(extra or []), *env]
            if not Path(p).expanduser().is_dir()]
