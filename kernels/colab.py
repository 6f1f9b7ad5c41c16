"""Colab: the link that opens a notebook there, and the set-up that the notebook's first code cell runs.

Colab opens a notebook straight from GitHub, without the rest of the repository. So every lesson and solution
notebook starts with a link (`link`) and a first code cell (`first_cell`) that does nothing anywhere else; on Colab
it clones the repository into CHECKOUT, at REF, the branch or tag that the link itself names (the notebook cannot
tell which commit it was opened from, so the link and the clone name the same ref), puts the clone on sys.path and
calls `setup`: that installs what the lessons need and Colab lacks (never torch: Colab's own is built for its GPU
and driver), changes into the notebook's folder so that its relative paths work, and says which backend runs the
kernels.

REPOSITORY is the one place that names the repository's GitHub address, and REF the ref. After changing either,
`python -m kernels.dev.colab_cells` rewrites the links and first cells of every notebook (tests/test_notebooks.py
fails until it has).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping

from . import backend
from .paths import ROOT

REPOSITORY = "OWNER/cuda-kernels-for-pytorch"  # owner/name on GitHub: set to the repository's public address
REF = "main"  # a branch or a tag (git clone --branch takes no commit hash): the links open it, the first cell clones it
CHECKOUT = "/content/" + REPOSITORY.split("/")[1]  # where the first cell clones it on Colab (its working folder)
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
# Colab's kernel has this module loaded and its runtime sets this variable; either one says "on Colab"
COLAB_MODULE, COLAB_ENV = "google.colab", "COLAB_RELEASE_TAG"
MODULES = ("numpy", "matplotlib")  # imported by the notebooks; pip names them the same (filelock comes with torch)
PROGRAMS = ("ninja",)  # run by torch.utils.cpp_extension for every build; pip's ninja puts it on PATH
KEPT = ("torch", "triton")  # Colab's own, built for its GPU: never installed over (triton comes with torch)

Runner = Callable[..., subprocess.CompletedProcess]


def in_colab(modules: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """True in a Colab runtime: its kernel has google.colab loaded, or its environment names a Colab release."""
    modules = sys.modules if modules is None else modules
    environ = os.environ if environ is None else environ
    return COLAB_MODULE in modules or COLAB_ENV in environ


def link(notebook: str) -> str:
    """The address that opens a notebook (its path in the repository, such as "lessons/01_x/01_x.ipynb") in Colab."""
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{REF}/{notebook}"


def link_cell(notebook: str) -> str:
    """The markdown of a notebook's Colab link: a badge, and what the first code cell does there."""
    return (f"[![Open In Colab]({BADGE})]({link(notebook)}) (in Colab, the first code cell fetches the rest of the "
            f"repository; anywhere else it does nothing)")


def clone_command(checkout: str = CHECKOUT) -> list[str]:
    """The clone the first cell runs on Colab: REF of REPOSITORY, its last commit only."""
    return ["git", "clone", "--quiet", "--depth=1", f"--branch={REF}", f"https://github.com/{REPOSITORY}", checkout]


def first_cell(notebook: str, checkout: str = CHECKOUT) -> str:
    """The source of a notebook's first code cell: on Colab only, clone the repository once, then `setup`."""
    *options, url, _ = clone_command(checkout)
    quoted = ", ".join(f'"{o}"' for o in options)
    return "\n".join([
        "# On Colab only (anywhere else this cell does nothing): fetch the repository, then kernels/colab.py's setup",
        "import os, sys",
        f'if "{COLAB_MODULE}" in sys.modules or "{COLAB_ENV}" in os.environ:',
        f'    checkout = "{checkout}"',
        '    if not os.path.isfile(checkout + "/kernels/colab.py"):  # the first run: the ref this notebook\'s link names',
        "        import subprocess",
        f"        clone = subprocess.run([{quoted},",
        f'                                "{url}", checkout],',
        '                               capture_output=True, text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})',
        "        if clone.returncode:",
        '            raise RuntimeError("git clone failed: " + clone.stderr)',
        "    if checkout not in sys.path:",
        "        sys.path.insert(0, checkout)",
        "    from kernels.colab import setup",
        f'    setup("{notebook.rsplit("/", 1)[0]}")  # install what Colab lacks (never torch), cd here, say which backend',

    ])


def missing(find_module: Callable[[str], object] | None = None,
            find_program: Callable[[str], str | None] | None = None) -> list[str]:
    """The pip names of what the lessons need and this Python lacks (MODULES not importable, PROGRAMS not on PATH)."""
    find_module = find_module or importlib.util.find_spec
    find_program = find_program or shutil.which
    return [m for m in MODULES if find_module(m) is None] + [p for p in PROGRAMS if find_program(p) is None]


def install_command(packages: list[str]) -> list[str]:
    """pip install of the named packages into this Python; torch (or triton) is refused, never replaced."""
    kept = [p for p in packages if p.lower() in KEPT]
    if kept:
        raise ValueError(f"{', '.join(kept)}: Colab's own build is kept, never installed over (asked to install "
                         f"{', '.join(packages)})")
    return [sys.executable, "-m", "pip", "install", "--quiet", *packages]


def gpu_description() -> str:
    """The GPU PyTorch sees: its name and compute capability."""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return f"{torch.cuda.get_device_name(0)}, compute capability {major}.{minor}"


def nvcc_found() -> bool:
    """True when the cuda backend's builds can find nvcc."""
    from .build.toolchain import find_cuda_tool

    return find_cuda_tool("nvcc") is not None


def say(text: str) -> None:
    """Every line the set-up prints."""
    print(text, flush=True)


def setup(folder: str, run: Runner | None = None) -> str:
    """Colab's side of a notebook's first cell: install what is missing (never torch), change into `folder` (a path
    in the repository, such as "lessons/01_thread_model"), say which backend runs the kernels and return it.
    Every command goes through `run` (subprocess.run's signature). Run again, it installs nothing more and ends in
    the same folder with the same backend."""
    run = run or subprocess.run
    if not in_colab():
        raise RuntimeError("kernels.colab.setup sets up a Colab runtime; anywhere else `make setup` does (README.md)")
    if importlib.util.find_spec("torch") is None:
        raise RuntimeError("this runtime has no torch: the lessons use the torch that Colab provides, built for its "
                           "GPU, and never install one (choose one of Colab's standard runtimes)")
    here = ROOT / folder
    if not here.is_dir():
        raise FileNotFoundError(f"no folder {folder} in {ROOT}: expected a lesson's or a solution's folder")
    head = run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    commit = f", commit {head.stdout.strip()}" if head.returncode == 0 and head.stdout.strip() else ""
    say(f"repository: {REPOSITORY} at {REF}{commit}, in {ROOT}")
    gone = missing()
    if gone:
        done = run(install_command(gone), capture_output=True, text=True)
        if done.returncode:
            said = ((done.stdout or "") + (done.stderr or "")).strip()
            raise RuntimeError(f"pip install {' '.join(gone)} failed:\n{said}")
        importlib.invalidate_caches()  # so that this kernel imports what was just installed
        say(f"installed {', '.join(gone)} (torch stays Colab's own)")
    os.chdir(here)
    chosen = backend.resolve()
    if chosen == "cuda":
        say(f"backend: {backend.reason()}: {gpu_description()}")
        if not nvcc_found():
            say(f'  no nvcc found, so the cuda backend cannot build kernels: os.environ["{backend.ENV}"] = "sim" '
                "in a cell of its own runs them on the simulator (python -m kernels.tools.doctor says more)")
    else:
        say(f"backend: {backend.reason()}. For a GPU: Runtime > Change runtime type, then run the notebook again "
            "from the top")
    return chosen
