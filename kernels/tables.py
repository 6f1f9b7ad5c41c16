"""Text tables: columns as wide as their widest cell, as plain text (the profiler's access tables, ptxas's
resources, the performance bars, the test runner's summary) or as markdown (the README's results)."""
from __future__ import annotations

from typing import Iterable, Sequence


def text_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "", rule: bool = False,
               sep: str = "  ") -> str:
    """A plain-text table. `align` has a letter per column, "l" (left) or "r" (right); by default the first
    column is left-aligned and the rest right-aligned. `rule` puts a line of dashes under the header."""
    body = [[str(c) for c in r] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body)]
    align = align or "l" + "r" * (len(header) - 1)

    def line(cells: Sequence[str]) -> str:
        return sep.join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    lines = [line(header)]
    if rule:
        lines.append(sep.join("-" * w for w in widths))
    return "\n".join(lines + [line(r) for r in body])


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> str:
    """A markdown table; `align` as for text_table ("r" columns get `---:`)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])
