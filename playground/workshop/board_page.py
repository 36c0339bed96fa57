"""board.html: the class board as one self-contained page (inline CSS, an inline SVG chart, no script, no fetch)."""

from __future__ import annotations

import math
from datetime import datetime
from html import escape

from .board import GENERATOR, Entry, Ranked, common_failures

CSS = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d8dee4; --band: #f6f8fa;
        --pass: #1a7f37; --part: #b58400; --fail: #cf222e; --ref: #59636e; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 960px; margin: 0 auto; padding: 32px 24px 48px; }
h1 { font-size: 28px; margin: 0; }
h2 { font: 600 20px/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; margin: 0; }
.meta, .sub, footer, figcaption { color: var(--muted); }
.meta { margin: 2px 0 28px; }
.sub { margin: 2px 0 12px; }
section { margin: 0 0 44px; }
table { width: 100%; border-collapse: collapse; table-layout: fixed; }
th, td { padding: 7px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: middle;
         overflow-wrap: anywhere; }
th { font-size: 13px; font-weight: 600; color: var(--muted); border-bottom: 2px solid var(--line); }
tbody tr:nth-child(even) { background: var(--band); }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.who { font-weight: 600; }
.cases { display: flex; align-items: center; gap: 10px; font-variant-numeric: tabular-nums; }
.meter { flex: 0 0 110px; height: 8px; border-radius: 4px; background: var(--line); overflow: hidden; }
.meter > span { display: block; height: 100%; }
.pass .meter > span, .bar.pass { background: var(--pass); fill: var(--pass); }
.part .meter > span, .bar.part { background: var(--part); fill: var(--part); }
.fail .meter > span, .bar.fail { background: var(--fail); fill: var(--fail); }
.none { color: var(--muted); }
figure { margin: 20px 0 0; }
figcaption { font-size: 13px; margin: 0 0 6px; }
svg { display: block; width: 100%; height: auto; }
svg text { font: 13px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: var(--ink); }
svg .tick text, svg text.none { fill: var(--muted); }
svg .tick line { stroke: var(--line); }
svg .ref { stroke: var(--ref); stroke-dasharray: 4 3; }
footer { border-top: 1px solid var(--line); padding-top: 12px; font-size: 13px; }
"""

# The chart's geometry, in the SVG's own units (it scales to the page's width).
WIDTH, LABEL, RIGHT, ROW, BAR_H, TOP, AXIS = 900, 190, 90, 30, 18, 26, 28
NAME_CHARS = 24  # longer names are cut in the chart (the table has them whole)


def page(groups: list[Ranked]) -> str:
    students = sum(len(g.rows) for g in groups)
    exercises = f"{len(groups)} exercise{'s' * (len(groups) != 1)}"
    when = datetime.now().strftime("%Y-%m-%d %H:%M")
    body = "\n".join(section(g) for g in groups)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
{GENERATOR}
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Class board · kplay</title>
<style>{CSS}</style>
</head>
<body>
<main>
<h1>Class board</h1>
<p class="meta">{students} student{'s' * (students != 1)} · {exercises} · {when}</p>
{body}
{footer(groups)}
</main>
</body>
</html>
"""


def section(g: Ranked) -> str:
    """One exercise: its heading, the ranked table, the chart."""
    done = sum(e.complete for _, e in g.rows)
    versus = f" · speedup over {escape(g.baseline)}" if g.timed and g.baseline else ""
    return (f'<section>\n<h2>{escape(g.exercise)}</h2>\n'
            f'<p class="sub">{len(g.rows)} student{"s" * (len(g.rows) != 1)} · {done} passed every case{versus}</p>\n'
            f"{rows_table(g)}\n{chart(g)}\n</section>")


def rows_table(g: Ranked) -> str:
    widths = ["8%", "30%", "28%", *(["14%"] if g.timed else []), "auto"]
    head = ['<th class="num">#</th>', "<th>student</th>", "<th>cases passed</th>",
            *([f'<th class="num">{escape("×" + g.baseline if g.baseline else "speedup")}</th>'] if g.timed else []),
            "<th>failures</th>"]
    body = []
    for k, e in g.rows:
        speed = [f'<td class="num">{_speedup(e)}</td>'] if g.timed else []
        fails = escape(e.said) or '<span class="none">none</span>'
        body.append(f'<tr class="{_state(e)}"><td class="num">{k}</td><td class="who">{escape(e.student)}</td>'
                    f"<td>{_meter(e)}</td>{''.join(speed)}<td>{fails}</td></tr>")
    cols = "".join(f'<col style="width:{w}">' for w in widths)
    return (f"<table>\n<colgroup>{cols}</colgroup>\n<thead><tr>{''.join(head)}</tr></thead>\n"
            f"<tbody>\n" + "\n".join(body) + "\n</tbody>\n</table>")


def _state(e: Entry) -> str:
    return "pass" if e.complete else "fail" if e.passed == 0 else "part"


def _speedup(e: Entry) -> str:
    return f"{e.speedup:.2f}×" if e.speedup is not None else '<span class="none">-</span>'


def _meter(e: Entry) -> str:
    share = 100 * e.passed / e.checked if e.checked else 0
    return (f'<div class="cases"><div class="meter"><span style="width:{share:.0f}%"></span></div>'
            f"<span>{e.passed}/{e.checked}</span></div>")


def footer(groups: list[Ranked]) -> str:
    common = common_failures(groups)
    students = sum(len(g.rows) for g in groups)
    said = ", ".join(f"{escape(kind)} {n}" for kind, n in common)
    across = f"<p>Students with each failure: {said} (of {students}).</p>" if common else ""
    return (f"<footer>{across}<p>Ranked by cases passed, then by speedup over the reference; ties (within the noise) share a rank. "
            "Made by <code>kplay board</code> from <code>kplay check --json</code> records.</p></footer>")


# ---- the chart: one horizontal bar per student -------------------------------------------------------------

def chart(g: Ranked) -> str:
    """Speedups where the exercise was timed (1× dashed: as fast as the reference), else cases passed."""
    value, top, label, caption = _metric(g)
    height = TOP + ROW * len(g.rows) + AXIS
    scale = (WIDTH - LABEL - RIGHT) / top
    parts = [_axis(top, scale, height, suffix="×" if g.timed else "")]
    if g.timed:
        x = LABEL + scale
        parts.append(f'<line class="ref" x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{height - AXIS}"/>'
                     f'<text x="{x:.1f}" y="{TOP - 10}" text-anchor="middle">{escape(_ref(g))}</text>')
    for i, (_, e) in enumerate(g.rows):
        parts.append(_bar(e, value(e), scale, TOP + ROW * i, label))
    svg = (f'<svg viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(caption)}">'
           + "".join(parts) + "</svg>")
    return f"<figure><figcaption>{escape(caption)}</figcaption>{svg}</figure>"


def _metric(g: Ranked):
    """(value of an entry or None, the axis's top, a value's label, the caption)."""
    if g.timed:
        top = _nice(max(1.0, *(e.speedup for _, e in g.rows if e.speedup is not None)) * 1.08)
        return (lambda e: e.speedup), top, (lambda v: f"{v:.2f}×"), \
            f"Speedup over {g.baseline or 'the reference'}, per student (longer is faster)"
    top = max([1] + [e.checked for _, e in g.rows])
    return (lambda e: e.passed), top, (lambda v: f"{v:g}"), "Cases passed, per student"


def _ref(g: Ranked) -> str:
    return f"1× = {g.baseline}" if g.baseline else "1×"


def _bar(e: Entry, v, scale: float, y: int, label) -> str:
    """A row: the student's name, the bar, its value; no bar (and why) where there is no value."""
    name = e.student if len(e.student) <= NAME_CHARS else e.student[:NAME_CHARS - 1] + "…"
    cy = y + ROW / 2 + 4.5
    row = (f'<text x="{LABEL - 10}" y="{cy:.1f}" text-anchor="end"><title>{escape(e.student)}</title>'
           f"{escape(name)}</text>")
    if not v:
        why = (e.said or "no case ran" if not e.passed and (e.what or not e.checked) else
               "no case passed" if not e.passed else f"not timed: {e.passed}/{e.checked} cases passed")
        return row + f'<text class="none" x="{LABEL + 6}" y="{cy:.1f}">{escape(why)}</text>'
    w = max(2.0, v * scale)
    state = _state(e) if e.speedup is None else "pass" if v >= 1 else "part"
    return (row + f'<rect class="bar {state}" x="{LABEL}" y="{y + (ROW - BAR_H) / 2:.1f}" width="{w:.1f}" '
            f'height="{BAR_H}" rx="3"><title>{escape(e.student)}: {escape(label(v))}</title></rect>'
            f'<text x="{LABEL + w + 6:.1f}" y="{cy:.1f}">{escape(label(v))}</text>')


def _axis(top: float, scale: float, height: int, suffix: str) -> str:
    """Grid lines and their values along the bottom: 0×, 0.5×, 1× ... or whole numbers of cases."""
    out = ['<g class="tick">']
    for t in _ticks(top, whole=not suffix):
        x = LABEL + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{height - AXIS + 4}"/>'
                   f'<text x="{x:.1f}" y="{height - 8}" text-anchor="middle">{t:g}{suffix}</text>')
    return "".join(out) + "</g>"


def _step(top: float) -> float:
    """A round step giving at most 6 intervals up to top: 0.25, 0.5, 1, 2, 2.5, 5, ..."""
    base = 10 ** math.floor(math.log10(top / 6))
    return next(base * m for m in (1, 2, 2.5, 5, 10) if top / (base * m) <= 6)


def _ticks(top: float, whole: bool = False) -> list[float]:
    step = max(1, _step(top)) if whole else _step(top)
    return [round(k * step, 10) for k in range(int(top / step + 1e-9) + 1)]


def _nice(top: float) -> float:
    """The axis's end: top rounded up to a whole step."""
    step = _step(top)
    return math.ceil(top / step - 1e-9) * step
