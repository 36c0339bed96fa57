"""The engine's shape: no import circle (imports inside functions included), each module says what it owns."""

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "playground"


def imports() -> dict[str, set[str]]:
    """{module: the engine modules it imports anywhere in its file}, from the source (nothing is imported)."""
    names = {p.stem for p in ENGINE.glob("*.py")}
    graph = {}
    for path in ENGINE.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        graph[path.stem] = found & names - {path.stem, "__init__"}
    return graph


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


def test_the_engine_has_no_import_circle():
    assert circle(imports()) is None, " -> ".join(circle(imports()))


def test_the_circle_finder_finds_one():
    assert circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle({"a": {"b"}, "b": set()}) is None


def test_each_engine_module_names_its_job_in_its_first_line():
    for path in sorted(ENGINE.glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and doc.splitlines()[0].strip(), f"{path.name} has no docstring saying what it owns"
