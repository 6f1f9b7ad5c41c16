"""`make lessons`: build every lesson's kernels and execute every notebook headlessly.

Executed copies (with their outputs and plots) go to build/executed/, never over your notebooks.

For maintainers: `python -m kernels.dev.run_notebooks --refresh solutions/NN_topic/...ipynb` executes
a solution notebook on the simulator and writes its outputs back into it (the outputs that nbval
compares in `make test-all`). Run it after changing anything a solution notebook prints.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .. import backend
from ..backend import reason
from ..paths import ROOT

OUT = ROOT / "build" / "executed"
NEXT_STEPS = """
Next: learn by running them yourself.
  make lab                  opens JupyterLab in your browser, on the lessons/ folder
  then open 01_thread_model/01_thread_model.ipynb and read and run it cell by cell
  (Shift+Enter); its exercise is scale.cu, next to it, marked FILL ME IN.
  make check LESSON=01      checks your exercise from a terminal (make hint LESSON=01 N=1 for a hint)
The executed copies of every notebook, with their outputs, are in build/executed/."""


def notebooks(folders: list[str]) -> list[Path]:
    found = []
    for folder in folders:
        found += sorted(p for p in (ROOT / folder).glob("*/*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return found


def run(nb_path: Path, timeout: int = 1800, in_place: bool = False) -> tuple[bool, str]:
    """Execute one notebook in its own folder; write the executed copy under build/executed
    (or, with in_place, back over the notebook, without the timestamps of each cell)."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(nb_path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no transport notice
                            resources={"metadata": {"path": str(nb_path.parent)}})
    ok, msg = True, ""
    try:
        client.execute()
    except CellExecutionError as e:
        ok, msg = False, str(e).strip().splitlines()[-1] if str(e).strip() else "a cell failed"
    if in_place:
        if not ok:
            return ok, msg  # never write a half-executed notebook over a good one
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        nbformat.write(nb, nb_path)
        return ok, msg
    out = OUT / nb_path.relative_to(ROOT)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return ok, msg


def refresh(paths: list[str]) -> int:
    """Re-execute solution notebooks on the simulator and store their outputs in them."""
    import os

    os.environ[backend.ENV] = "sim"  # the committed outputs are the simulator's (CI has no GPU)
    failed = 0
    for path in map(Path, paths):
        nb = path.resolve()
        if nb.suffix != ".ipynb" or not nb.is_file() or not nb.is_relative_to(ROOT / "solutions"):
            print(f"{path}: not a notebook under solutions/ (lesson notebooks ship without outputs)")
            failed += 1
            continue
        t0 = time.perf_counter()
        ok, msg = run(nb, in_place=True)
        print(f"{nb.relative_to(ROOT)} {'refreshed' if ok else 'FAILED, left as it was'} "
              f"({time.perf_counter() - t0:.0f} s){'' if ok else ': ' + msg}", flush=True)
        failed += not ok
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.dev.run_notebooks [FOLDER ...]` (make lessons), or `--refresh NOTEBOOK ...`."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m kernels.dev.run_notebooks",
                                description="Execute every notebook of the folders headlessly (copies in "
                                            "build/executed/), or re-execute solution notebooks in place.")
    p.add_argument("--refresh", nargs="+", metavar="NOTEBOOK",
                   help="solution notebooks to execute on the simulator, their outputs stored in them")
    p.add_argument("folders", nargs="*", help="folders of notebooks (default: lessons solutions)")
    a = p.parse_args(argv)
    if a.refresh:
        return refresh(a.refresh)
    folders = a.folders or ["lessons", "solutions"]
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
    print(NEXT_STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
