"""The house's shape, from the source (nothing is imported): rooms in layers, arrows only downward, no circle,
at most 7 floors of modules, no private name taken across modules, no import hidden in a code string."""

import ast
import re
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

ENGINE = ROOT / "playground"
# The rooms from the ground up: a module may import from its own room or one below it, never above.
ROOMS = ["core", "family", "compiler", "run", "child", "report", "insight", "workshop", "pool", "engine", "cli", "notebook"]
MAX_FLOORS = 7


def modules() -> dict[str, Path]:
    """{dotted name: path} of every engine module; a package's __main__ is how Python runs it, never imported."""
    found = {}
    for path in ENGINE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "templates" in parts or parts[-1] == "__main__":
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def arrows(mods: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the engine modules it imports anywhere in its file}; an import under `if TYPE_CHECKING:` is a
    type named in a signature, not an arrow (nothing runs it)."""
    graph = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(n) for branch in ast.walk(tree) if isinstance(branch, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(branch.test) for n in ast.walk(branch)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    whole = f"{base}.{alias.name}"
                    found |= {whole} if whole in mods else {base} if base in mods else set()
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in mods}
        graph[name] = found - {name}
    return graph


def faces(mods: dict[str, Path]) -> set[str]:
    """A package's __init__ that defines nothing: it hands names on, and its arrows are not floors."""
    return {name for name, path in mods.items() if path.name == "__init__.py"
            and not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.parse(path.read_text()).body)}


def room(module: str) -> str:
    """A module's room: its package, or its own name at the top (engine.py, notebook.py)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "engine"  # playground/__init__ hands the engine's names on


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the path around it, or None."""
    state: dict[str, str] = {}

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep, path + [dep])):
                return found
        state[node] = "done"
        return None

    return next((found for node in sorted(graph) if node not in state and (found := visit(node, [node]))), None)


def floors(graph: dict[str, set[str]], skip: set[str]) -> dict[str, int]:
    """Each module's floor: 1 + the highest it imports (faces are passed through, not counted)."""
    memo: dict[str, int] = {}

    def floor(m: str) -> int:
        if m not in memo:
            below = [floor(d) for d in graph[m] if d not in skip]
            memo[m] = 1 + max(below, default=0)
        return memo[m]

    return {m: floor(m) for m in graph if m not in skip}


def test_no_import_circle():
    found = circle(arrows(modules()))
    assert found is None, " -> ".join(found)


def test_the_circle_finder_finds_one():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None


def test_arrows_only_run_down_the_rooms():
    up = [f"{m} -> {d}" for m, deps in arrows(modules()).items() for d in deps
          if ROOMS.index(room(d)) > ROOMS.index(room(m)) and m != "playground"]
    assert not up, "\n".join(up)


def test_at_most_seven_floors():
    mods = modules()
    measured = floors(arrows(mods), faces(mods))
    high = sorted((f, m) for m, f in measured.items() if f > MAX_FLOORS)
    assert not high, high
    assert max(measured.values()) >= 5  # the measure sees the layers (a broken reader would find 1)


def test_an_upward_arrow_is_found():
    assert ROOMS.index(room("playground.run.runner")) < ROOMS.index(room("playground.child.spawn"))


def test_no_private_name_is_imported_across_modules():
    taken = [f"{path.relative_to(ROOT)}: {a.name}" for path in modules().values()
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)
             for a in node.names if a.name.startswith("_") and a.name != "__future__" and node.module != "__future__"]
    assert not taken, taken


def test_no_import_from_a_code_string():
    """An import inside a string run by `python -c` or exec is an arrow no reader sees."""
    hidden = [str(path.relative_to(ROOT)) for path in modules().values()
              if re.search(r'executable, "-c"|\bexec\(', path.read_text())]
    assert not hidden, hidden


def test_each_engine_module_names_its_job_in_its_first_line():
    for name, path in modules().items():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert path.name == "__init__.py" and not path.read_text().strip() or doc and doc.splitlines()[0].strip(), \
            f"{name} has no docstring saying what it owns"


def test_the_cli_declares_and_renders_in_at_most_650_lines():
    lines = sum(len(p.read_text().splitlines()) for p in (ENGINE / "cli").glob("*.py"))
    assert lines <= 650, lines


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package(tmp_path):
    """site-packages gets playground (the snippets inside it) and the kplay script, nothing named cli or snippets."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.startswith("kplay-")} == {"playground"}
    assert "playground/snippets/sum/task.toml" in names and "playground/snippets/linear/spec.py" in names
    assert "kplay = playground.cli.app:app" in zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))).decode()
