"""`make lessons`: build every lesson's kernels and execute every lesson notebook headlessly (`make lessons
SOLUTIONS=1`: the solution notebooks too; they ship executed, and make test-all runs them under nbval).

Executed copies (with their outputs and plots) go to build/executed/, never over your notebooks. On the simulator
the notebooks run side by side, one per core (at most MAX_JOBS; `--jobs N` to choose), each in its own process
whose PyTorch gets its share of the cores, the later (longer) lessons first; kernels that several notebooks build
are built once, in the build cache. On a GPU they run one at a time, so that the timings they print are not shared.

For maintainers: `python -m kernels.dev.run_notebooks --refresh solutions/NN_topic/...ipynb` executes
a solution notebook on the simulator and writes its outputs back into it (the outputs that nbval
compares in `make test-all`). Run it after changing anything a solution notebook prints.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from .. import backend
from ..backend import reason
from ..paths import ROOT

OUT = ROOT / "build" / "executed"
MAX_JOBS = 4  # each notebook's kernel holds its own torch and builds: memory, not cores, limits a large machine
NEXT_STEPS = """
Next: learn by running them yourself.
  make lab                  opens JupyterLab in your browser on lessons/01_thread_model/01_thread_model.ipynb:
  read and run it cell by cell (Shift+Enter); its exercise is scale.cu, next to it, marked FILL ME IN.
  make check LESSON=01      checks your exercise from a terminal (make hint LESSON=01 N=1 for a hint)
The executed copies of every notebook, with their outputs, are in build/executed/."""


def notebooks(folders: list[str]) -> list[Path]:
    found = []
    for folder in folders:
        found += sorted(p for p in (ROOT / folder).glob("*/*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return found


def heaviest_first(nbs: list[Path]) -> list[Path]:
    """The order make lessons runs them in: later lessons first (they simulate and build more, so a long one
    never starts last, while the other cores sit idle), folder by folder, so that a lesson's notebook and its
    solution, which build the same kernels, rarely run at the same time (one would wait for the other's build)."""
    folders = list(dict.fromkeys(nb.parent.parent for nb in nbs))
    return [nb for folder in folders for nb in sorted((n for n in nbs if n.parent.parent == folder),
                                                      key=lambda n: n.parent.name, reverse=True)]


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


def run_in_process(nb: Path, env: dict[str, str]) -> tuple[bool, str]:
    """run(nb) in a process of its own (`--one`), with this environment."""
    done = subprocess.run([sys.executable, "-m", "kernels.dev.run_notebooks", "--one", str(nb)], env=env, cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = done.stdout.strip().splitlines()
    return done.returncode == 0, lines[-1] if lines else f"exit {done.returncode}"


def run_side_by_side(nbs: list[Path], jobs: int) -> list[Path]:
    """Execute the notebooks, `jobs` at a time, each by a worker process (`--one`); print one line per notebook
    as it finishes. Returns the ones that failed."""
    from .all_tests import lane_env

    env = os.environ | lane_env(os.cpu_count() or 1, jobs)  # the kernels inherit it: PyTorch's threads per process
    queue = list(enumerate(nbs, 1))
    failed: list[Path] = []
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                i, nb = queue.pop(0)
            t0 = time.perf_counter()
            ok, msg = run_in_process(nb, env)
            with lock:
                print(f"[{i}/{len(nbs)}] {nb.relative_to(ROOT)} {'ok' if ok else 'FAILED'} "
                      f"({time.perf_counter() - t0:.0f} s)" + ("" if ok else f": {msg}"), flush=True)
                if not ok:
                    failed.append(nb.relative_to(ROOT))

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed


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
    p.add_argument("--jobs", type=int, help=f"notebooks at a time (default: one per core, at most {MAX_JOBS}, on the "
                                            "simulator; one at a time on a GPU, whose timings they print)")
    p.add_argument("--one", metavar="NOTEBOOK", help=argparse.SUPPRESS)  # a worker of run_side_by_side
    p.add_argument("folders", nargs="*", help="folders of notebooks (default: lessons)")
    a = p.parse_args(argv)
    if a.refresh:
        return refresh(a.refresh)
    if a.one:
        ok, msg = run(Path(a.one).resolve())
        print(msg)
        return 0 if ok else 1
    folders = a.folders or ["lessons"]
    nbs = notebooks(folders)
    jobs = a.jobs or (1 if backend.resolve() == "cuda" else min(os.cpu_count() or 1, MAX_JOBS))
    jobs = max(1, min(jobs, len(nbs)))
    print(f"backend: {reason()}")
    print(f"running {len(nbs)} notebooks, {jobs} at a time; executed copies go to {OUT.relative_to(ROOT)}/")
    t_all = time.perf_counter()
    failed = run_side_by_side(nbs if jobs == 1 else heaviest_first(nbs), jobs)
    if failed:
        print("failed:", *failed, sep="\n  ")
        return 1
    print(f"all notebooks ran ({time.perf_counter() - t_all:.0f} s)")
    print(NEXT_STEPS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
