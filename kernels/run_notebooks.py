"""`make lessons`: build every lesson's kernels and execute every notebook headlessly.

Executed copies (with their outputs and plots) go to build/executed/, never over your notebooks.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .backend import reason
from .build import ROOT

OUT = ROOT / "build" / "executed"


def notebooks(folders: list[str]) -> list[Path]:
    found = []
    for folder in folders:
        found += sorted(p for p in (ROOT / folder).glob("*/*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return found


def run(nb_path: Path, timeout: int = 1800) -> tuple[bool, str]:
    """Execute one notebook in its own folder; write the executed copy under build/executed."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(nb_path.parent)}})
    ok, msg = True, ""
    try:
        client.execute()
    except CellExecutionError as e:
        ok, msg = False, str(e).strip().splitlines()[-1] if str(e).strip() else "a cell failed"
    out = OUT / nb_path.relative_to(ROOT)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return ok, msg


def main(argv: list[str] | None = None) -> int:
    folders = (sys.argv[1:] if argv is None else argv) or ["lessons", "solutions"]
    nbs = notebooks(folders)
    print(f"backend: {reason()}")
    print(f"running {len(nbs)} notebooks; executed copies go to {OUT.relative_to(ROOT)}/")
    failed = []
    for i, nb in enumerate(nbs, 1):
        rel = nb.relative_to(ROOT)
        print(f"[{i}/{len(nbs)}] {rel} ...", end="", flush=True)
        t0 = time.perf_counter()
        ok, msg = run(nb)
        print(f" {'ok' if ok else 'FAILED'} ({time.perf_counter() - t0:.0f} s)" + ("" if ok else f": {msg}"), flush=True)
        if not ok:
            failed.append(rel)
    if failed:
        print("failed:", *failed, sep="\n  ")
        return 1
    print("all notebooks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
