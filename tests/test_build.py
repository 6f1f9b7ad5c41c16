"""The loader: both binding styles, readable build errors, caching, and input checks."""
import os
from pathlib import Path

import pytest
import torch

from kernels import BuildError, load
from kernels.build import _ext_name, _key, find_source

HERE = Path(__file__).parent / "toolkit"


def test_torch_library_file_exposes_its_ops(dev):
    ext = load(HERE / "vector_add.cu")
    assert {"add", "add_le", "add_new"} <= set(ext.ops())
    x, y = torch.randn(100, device=dev), torch.randn(100, device=dev)
    torch.testing.assert_close(ext.add_new(x, y), x + y)


def test_pybind_file_returns_the_module(dev):
    mod = load(HERE / "pybind_square.cu")
    x = torch.randn(1000, device=dev)
    torch.testing.assert_close(mod.square(x), x * x)


def test_second_load_comes_from_the_cache(capsys):
    first = load(HERE / "vector_add.cu")
    capsys.readouterr()
    again = load(HERE / "vector_add.cu")
    assert again is first
    assert "building" not in capsys.readouterr().out


def test_cache_key_changes_with_the_source_and_the_backend(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text((HERE / "vector_add.cu").read_text())
    k1 = _key(src, "sim", [])
    src.write_text(src.read_text() + "\n// an edit\n")
    assert _key(src, "sim", []) != k1
    assert _key(src, "cuda", []) != _key(src, "sim", [])
    assert _ext_name(Path("04_memory.cu"), "sim", "abc").startswith("k04_memory_sim_")


def test_syntax_error_points_at_the_file_and_line():
    with pytest.raises(BuildError) as e:
        load(HERE / "syntax_error.cu")
    msg = str(e.value)
    # g++ names the line of the missing ';' (6), nvcc the line of the token after it (7)
    assert any(f"syntax_error.cu{at}" in msg for at in (":6:", "(6)", ":7:", "(7)")), msg
    assert "error" in msg
    assert str(HERE.parent.parent) not in msg  # paths relative to the repository, not the machine


def test_missing_file_says_what_was_looked_for():
    with pytest.raises(FileNotFoundError, match="no such .cu file"):
        load("does/not/exist.cu")
    with pytest.raises(FileNotFoundError, match="no reference kernel file matches"):
        load("99_nothing")


def test_reference_names_resolve_to_kernel_files():
    refs = sorted((Path(__file__).parent.parent / "kernels" / "reference").glob("*.cu"))
    for r in refs:
        assert find_source(r.stem[:2]) == r


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="expected one of cuda, sim"):
        load(HERE / "vector_add.cu", "rocm")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_backend_without_a_gpu_says_so():
    with pytest.raises(RuntimeError, match="needs a GPU"):
        load(HERE / "vector_add.cu", "cuda")


@pytest.mark.parametrize("bad, match", [
    ("dtype", "x must have dtype Float, got Double"),
    ("shape", "x and y must have the same shape"),
    ("contig", "x must be contiguous"),
    ("device", "must be"),
])
def test_input_checks_say_what_was_expected(dev, bad, match):
    ext = load(HERE / "vector_add.cu")
    x, y, out = (torch.randn(64, device=dev) for _ in range(3))
    if bad == "dtype":
        x = x.double()
    if bad == "shape":
        y = torch.randn(65, device=dev)
    if bad == "contig":
        x = torch.randn(128, device=dev)[::2]
    if bad == "device":
        if dev.type == "cpu":
            pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
        x = x.cpu()
    with pytest.raises(RuntimeError, match=match):
        ext.add(x, y, out)


def test_environment_variable_picks_the_backend(monkeypatch):
    from kernels.backend import resolve

    monkeypatch.setenv("KERNELS_BACKEND", "sim")
    assert resolve() == "sim"
    monkeypatch.setenv("KERNELS_BACKEND", "nope")
    with pytest.raises(ValueError):
        resolve()


@pytest.mark.slow
def test_sim_builds_use_a_precompiled_header_that_gcc_accepts(tmp_path, monkeypatch):
    """The first sim build precompiles helpers.cuh's headers; gcc must accept that file for the
    flags of a later build (-Werror=invalid-pch turns a silent fallback into a failure here)."""
    import re
    import shlex
    import subprocess

    from kernels.build import SIM_FLAGS, _sim_pch

    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.delenv("KERNELS_SIM_PCH", raising=False)
    src = tmp_path / "pch_probe.cu"
    src.write_text((HERE / "vector_add.cu").read_text())
    ext = load(src, "sim", quiet=True)
    x = torch.randn(10)
    torch.testing.assert_close(ext.add_new(x, x), 2 * x)
    pch = _sim_pch(SIM_FLAGS)
    assert pch.with_suffix(".h.gch").is_file(), (pch.parent / "sim_pch.failed").read_text()
    src.write_text(src.read_text() + "// an edit: a second build, which includes the precompiled header\n")
    again = load(src, "sim", quiet=True)
    torch.testing.assert_close(again.add_new(x, x), 2 * x)
    ninja = (Path(again.so).parent / "build.ninja").read_text()
    cxx = shlex.split(re.search(r"^cxx = (.+)$", ninja, re.M).group(1))
    cflags = shlex.split(re.search(r"^cflags = (.+)$", ninja, re.M).group(1))
    assert "-include" in cflags
    translated = next((Path(again.so).parent / "sim_src").glob("sim_0_*.cpp"))
    run = subprocess.run([*cxx, *cflags, "-Winvalid-pch", "-Werror=invalid-pch", "-fsyntax-only", str(translated)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
