"""The notebooks' first cell on Colab (kernels/colab.py), run here with Colab faked and every command recorded.

Nothing is cloned or installed: subprocess.run is replaced by a recorder, so the tests can say exactly which
commands the cell would run on Colab, and that outside Colab it runs none and prints nothing.
"""
import importlib.metadata
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kernels import backend, colab
from kernels.paths import ROOT

NOTEBOOK = "lessons/01_thread_model/01_thread_model.ipynb"
FOLDER = ROOT / "lessons" / "01_thread_model"
HEAD = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]


class Recorder:
    """Stands in for subprocess.run: records each command; a clone makes its folder, a pip install its packages."""

    def __init__(self, installed: set[str]):
        self.commands: list[list[str]] = []
        self.environments: list[dict | None] = []
        self.installed = installed

    def __call__(self, command, **kwargs):
        command = list(command)
        self.commands.append(command)
        self.environments.append(kwargs.get("env"))
        if command[:2] == ["git", "clone"]:
            (Path(command[-1]) / "kernels").mkdir(parents=True)
            (Path(command[-1]) / "kernels" / "colab.py").touch()
        if command[1:4] == ["-m", "pip", "install"]:
            self.installed.update(c for c in command[4:] if not c.startswith("-"))
        return subprocess.CompletedProcess(command, 0, "1a2b3c4\n" if command == HEAD else "", "")


@pytest.fixture
def colab_runtime(monkeypatch, tmp_path):
    """A fake Colab: google.colab loaded, ninja not installed, no GPU unless a test says so; commands recorded."""
    monkeypatch.setitem(sys.modules, colab.COLAB_MODULE, types.ModuleType(colab.COLAB_MODULE))
    monkeypatch.delenv(colab.COLAB_ENV, raising=False)
    monkeypatch.delenv(backend.ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    installed = set(colab.MODULES)  # Colab has numpy and matplotlib; ninja is what it lacks here
    monkeypatch.setattr(colab, "missing", lambda: [p for p in (*colab.MODULES, *colab.PROGRAMS) if p not in installed])
    recorder = Recorder(installed)
    monkeypatch.setattr(subprocess, "run", recorder)
    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(colab, "gpu_description", lambda: "Tesla T4, compute capability 7.5")
    monkeypatch.setattr(colab, "nvcc_found", lambda: True)
    return types.SimpleNamespace(recorder=recorder, checkout=str(tmp_path / "content" / "clone"))


def run_cell(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "first cell", "exec"), namespace)
    return namespace


# ---- where it runs

def test_colab_is_recognised_by_its_module_or_its_environment_variable():
    assert colab.in_colab(modules={"google.colab": object()}, environ={})
    assert colab.in_colab(modules={}, environ={"COLAB_RELEASE_TAG": "release-colab_20260101"})
    assert not colab.in_colab(modules={"google": object(), "IPython": object()}, environ={"HOME": "/root"})


def test_outside_colab_the_first_cell_runs_nothing_and_prints_nothing(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, colab.COLAB_MODULE, raising=False)
    monkeypatch.delenv(colab.COLAB_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))

    def refuse(*args, **kwargs):
        raise AssertionError(f"a command ran outside Colab: {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    path_before, cwd_before = list(sys.path), os.getcwd()
    namespace = run_cell(colab.first_cell(NOTEBOOK))
    assert capsys.readouterr() == ("", "")
    assert sys.path == path_before and os.getcwd() == cwd_before
    assert sorted(k for k in namespace if k != "__builtins__") == ["os", "sys"]


@pytest.mark.parametrize("marker", ["module", "environment"])
def test_the_first_cell_recognises_colab_as_in_colab_does(colab_runtime, monkeypatch, marker):
    if marker == "environment":
        monkeypatch.delitem(sys.modules, colab.COLAB_MODULE)
        monkeypatch.setenv(colab.COLAB_ENV, "release-colab_20260101")
    run_cell(colab.first_cell(NOTEBOOK, checkout=colab_runtime.checkout))
    assert colab_runtime.recorder.commands[0] == colab.clone_command(colab_runtime.checkout)


# ---- what it runs on Colab

def test_on_colab_the_first_run_clones_the_ref_of_the_link_installs_what_is_missing_and_opens_the_folder(
        colab_runtime, capsys):
    checkout = colab_runtime.checkout
    run_cell(colab.first_cell(NOTEBOOK, checkout=checkout))
    assert colab_runtime.recorder.commands == [
        ["git", "clone", "--quiet", "--depth=1", f"--branch={colab.REF}", f"https://github.com/{colab.REPOSITORY}",
         checkout],
        HEAD,
        [sys.executable, "-m", "pip", "install", "--quiet", "ninja"],
    ]
    assert colab_runtime.recorder.environments[0]["GIT_TERMINAL_PROMPT"] == "0"  # a wrong address fails, never asks
    assert f"/blob/{colab.REF}/" in colab.link(NOTEBOOK)  # the link opens the ref that the cell clones
    assert sys.path[0] == checkout and Path.cwd() == FOLDER
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"repository: {colab.REPOSITORY} at {colab.REF}, commit 1a2b3c4, in {ROOT}"
    assert out[1] == "installed ninja (torch stays Colab's own)"


def test_running_the_first_cell_again_clones_and_installs_nothing_more(colab_runtime, capsys):
    source = colab.first_cell(NOTEBOOK, checkout=colab_runtime.checkout)
    run_cell(source)
    first = capsys.readouterr().out.splitlines()
    del colab_runtime.recorder.commands[:]
    os.chdir(ROOT)  # the learner may have moved in between
    run_cell(source)
    assert colab_runtime.recorder.commands == [HEAD]
    assert sys.path.count(colab_runtime.checkout) == 1 and Path.cwd() == FOLDER
    again = capsys.readouterr().out.splitlines()
    assert again == [line for line in first if not line.startswith("installed")]


def test_without_a_gpu_the_setup_chooses_the_simulator_and_says_how_to_get_a_gpu(colab_runtime, capsys):
    assert colab.setup("lessons/01_thread_model") == "sim"
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (f"backend: {backend.reason()}. For a GPU: Runtime > Change runtime type, then run the notebook "
                    "again from the top")
    assert last.startswith("backend: sim (PyTorch sees no GPU")


def test_with_a_gpu_the_setup_chooses_cuda_and_names_the_gpu(colab_runtime, monkeypatch, capsys):
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    assert colab.setup("solutions/01_thread_model") == "cuda"
    assert Path.cwd() == ROOT / "solutions" / "01_thread_model"
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "backend: cuda (PyTorch sees a GPU): Tesla T4, compute capability 7.5"


def test_a_gpu_without_nvcc_is_reported_with_the_way_to_the_simulator(colab_runtime, monkeypatch, capsys):
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    monkeypatch.setattr(colab, "nvcc_found", lambda: False)
    colab.setup("lessons/01_thread_model")
    last = capsys.readouterr().out.splitlines()[-1]
    assert "no nvcc found" in last and 'os.environ["KERNELS_BACKEND"] = "sim"' in last


def test_a_failed_install_stops_the_setup_with_pips_words(colab_runtime, monkeypatch):
    def failing(command, **kwargs):
        if "pip" in command:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found for ninja")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", failing)
    with pytest.raises(RuntimeError, match="pip install ninja failed:\nERROR: No matching distribution found for ninja"):
        colab.setup("lessons/01_thread_model")


def test_the_setup_outside_colab_is_refused_before_it_runs_anything(colab_runtime, monkeypatch):
    monkeypatch.delitem(sys.modules, colab.COLAB_MODULE)
    with pytest.raises(RuntimeError, match="sets up a Colab runtime"):
        colab.setup("lessons/01_thread_model")
    assert colab_runtime.recorder.commands == []


def test_a_folder_that_is_not_in_the_repository_is_an_error(colab_runtime):
    with pytest.raises(FileNotFoundError, match="no folder lessons/99_nothing"):
        colab.setup("lessons/99_nothing")


# ---- torch is Colab's own

def test_torch_is_never_installed(colab_runtime):
    for name in ("torch", "Triton"):
        with pytest.raises(ValueError, match="never installed over"):
            colab.install_command(["ninja", name])
    assert not set(colab.MODULES + colab.PROGRAMS) & set(colab.KEPT)


def test_nothing_the_setup_installs_depends_on_torch():
    # as installed here: pip installs a package's requirements with it, so one that needed torch could replace it
    for name in colab.MODULES + colab.PROGRAMS:
        needs = [re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in importlib.metadata.requires(name) or []]
        assert not set(needs) & set(colab.KEPT), f"{name} requires {needs}"


def test_a_runtime_without_torch_is_refused_and_nothing_is_installed(colab_runtime, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(RuntimeError, match="this runtime has no torch"):
        colab.setup("lessons/01_thread_model")
    assert colab_runtime.recorder.commands == []


def test_missing_names_the_modules_that_do_not_import_and_the_programs_not_on_path():
    assert colab.missing(find_module=lambda m: None if m == "matplotlib" else object(),
                         find_program=lambda p: None) == ["matplotlib", "ninja"]
    assert colab.missing(find_module=lambda m: object(), find_program=lambda p: "/usr/bin/" + p) == []


# ---- the links

def test_the_link_opens_the_notebook_of_the_repository_at_the_ref():
    assert colab.link(NOTEBOOK) == (f"https://colab.research.google.com/github/{colab.REPOSITORY}/blob/{colab.REF}/"
                                    "lessons/01_thread_model/01_thread_model.ipynb")
    assert colab.CHECKOUT == "/content/" + colab.REPOSITORY.split("/")[1]


def test_writing_the_colab_cells_adds_two_cells_and_writing_them_again_changes_nothing():
    from kernels.dev.colab_cells import LINK_ID, SETUP_ID, with_colab_cells

    title = {"cell_type": "markdown", "id": "t", "metadata": {}, "source": ["# 01 · title"]}
    code = [{"cell_type": "code", "execution_count": k, "id": f"c{k}", "metadata": {}, "outputs": [], "source": [f"{k}"]}
            for k in (1, 2)]
    nb = {"cells": [title, *code], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    solution = with_colab_cells(nb, NOTEBOOK, executed=True)
    assert [c["id"] for c in solution["cells"]] == [LINK_ID, "t", SETUP_ID, "c1", "c2"]
    assert solution["cells"][1:2] + solution["cells"][3:] == nb["cells"]
    assert solution["cells"][2]["execution_count"] == 1 and solution["cells"][2]["outputs"] == []
    assert with_colab_cells(solution, NOTEBOOK, executed=True) == solution
    assert with_colab_cells(nb, NOTEBOOK, executed=False)["cells"][2]["execution_count"] is None
