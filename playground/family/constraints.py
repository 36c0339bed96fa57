"""A variant's constraints: rules over its parameters that task.toml states and kplay checks before any build.

    constraints = [{ rule = "block * block / thread_m <= 1024", why = "at most 1024 threads per block" }]

A rule is a small expression, parsed with `ast` and walked here, never eval'd: parameter names, whole numbers,
+ - * / // % (/ divides whole numbers as C++ does), comparisons, and, or, not, parentheses.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field

KEYS = {"rule": "a string", "why": "a string"}


def _div(a: int, b: int) -> int:
    """a / b as C++ divides ints: toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _div,
              ast.FloorDiv: _div, ast.Mod: operator.mod}
COMPARISONS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
               ast.Eq: operator.eq, ast.NotEq: operator.ne}
NEGATED = {ast.Lt: ">=", ast.LtE: ">", ast.Gt: "<=", ast.GtE: "<", ast.Eq: "!=", ast.NotEq: "=="}
NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Compare,
         ast.Name, ast.Load, ast.Constant, *ARITHMETIC, *COMPARISONS)


@dataclass(frozen=True)
class Constraint:
    rule: str
    why: str
    tree: ast.Expression = field(compare=False, repr=False)

    def holds(self, params: dict) -> bool:
        return _holds(self.tree.body, params)

    def refusal(self, params: dict) -> str:
        """'block=128, thread_m=4: at most 1024 threads per block (block * block / thread_m = 4,096 > 1024)': of a
        rule of several parts joined by `and`, the part that fails, with the value that breaks it."""
        node = self.tree.body
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            node = next(v for v in node.values if not _holds(v, params))
        names = dict.fromkeys(n.id for n in sorted(_names(node), key=lambda n: n.col_offset))
        given = ", ".join(f"{n}={params[n]}" for n in names)
        return f"{given}: {self.why} ({self._broken(node, params)})"

    def _broken(self, node: ast.AST, params: dict) -> str:
        """'block * block / thread_m = 4,096 > 1024' for a comparison, else 'the part is false'."""
        text = ast.get_source_segment(self.rule, node)
        if not isinstance(node, ast.Compare) or len(node.ops) > 1 or isinstance(node.left, ast.Constant):
            return f"{text} is false"
        try:
            left = f"{_value(node.left, params):,}"
        except ZeroDivisionError:
            left = "a division by zero"
        return (f"{ast.get_source_segment(self.rule, node.left)} = {left} {NEGATED[type(node.ops[0])]} "
                f"{ast.get_source_segment(self.rule, node.comparators[0])}")


def _names(node: ast.AST) -> list[ast.Name]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Name)]


def _holds(node: ast.AST, params: dict) -> bool:
    try:
        return bool(_value(node, params))
    except ZeroDivisionError:
        return False


def parse(raw: dict, known) -> Constraint:
    """One `{ rule, why }` table; a rule that is not of the language, or names an unknown parameter, is a ValueError."""
    rule = raw["rule"].strip()
    try:
        tree = ast.parse(rule, mode="eval")
    except SyntaxError:
        raise ValueError(f"rule {rule!r} is not an expression") from None
    for node in ast.walk(tree):
        if not isinstance(node, NODES) or isinstance(node, ast.Constant) and type(node.value) is not int:
            what = repr(node.value) if isinstance(node, ast.Constant) else (
                ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__)
            raise ValueError(f"rule {rule!r}: {what} is not allowed (names, whole numbers, + - * / // %, "
                             "comparisons, and, or, not)")
        if isinstance(node, ast.Name) and node.id not in known:
            raise ValueError(f"rule {rule!r} names '{node.id}', which is not a parameter (known: {', '.join(known)})")
    return Constraint(rule, raw.get("why", ""), tree)


def _value(node: ast.AST, params: dict):
    """The value of a checked tree: every node is one of NODES."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return params[node.id]
    if isinstance(node, ast.BinOp):
        return ARITHMETIC[type(node.op)](_value(node.left, params), _value(node.right, params))
    if isinstance(node, ast.UnaryOp):
        value = _value(node.operand, params)
        return not value if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.BoolOp):
        values = (_value(v, params) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    left = _value(node.left, params)  # a Compare: a < b <= c chains as Python's does
    for op, right_node in zip(node.ops, node.comparators):
        right = _value(right_node, params)
        if not COMPARISONS[type(op)](left, right):
            return False
        left = right
    return True
