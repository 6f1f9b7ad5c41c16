"""Every lesson and solution notebook's Colab link and first code cell, written from kernels/colab.py.

    python -m kernels.dev.colab_cells           write them (after changing colab.REPOSITORY or colab.REF)
    python -m kernels.dev.colab_cells --check   only say which files are out of date (exit status 1 if any)

The link is a markdown cell at the top, the set-up the first code cell; both are found by their cell ids, so a
second run replaces them instead of adding more. Nothing else in a notebook changes: it is written back as nbformat
writes it (one-space indent, keys as they were, a final newline). A solution notebook is stored executed, so its
set-up cell gets an execution count and no output (outside Colab the cell prints nothing); a lesson's has neither.
The README's Colab links are rewritten to the same repository and ref.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from .. import colab
from ..paths import LESSONS, ROOT, SOLUTIONS

LINK_ID, SETUP_ID = "colab-link", "colab-setup"
README = ROOT / "README.md"
# a Colab link to a notebook of this repository, up to the notebook's path (a ref may hold slashes)
COLAB_LINK = re.compile(r"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/\S+?/(?=(lessons|solutions)/)")


def notebooks() -> list[Path]:
    """lessons/NN_topic/NN_topic.ipynb and solutions/NN_topic/NN_topic.ipynb, in order."""
    return [folder / f"{folder.name}.ipynb" for top in (LESSONS, SOLUTIONS)
            for folder in sorted(top.iterdir()) if folder.name[:2].isdigit() and (folder / f"{folder.name}.ipynb").is_file()]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def with_colab_cells(nb: dict, notebook: str, executed: bool) -> dict:
    """The notebook (its path in the repository) with the Colab link as its first cell and the set-up as its first
    code cell, replacing any earlier ones; `executed` for a notebook stored with outputs (a solution)."""
    cells = [c for c in nb["cells"] if c.get("id") not in (LINK_ID, SETUP_ID)]
    first_code = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), len(cells))
    setup = {"cell_type": "code", "execution_count": 1 if executed else None, "id": SETUP_ID, "metadata": {},
             "outputs": [], "source": _lines(colab.first_cell(notebook))}
    link = {"cell_type": "markdown", "id": LINK_ID, "metadata": {}, "source": _lines(colab.link_cell(notebook))}
    return {**nb, "cells": [link, *cells[:first_code], setup, *cells[first_code:]]}


def render(path: Path) -> tuple[str, str]:
    """A notebook's text (or the README's) as it is and as it should be."""
    text = path.read_text(encoding="utf-8")
    if path == README:
        return text, COLAB_LINK.sub(colab.link(""), text)
    notebook = path.relative_to(ROOT).as_posix()
    new = with_colab_cells(json.loads(text), notebook, executed=path.is_relative_to(SOLUTIONS))
    return text, json.dumps(new, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.dev.colab_cells",
                                description="Write every notebook's Colab link and first code cell from kernels/colab.py.")
    p.add_argument("--check", action="store_true", help="write nothing; list the notebooks that are out of date")
    a = p.parse_args(argv)
    stale = []
    for path in [*notebooks(), README]:
        old, new = render(path)
        if old != new:
            stale.append(path.relative_to(ROOT).as_posix())
            if not a.check:
                path.write_text(new, encoding="utf-8")
    verb = "out of date" if a.check else "written"
    print(f"{len(stale)} file(s) {verb}" + "".join(f"\n  {s}" for s in stale))
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
