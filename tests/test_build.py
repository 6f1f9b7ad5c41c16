"""The loader: both binding styles, readable build errors, caching, and input checks."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kernels import BuildError, load
from kernels.build import SourceSet, cache, find_source, key_of
from kernels.build import toolchain
from kernels.sim import build as sim_build

HERE = Path(__file__).parent / "toolkit"
ROOT = HERE.parent.parent


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


def test_a_sim_load_gives_torch_one_thread_unless_omp_num_threads_decides(monkeypatch):
    from kernels import backend

    before = torch.get_num_threads()
    try:
        for omp, expected in ((None, 1), ("2", 2)):
            monkeypatch.setattr(backend, "_threads_settled", False)
            if omp is None:
                monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
            else:
                monkeypatch.setenv("OMP_NUM_THREADS", omp)
            torch.set_num_threads(2)
            load(HERE / "vector_add.cu", "sim")
            assert torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)


def test_a_reinstalled_torch_gets_a_new_precompiled_header(tmp_path, monkeypatch):
    """clang refuses a PCH whose headers' times changed (a fatal error): torch installed again, same version."""
    assert any(p.name == "include" for p in sim_build._torch_header_marks())
    mark = tmp_path / "include"
    mark.mkdir()
    monkeypatch.setattr(sim_build, "_torch_header_marks", lambda: [mark])
    before = sim_build.pch_path(sim_build.FLAGS)
    os.utime(mark, ns=(10**18, 10**18))
    assert sim_build.pch_path(sim_build.FLAGS) != before


def test_cache_key_changes_with_the_source_and_the_backend(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text((HERE / "vector_add.cu").read_text())
    k1 = key_of(SourceSet.of(src), "sim", [])
    src.write_text(src.read_text() + "\n// an edit\n")
    assert key_of(SourceSet.of(src), "sim", []) != k1
    assert key_of(SourceSet.of(src), "cuda", []) != key_of(SourceSet.of(src), "sim", [])
    assert cache.ext_name(Path("04_memory.cu"), "sim", "abc").startswith("k04_memory_sim_")


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


def _assert_the_compiler_accepts_the_precompiled_header(ext) -> None:
    """The build included a precompiled header, and its compiler accepts it for the build's flags (gcc's
    -Werror=invalid-pch turns a silent fallback to parsing the headers into a failure; clang refuses a stale one)."""
    import re
    import shlex

    so = Path(getattr(ext, "so", None) or ext.__file__)
    ninja = (so.parent / "build.ninja").read_text()
    cxx = shlex.split(re.search(r"^cxx = (.+)$", ninja, re.M).group(1))
    cflags = shlex.split(re.search(r"^cflags = (.+)$", ninja, re.M).group(1))
    assert "-include" in cflags
    translated = next((so.parent / "sim_src").glob("sim_0_*.cpp"))
    run = subprocess.run([*cxx, *cflags, "-Winvalid-pch", "-Werror=invalid-pch", "-fsyntax-only", str(translated)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.toolkit
@pytest.mark.slow
@pytest.mark.parametrize("probe, headers", [("vector_add.cu", "PCH_HEADERS"), ("pybind_square.cu", "LIGHT_TORCH_PYBIND_PCH_HEADERS")])
def test_sim_builds_use_a_precompiled_header_that_the_compiler_accepts(tmp_path, monkeypatch, probe, headers):
    """A sim build precompiles the headers it needs (helpers.cuh's, plus the light torch/extension.h for a
    file that includes it) unless an earlier build did; a later build includes that file, and the compiler (g++ or clang++) accepts it.
    The precompiled headers are the usual build folder's (made from scratch by the first build of a fresh
    checkout, as the first build of `make test-all` does): making them again here would only repeat that."""
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(_isolated_build_dir(tmp_path)))
    monkeypatch.delenv("KERNELS_SIM_PCH", raising=False)
    src = tmp_path / f"pch_probe_{probe}"
    src.write_text((HERE / probe).read_text())
    x = torch.randn(10)

    def works(ext):
        if hasattr(ext, "square"):
            torch.testing.assert_close(ext.square(x), x * x)
        else:
            torch.testing.assert_close(ext.add_new(x, x), 2 * x)

    works(load(src, "sim", quiet=True))
    pch = sim_build.pch_path(sim_build.FLAGS, getattr(sim_build, headers))
    assert sim_build.pch_file(pch).is_file(), (pch.parent / "sim_pch.failed").read_text()
    assert pch.read_text().count("#include") == len(getattr(sim_build, headers))
    # made through this test's linked folder, it names the shared folder's real path: the PCH records its
    # header's path, and one naming this test's folder broke every later build once the folder was deleted
    assert tmp_path not in pch.parents, pch
    runtime = sim_build.runtime_object(sim_build.FLAGS)
    assert tmp_path not in runtime.parents, runtime
    assert sim_build.prebuilt_runtime(pch) and runtime.is_file(), runtime.with_suffix(".failed").read_text()
    src.write_text(src.read_text() + "// an edit: a second build, which includes the precompiled header\n")
    again = load(src, "sim", quiet=True)
    works(again)
    _assert_the_compiler_accepts_the_precompiled_header(again)
    _assert_the_runtime_is_linked_not_compiled(again)
    # a header whose time changes and content does not (git checkout to a branch and back) keeps the precompiled
    # header usable: clang refused it with a fatal error ("has been modified since the precompiled header")
    header = sim_build.SIM_INCLUDE / "cudasim.h"
    before = header.stat()
    try:
        os.utime(header, ns=(before.st_atime_ns, before.st_mtime_ns + 60 * 10**9))
        src.write_text(src.read_text() + "// a second edit, after the simulator's header was touched\n")
        works(load(src, "sim", quiet=True))
        touched = sim_build.pch_path(sim_build.FLAGS, getattr(sim_build, headers))
    finally:
        os.utime(header, ns=(before.st_atime_ns, before.st_mtime_ns))
    # a build that chose its precompiled header while the time was changed and compiles after it changed back
    # (another process touching the headers meanwhile): clang's fatal error, then the build parses the headers
    assert sim_build.pch_file(touched).is_file(), touched
    monkeypatch.setattr(sim_build, "pch_path", lambda *args, **kw: touched)
    src.write_text(src.read_text() + "// a third edit, built with the precompiled header of the touched time\n")
    works(load(src, "sim", quiet=True))


@pytest.mark.toolkit
@pytest.mark.slow
def test_the_first_build_with_a_light_torch_header_gets_its_precompiled_header_first(tmp_path, monkeypatch):
    """Once the common precompiled header exists, the first build that needs one with the light torch/extension.h
    (here with pybind11) makes that one before it compiles, with the common one's recorded command, and includes
    it: compiling without it first cost that build ~3x the time (and an instrumented pybind11 file, alone of its
    kind in a run, made a header no build then used)."""
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "build"))  # from scratch: no header is made yet
    monkeypatch.delenv("KERNELS_SIM_PCH", raising=False)
    # a copy of its own content: a copy of the same bytes that this process loaded earlier is the module it has
    # (load() names a build by what it compiles), and then nothing is built here
    (tmp_path / "vector_add.cu").write_text((HERE / "vector_add.cu").read_text() + "// the first build here\n")
    load(tmp_path / "vector_add.cu", "sim", quiet=True)
    assert sim_build.pch_command(sim_build.FLAGS) is not None
    pybind = sim_build.pch_path(sim_build.FLAGS, sim_build.LIGHT_TORCH_PYBIND_PCH_HEADERS)
    assert not sim_build.pch_file(pybind).exists()
    ext = load(HERE / "pybind_square.cu", "sim", quiet=True)
    x = torch.randn(10)
    torch.testing.assert_close(ext.square(x), x * x)
    so = Path(getattr(ext, "so", None) or ext.__file__)
    assert f"-include {pybind}" in (so.parent / "build.ninja").read_text()
    _assert_the_compiler_accepts_the_precompiled_header(ext)


@pytest.mark.toolkit
@pytest.mark.slow
def test_the_first_instrumented_build_gets_its_precompiled_header_first(tmp_path, monkeypatch):
    """Once the plain builds' common precompiled header exists, the first instrumented build (the race check's and
    the profiler's twin) makes its own before it compiles, with the plain one's recorded command and the instrumented
    flags, and includes it and links the instrumented runtime: it used to compile without one first."""
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "build"))  # from scratch: no header is made yet
    monkeypatch.delenv("KERNELS_SIM_PCH", raising=False)
    # a copy of its own: this process may have loaded the file, or another copy of it, already
    (tmp_path / "vector_add.cu").write_text((HERE / "vector_add.cu").read_text() + "// the first instrumented build\n")
    plain = load(tmp_path / "vector_add.cu", "sim", quiet=True)
    instrumented = sim_build.instrumented_flags()
    pch = sim_build.pch_path(sim_build.FLAGS + instrumented)
    assert sim_build.pch_command(sim_build.FLAGS) is not None and not sim_build.pch_file(pch).exists()
    twin = load(tmp_path / "vector_add.cu", "sim", quiet=True, extra_cflags=instrumented)  # as the twin is loaded
    so = Path(getattr(twin, "so", None) or twin.__file__)
    assert f"-include {pch}" in (so.parent / "build.ninja").read_text()
    assert sim_build.pch_command(sim_build.FLAGS + instrumented)["flags"][-len(instrumented):] == instrumented
    _assert_the_compiler_accepts_the_precompiled_header(twin)
    _assert_the_runtime_is_linked_not_compiled(twin)
    x = torch.randn(10)
    torch.testing.assert_close(twin.add_new(x, x), plain.add_new(x, x))


def _assert_the_runtime_is_linked_not_compiled(ext) -> None:
    """The build's own object holds none of the simulator's runtime (run_grid, which every launch calls, is only
    referenced there) and the library has it: it came from the runtime object, compiled once."""
    so = Path(getattr(ext, "so", None) or ext.__file__)

    def run_grid(path: Path) -> str:
        """nm's type letter of cudasim::run_grid in `path` ('' when absent)."""
        out = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
        return next((line.split()[-2] for line in out.splitlines() if "7cudasim8run_grid" in line), "")

    objects = list(so.parent.glob("*.o"))
    assert objects and all(run_grid(o) == "U" for o in objects), [(o.name, run_grid(o)) for o in objects]
    assert run_grid(so) in ("t", "T"), run_grid(so)

# --- the build cache under concurrency and crashes ----------------------------------------------

def _isolated_build_dir(tmp_path: Path) -> Path:
    """A build folder of its own that shares the precompiled headers and runtime objects of the usual one, so a sim
    build in it takes seconds, as in a learner's checkout."""
    from kernels.build import build_root

    root = tmp_path / "build"
    root.mkdir()
    for part in ("sim-pch", "sim-runtime"):
        shared = build_root() / part
        shared.mkdir(parents=True, exist_ok=True)
        (root / part).symlink_to(shared, target_is_directory=True)
    return root


def _run_loader(src: Path, build_dir: Path, *, wait_for: Path | None = None) -> subprocess.Popen:
    """A fresh Python process that loads `src` on the simulator and prints what its op computes."""
    script = (
        "import sys, time, pathlib, torch\n"
        f"go = pathlib.Path({str(wait_for)!r}) if {wait_for is not None} else None\n"
        "while go is not None and not go.exists(): time.sleep(0.01)\n"
        "from kernels import load\n"
        f"ext = load({str(src)!r}, 'sim')\n"
        "print('result', ext.add_new(torch.ones(5), torch.full((5,), 2.0)).tolist(), flush=True)\n")
    env = {**os.environ, "KERNELS_BUILD_DIR": str(build_dir), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", script], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    assert "result [3.0, 3.0, 3.0, 3.0, 3.0]" in out, out[-3000:]
    return out


@pytest.mark.toolkit
@pytest.mark.slow
def test_two_processes_loading_one_new_file_build_it_once_and_both_load_it(tmp_path):
    root = _isolated_build_dir(tmp_path)
    src = tmp_path / "raced.cu"
    src.write_text((HERE / "vector_add.cu").read_text())
    go = tmp_path / "go"
    procs = [_run_loader(src, root, wait_for=go) for _ in range(2)]
    time.sleep(3)  # both import torch, then start at one signal
    go.touch()
    outs = [_finish(p) for p in procs]
    assert sum("building raced for sim" in o for o in outs) == 1, outs
    [folder] = [d for d in root.iterdir() if d.name.startswith("raced_sim_")]
    assert (folder / f"{folder.name}.ok").is_file()


@pytest.mark.toolkit
@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated library", "missing stamp", "cpp_extension's lock left"])
def test_an_interrupted_build_is_rebuilt_never_loaded(tmp_path, damage):
    """A build killed while linking leaves a truncated library, or one without a stamp; one killed while
    compiling leaves cpp_extension's lock file, which made every later build of the file wait forever."""
    root = _isolated_build_dir(tmp_path)
    src = tmp_path / "interrupted.cu"
    src.write_text((HERE / "vector_add.cu").read_text())
    _finish(_run_loader(src, root))
    [folder] = [d for d in root.iterdir() if d.name.startswith("interrupted_sim_")]
    so, stamp = folder / f"{folder.name}.so", folder / f"{folder.name}.ok"
    if damage == "truncated library":
        so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])
    elif damage == "missing stamp":
        stamp.unlink()
    else:
        stamp.unlink()
        (folder / "lock").write_text("")  # as torch.utils.file_baton leaves it when its process is killed
    out = _finish(_run_loader(src, root))
    assert "building interrupted for sim" in out
    assert stamp.read_text().split()[0] == str(so.stat().st_size)


def test_cached_library_is_used_only_when_its_stamp_matches(tmp_path):
    _cached_library, _stamp = cache.cached_library, cache.stamp

    so, stamp, obj = tmp_path / "ext.so", tmp_path / "ext.ok", tmp_path / "ext.o"
    so.write_bytes(b"\x7fELF" + bytes(1000))
    stamp.write_text(_stamp(so))
    assert _cached_library(tmp_path, "ext") == so
    so.write_bytes(b"\x7fELF" + bytes(500))  # truncated after its stamp was written
    obj.write_bytes(b"half an object file")
    assert _cached_library(tmp_path, "ext") is None
    assert not so.exists() and not stamp.exists() and not obj.exists()  # the rebuild starts from the sources
    so.write_bytes(b"\x7fELF" + bytes(1000))  # complete, but no stamp: its build+load never finished
    assert _cached_library(tmp_path, "ext") is None


# --- what the cache key covers --------------------------------------------------------------------

def _copy_of_the_simulator(tmp_path: Path, monkeypatch) -> Path:
    """A copy of kernels/sim's translator and headers that the key reads instead of the real ones."""
    import shutil

    pkg = tmp_path / "pkg"
    shutil.copytree(sim_build.SIM, pkg / "sim", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(sim_build, "SIM", pkg / "sim")
    monkeypatch.setattr(sim_build, "SIM_INCLUDE", pkg / "sim" / "include")
    return pkg / "sim"


def test_cache_key_changes_with_the_translator_and_the_simulator_headers(tmp_path, monkeypatch):
    sim = _copy_of_the_simulator(tmp_path, monkeypatch)
    src = HERE / "vector_add.cu"
    k1 = key_of(SourceSet.of(src), "sim", [])
    with open(sim / "translate.py", "a") as f:
        f.write("\n# an edit of the translator\n")
    k2 = key_of(SourceSet.of(src), "sim", [])
    with open(sim / "include" / "cudasim.h", "a") as f:
        f.write("\n// an edit of a simulator header\n")
    k3 = key_of(SourceSet.of(src), "sim", [])
    assert len({k1, k2, k3}) == 3
    assert key_of(SourceSet.of(src), "cuda", []) == key_of(SourceSet.of(src), "cuda", [])  # the cuda key does not read the simulator


@pytest.mark.parametrize("backend", ["sim", "cuda"])
def test_cache_key_covers_headers_found_with_angle_brackets_in_extra_include_paths(tmp_path, backend):
    from kernels.build.link import LinkOptions

    (tmp_path / "inc" / "lib").mkdir(parents=True)
    (tmp_path / "inc" / "lib" / "api.h").write_text('#include "detail.h"\n')
    (tmp_path / "inc" / "lib" / "detail.h").write_text("#define SCALE 2\n")
    src = tmp_path / "k.cu"
    src.write_text("#include <lib/api.h>\n#include <vector>\n__global__ void k(float* p) { p[0] = SCALE; }\n")
    link = LinkOptions.of(extra_include_paths=[tmp_path / "inc"])
    key = lambda: key_of(SourceSet.of(src, link.search()), backend, [], link)  # noqa: E731
    k1 = key()
    (tmp_path / "inc" / "lib" / "detail.h").write_text("#define SCALE 3\n")  # reached through <lib/api.h>
    k2 = key()
    (tmp_path / "inc" / "lib" / "api.h").write_text('#include "detail.h"\n// edited\n')
    assert len({k1, k2, key()}) == 3


@pytest.mark.parametrize("backend, query", [("sim", "cxx_version"), ("cuda", "cxx_version"), ("cuda", "nvcc_version")])
def test_cache_key_changes_with_the_compiler_versions(monkeypatch, backend, query):
    src = HERE / "vector_add.cu"
    monkeypatch.setattr(cache, query, lambda *backend: "compiler 12.2.0")
    k1 = key_of(SourceSet.of(src), backend, [])
    monkeypatch.setattr(cache, query, lambda *backend: "compiler 13.1.0")
    assert key_of(SourceSet.of(src), backend, []) != k1


def test_cache_key_changes_with_the_target_gpu_architecture(monkeypatch):
    import kernels.build as mod

    src = HERE / "vector_add.cu"
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr(toolchain, "_visible_gpu_archs", lambda: ((9, 0),))
    h100 = mod.compile_flags("cuda")
    assert "-gencode=arch=compute_90,code=sm_90" in h100
    monkeypatch.setattr(toolchain, "_visible_gpu_archs", lambda: ((8, 6),))
    a10 = mod.compile_flags("cuda")
    assert "-gencode=arch=compute_86,code=sm_86" in a10 and not any("sm_90" in f for f in a10)
    monkeypatch.setattr(toolchain, "_visible_gpu_archs", lambda: ())  # no GPU: compile for sm_90
    assert "-gencode=arch=compute_90,code=sm_90" in mod.compile_flags("cuda")
    assert key_of(SourceSet.of(src), "cuda", h100) != key_of(SourceSet.of(src), "cuda", a10)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")  # named by the user: cpp_extension reads it, the key hashes it
    assert not any("gencode" in f for f in mod.compile_flags("cuda"))
    k80 = key_of(SourceSet.of(src), "cuda", mod.compile_flags("cuda"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    assert key_of(SourceSet.of(src), "cuda", mod.compile_flags("cuda")) != k80


def test_a_file_with_code_for_sm_90a_is_built_for_sm_90a_on_an_h100_and_as_before_elsewhere(monkeypatch):
    import kernels.build as mod
    from kernels.paths import reference_file

    hopper, plain = SourceSet.of(reference_file("13")), SourceSet.of(HERE / "vector_add.cu")
    assert hopper.needs_sm90a and not plain.needs_sm90a  # code under __CUDA_ARCH_FEAT_SM90_ALL, not a comment
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr(toolchain, "_visible_gpu_archs", lambda: ((9, 0),))
    h100 = mod.compile_flags("cuda", sm90a=True)
    # machine code for sm_90a (wgmma, setmaxnreg), and PTX of compute_90, not of 90a, for a newer GPU to JIT
    assert "-gencode=arch=compute_90a,code=sm_90a" in h100 and "-gencode=arch=compute_90,code=compute_90" in h100
    assert "-gencode=arch=compute_90,code=sm_90" not in h100
    assert key_of(hopper, "cuda", h100) != key_of(hopper, "cuda", mod.compile_flags("cuda"))
    monkeypatch.setattr(toolchain, "_visible_gpu_archs", lambda: ((8, 0), (9, 0)))  # two GPUs: each its own code
    both = mod.compile_flags("cuda", sm90a=True)
    assert "-gencode=arch=compute_80,code=sm_80" in both and "-gencode=arch=compute_90a,code=sm_90a" in both
    monkeypatch.setattr(toolchain, "_visible_gpu_archs", lambda: ((8, 9),))  # an L4: nothing of sm_90a
    assert not any("90" in f for f in mod.compile_flags("cuda", sm90a=True))
    monkeypatch.setattr(toolchain, "_visible_gpu_archs", lambda: ())  # no GPU: the compile for sm_90 becomes sm_90a
    assert "-gencode=arch=compute_90a,code=sm_90a" in mod.compile_flags("cuda", sm90a=True)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")  # named by the user: taken as it is
    assert not any("gencode" in f for f in mod.compile_flags("cuda", sm90a=True))
    named = mod.compile_flags("cuda", archs=("90",), sm90a=True)  # the compile check names its targets itself
    assert [f for f in named if "gencode" in f] == ["-gencode=arch=compute_90,code=sm_90"]


def test_load_and_the_cache_ask_for_sm_90a_where_the_file_has_code_for_it(monkeypatch):
    import kernels.build as mod
    from kernels.paths import reference_file

    asked = []
    monkeypatch.setattr(mod._backend, "resolve", lambda backend: backend)  # no GPU here: only the flags are asked
    monkeypatch.setattr(mod, "compile_flags", lambda *a, **kw: asked.append(kw.get("sm90a")) or [])
    mod.is_cached(reference_file("13"), "cuda")
    mod.is_cached(HERE / "vector_add.cu", "cuda")
    assert asked == [True, False]


def test_sim_builds_take_clang_where_it_is_installed_unless_a_compiler_is_named(monkeypatch):
    import os
    import shutil

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv(toolchain.SIM_CXX, raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if name == "clang++" else None)
    assert (toolchain.cxx("sim"), toolchain.cxx("cuda")) == ("clang++", "c++")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert toolchain.cxx("sim") == "c++"
    monkeypatch.setenv("CXX", "g++-12")
    assert (toolchain.cxx("sim"), toolchain.cxx("cuda")) == ("g++-12", "g++-12")
    monkeypatch.setenv(toolchain.SIM_CXX, "clang++-14")
    assert (toolchain.cxx("sim"), toolchain.cxx("cuda")) == ("clang++-14", "g++-12")
    with toolchain.compiler_for("sim"):
        assert os.environ["CXX"] == "clang++-14"  # what cpp_extension reads
    assert os.environ["CXX"] == "g++-12"


def test_compiler_version_is_asked_once_per_process(monkeypatch):
    calls = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    toolchain.tool_version.cache_clear()
    try:
        first = toolchain.cxx_version()
        assert toolchain.cxx_version() == first and len(calls) == 1
    finally:
        toolchain.tool_version.cache_clear()


# --- load-time failures ---------------------------------------------------------------------------

def test_undefined_symbol_is_a_build_error_that_names_it_first(capsys):
    with pytest.raises(BuildError) as e:
        load(HERE / "undefined_symbol.cu")
    msg = str(e.value)
    first = msg.splitlines()[0]
    assert first.startswith("undefined symbol probe::scale_factor(int)"), msg
    assert "tests/toolkit/undefined_symbol.cu" in msg
    assert str(ROOT) not in msg  # paths relative to the repository, not the machine
    out = capsys.readouterr().out
    assert "building undefined_symbol for" in out and out.rstrip().endswith("failed"), out


@pytest.mark.toolkit
def test_exercise_check_and_compile_check_report_a_file_that_cannot_load(capsys):
    from kernels.dev.compile_check import _compile
    from kernels.exercises import check_exercise

    report = check_exercise("04", path=HERE / "undefined_symbol.cu")
    assert not report.passed
    out = capsys.readouterr().out
    assert "does not build yet\nundefined symbol probe::scale_factor(int)" in out, out
    path, _, _, err = _compile((HERE / "undefined_symbol.cu", "sim"))
    assert err.startswith("undefined symbol probe::scale_factor(int)"), err


def test_demangling_without_cxxfilt_recovers_the_qualified_name(monkeypatch):
    import shutil

    from kernels.build import demangle

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "c++filt" else real(name, *a, **k))
    assert demangle("_ZN5probe12scale_factorEi") == "probe::scale_factor(...)"
    assert demangle("_Z4stepv") == "step(...)"
    assert demangle("plain_c_name") == "plain_c_name"


def _load_two_files_registering_one_namespace(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """Load two files whose TORCH_LIBRARY blocks name the same namespace, in a fresh process."""
    first, second = tmp_path / "first.cu", tmp_path / "second.cu"
    first.write_text(body)
    second.write_text(body + "\n// another file, same namespace\n")
    script = (
        "from kernels import BuildError, load\n"
        f"load({str(first)!r}, 'sim', quiet=True)\n"
        f"try:\n    load({str(second)!r}, 'sim', quiet=True)\nexcept BuildError as e:\n    print('refused:', e)\n")
    env = {**os.environ, "KERNELS_BUILD_DIR": str(_isolated_build_dir(tmp_path)), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_second_library_for_one_op_namespace_is_refused_not_a_crash(tmp_path):
    """PyTorch aborts the process when a second TORCH_LIBRARY registers a namespace; load refuses it."""
    body = (HERE / "vector_add.cu").read_text().replace("TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m)",
                                                         "TORCH_LIBRARY(toolkit_fixed_ns, m)")
    body = body.replace("TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m)", "TORCH_LIBRARY_IMPL(toolkit_fixed_ns, CUDA, m)")
    run = _load_two_files_registering_one_namespace(tmp_path, body)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "refused: the op namespace 'toolkit_fixed_ns' is already registered in this process (by " in run.stdout
    assert "first.cu" in run.stdout


@pytest.mark.slow
def test_second_library_for_a_namespace_without_ops_is_refused_not_a_crash(tmp_path):
    """An op-less TORCH_LIBRARY block registers its namespace too; a second one aborts the process just the same."""
    run = _load_two_files_registering_one_namespace(tmp_path, "#include <torch/library.h>\nTORCH_LIBRARY(toolkit_empty_ns, m) {}\n")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "refused: the op namespace 'toolkit_empty_ns' is already registered in this process (by " in run.stdout
    assert "first.cu" in run.stdout


def test_namespace_registered_from_python_without_ops_is_refused_before_building(tmp_path, monkeypatch):
    src = tmp_path / "python_ns.cu"
    src.write_text("#include <torch/library.h>\nTORCH_LIBRARY(toolkit_python_ns, m) {}\n")
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "ext"))
    lib = torch.library.Library("toolkit_python_ns", "DEF")  # a namespace with no ops
    try:
        with pytest.raises(BuildError, match="the op namespace 'toolkit_python_ns' is already registered in this "
                                             r"process \(by another library or torch.library\)"):
            load(src, "sim", quiet=True)
    finally:
        lib._destroy()
    assert not (tmp_path / "ext").exists()  # refused before anything was built


# --- the precompiled headers -----------------------------------------------------------------------

def test_files_reaching_torch_extension_h_get_the_precompiled_header_of_its_light_stand_in(tmp_path):
    SIM_PCH_HEADERS, SIM_LIGHT_TORCH_PCH_HEADERS = sim_build.PCH_HEADERS, sim_build.LIGHT_TORCH_PYBIND_PCH_HEADERS
    SIM_LIGHT_TORCH_OPS_PCH_HEADERS = sim_build.LIGHT_TORCH_OPS_PCH_HEADERS

    def pch_headers(files, light_torch=True):
        return sim_build.pch_headers(SourceSet.of(files[0]), light_torch)


    lesson = tmp_path / "lesson.cu"
    lesson.write_text('#include "helpers.cuh"\n// #include <torch/extension.h> (a comment, not an include)\n'
                      'const char* s = "#include <torch/extension.h>";\n')
    assert pch_headers([lesson]) == SIM_PCH_HEADERS
    ext = tmp_path / "ext.cu"
    ext.write_text('#include <torch/extension.h>\n#include "helpers.cuh"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n')
    assert pch_headers([ext]) == SIM_LIGHT_TORCH_PCH_HEADERS
    assert pch_headers([ext], light_torch=False) == SIM_PCH_HEADERS  # the fallback build: the common one
    ext.write_text('#include <torch/all.h>\n#include "helpers.cuh"\n')  # the C++ API without pybind11
    assert pch_headers([ext]) == SIM_LIGHT_TORCH_OPS_PCH_HEADERS
    ext.write_text('#include <torch/python.h>\n#include "helpers.cuh"\n')  # no light stand-in: the common one
    assert pch_headers([ext]) == SIM_PCH_HEADERS
    local = tmp_path / "bindings.h"  # reached through a local header of the file
    local.write_text("#pragma once\n  #  include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n")
    lesson.write_text(lesson.read_text() + '#include "bindings.h"\n')
    assert pch_headers([lesson]) == SIM_LIGHT_TORCH_PCH_HEADERS
    for headers in (SIM_LIGHT_TORCH_PCH_HEADERS, SIM_LIGHT_TORCH_OPS_PCH_HEADERS):
        assert headers[:len(SIM_PCH_HEADERS)] == SIM_PCH_HEADERS and len(headers) == len(SIM_PCH_HEADERS) + 1


@pytest.mark.parametrize("code, pybind", [
    ("TORCH_LIBRARY(ns, m) { m.def(\"f(Tensor x) -> Tensor\"); }", False),
    ("// PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {} in a comment, py::arg too", False),
    ('const char* doc = "see PYBIND11_MODULE and py::arg";', False),
    ("int PyTorch_is_a_word_here;", True),  # any Py... name in code: pybind11 is the safe side
    ("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}", True),
    ("void f(pybind11::module_& m);", True),
    ("auto a = py::arg(\"x\");", True),
    ("extern \"C\" PyObject* PyInit__C(void) { return nullptr; }", True),
    ("PyObject* wrap(const at::Tensor& t) { return THPVariable_Wrap(t); }", True),
])
def test_a_torch_extension_file_gets_pybind11_only_when_its_code_uses_python(tmp_path, code, pybind):
    """Files that include torch/extension.h and register their ops with TORCH_LIBRARY get the light
    header without pybind11 (about 4 s less code to generate); pybind11 or Python's C API in code, in
    the file or a local header, gets the one with it."""
    LIGHT_TORCH_OPS, LIGHT_TORCH_PYBIND = sim_build.LIGHT_TORCH_OPS, sim_build.LIGHT_TORCH_PYBIND
    with_pybind, without = sim_build.LIGHT_TORCH_PYBIND_PCH_HEADERS, sim_build.LIGHT_TORCH_OPS_PCH_HEADERS

    ext = tmp_path / "ext.cu"
    ext.write_text(f"#include <torch/extension.h>\n{code}\n")
    assert sim_build.light_torch_map(SourceSet.of(ext)) == {
        "torch/extension.h": LIGHT_TORCH_PYBIND if pybind else LIGHT_TORCH_OPS,
        "torch/all.h": LIGHT_TORCH_OPS, "torch/types.h": LIGHT_TORCH_OPS}  # no pybind11 in the real ones either
    assert sim_build.pch_headers(SourceSet.of(ext)) == (with_pybind if pybind else without)
    ext.write_text('#include <torch/extension.h>\n#include "bind.h"\n')
    (tmp_path / "bind.h").write_text(f"#pragma once\n{code}\n")
    assert sim_build.pch_headers(SourceSet.of(ext)) == (with_pybind if pybind else without)


# --- files the light torch/extension.h does not fit: remembered, so an edit compiles once ----------

def _stale_pch_build(tmp_path, monkeypatch, error: str, included: list[bool]):
    """One sim build of vector_add.cu with a precompiled header in use and the compiler replaced: it fails with
    `error` while the header is included and builds without it; `included` gets whether each compile included the
    header. Returns (how many times the build was forgotten, the precompiled header's file)."""
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "ext"))
    stale = tmp_path / "sim_pch.h.pch"
    stale.write_text("")
    monkeypatch.setattr(sim_build, "_pch_enabled", lambda: True)
    monkeypatch.setattr(sim_build, "pch_file", lambda header: stale)
    monkeypatch.setattr(sim_build, "prebuilt_runtime", lambda pch: False)
    forgotten = []

    class Compiler:
        def load(self, *, extra_cflags, **kwargs):
            included.append("-include" in extra_cflags)
            if "-include" in extra_cflags:
                raise RuntimeError(f"Error building extension 't': {error}")

    src = tmp_path / "vector_add.cu"
    src.write_text((HERE / "vector_add.cu").read_text())
    out = tmp_path / "out"
    out.mkdir()
    sim_build.compile_sim(Compiler(), SourceSet.of(src), sim_build.FLAGS, out, {"name": "t"}, quiet=True,
                          forget=lambda: forgotten.append(1))
    return len(forgotten), stale


def test_a_build_whose_precompiled_header_went_stale_compiles_once_more_parsing_the_headers(tmp_path, monkeypatch):
    """clang's fatal error for a precompiled header older than a header it includes: the build compiles again
    without it, and a header stale under the key it was chosen by is removed (the next build makes a new one)."""
    included = []
    forgotten, stale = _stale_pch_build(
        tmp_path, monkeypatch, f"fatal error: file 'cudasim.h' {sim_build.STALE_PCH} 'sim_pch.h.pch' was built",
        included)
    assert included == [True, False] and forgotten == 1
    assert not stale.exists()


def test_another_error_with_a_precompiled_header_is_not_compiled_again(tmp_path, monkeypatch):
    included = []
    with pytest.raises(Exception, match="expected ';'"):
        _stale_pch_build(tmp_path, monkeypatch, "vector_add.cu:4:13: error: expected ';' before 'return'", included)
    assert included[0] and included.count(True) == len(included)  # never retried without the header


NN_LOG = ("sim_0_t.cpp: In function 'at::Tensor f(at::Tensor)':\n"
          "t.cu:4:10: error: 'nn' is not a member of 'torch'\n"
          "    4 |   torch::nn::Linear linear(3, 4);\n")
SYNTAX_LOG = ("Error building extension 't':\nt.cu:4:13: error: expected ';' before 'return'\n"
              "    4 |   x = x * 2\n")


@pytest.fixture
def sim_attempts(tmp_path, monkeypatch):
    """compile_sim with the compiler replaced: the light header fails on files that name torch::nn,
    the real one builds everything (or nothing, with `real_fails`); returns a function that builds a
    file into a fresh folder and gives back which headers were tried (True: the light one)."""
    build = sim_build
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "ext"))
    state = {"real_fails": False, "builds": 0}

    def attempt(cpp, sources, flags, out, kwargs, quiet, extra, forget, *, light_torch):
        state["tried"].append(light_torch)
        if light_torch and "torch::nn" in sources.entry.read_text():
            raise build._LightTorchFailed(NN_LOG)
        if "x * 2\n" in sources.entry.read_text():  # the file's own syntax error: fails with either header
            raise build._LightTorchFailed(SYNTAX_LOG) if light_torch else BuildError("the real header failed too")
        if not light_torch and state["real_fails"]:
            raise BuildError("the real header failed too")

    monkeypatch.setattr(build, "_compile_translated", attempt)

    def tried(entry: Path) -> list[bool]:
        state["tried"], state["builds"] = [], state["builds"] + 1
        out = tmp_path / f"out{state['builds']}"
        out.mkdir()
        build.compile_sim(object(), SourceSet.of(entry), [], out, {"name": "t"}, quiet=True, forget=lambda: None)
        state["out"] = out
        return state["tried"]

    tried.state = state
    return tried


def _nn_file(tmp_path: Path, body: str = "torch::nn::Linear linear(3, 4);") -> Path:
    f = tmp_path / "t.cu"
    f.write_text(f"#include <torch/extension.h>\n\nat::Tensor f(at::Tensor x) {{\n  {body}\n  return x;\n}}\n")
    return f


def test_a_file_the_light_header_does_not_fit_goes_straight_to_the_real_header_when_built_again(
        tmp_path, sim_attempts):
    f = _nn_file(tmp_path)
    assert sim_attempts(f) == [True, False]  # the first build learns it: light, then real
    assert sim_attempts(f) == [False]  # the same sources again: the real header only
    assert (sim_attempts.state["out"] / "light_torch.log").read_text() == NN_LOG  # why, kept in the folder


def test_an_edit_that_still_uses_the_missing_name_skips_the_light_header_and_one_that_drops_it_tries_it(
        tmp_path, sim_attempts):
    f = _nn_file(tmp_path)
    assert sim_attempts(f) == [True, False]
    _nn_file(tmp_path, "torch::nn::Linear other(5, 6);  // edited")
    assert sim_attempts(f) == [False]
    _nn_file(tmp_path, "// no nn layer any more (a comment may name nn)\n  x = x * 2;")
    assert sim_attempts(f) == [True]  # the light header fits now, and nothing is remembered against it
    assert sim_attempts(f) == [True]


def test_a_changed_light_header_is_tried_again_on_a_file_it_did_not_fit(tmp_path, sim_attempts, monkeypatch):
    build = sim_build
    f = _nn_file(tmp_path)
    assert sim_attempts(f) == [True, False]
    include = tmp_path / "include"
    include.mkdir()
    for light in build.LIGHT_TORCH_HEADERS:
        (include / light).write_text((build.SIM_INCLUDE / light).read_text() + "namespace torch::nn {}\n")
    monkeypatch.setattr(build, "SIM_INCLUDE", include)
    assert sim_attempts(f) == [True, False]


def test_the_files_own_syntax_error_is_reported_after_one_compile_with_the_light_header(tmp_path, sim_attempts):
    f = _nn_file(tmp_path, "x = x * 2")
    with pytest.raises(RuntimeError, match="expected ';' before 'return'") as err:
        sim_attempts(f)
    assert str(err.value).startswith("Error building extension")  # the loader reports it as any compile error
    assert sim_attempts.state["tried"] == [True]


@pytest.mark.parametrize("log, own", [
    (SYNTAX_LOG, True),
    (NN_LOG, False),  # a missing name: the real header may have it
    ("t.cu:5:7: error: 'class at::Tensor' has no member named 'foo'\n", False),  # names PyTorch's type
    ("t.cu:5:7: error: invalid use of incomplete type 'struct torch::Thing'\n", False),
    ("t.cu:9:1: warning: unused variable 'x'\n", False),  # no error at all
    (SYNTAX_LOG + "t.cu:5:7: error: 'n' was not declared in this scope\n", True),  # the first error is the cause
])
def test_only_a_failure_that_names_nothing_of_pytorchs_counts_as_the_files_own(log, own):
    assert sim_build.own_error(log) == own


def test_nothing_is_remembered_when_the_real_header_fails_too(tmp_path, sim_attempts):
    f = _nn_file(tmp_path)
    sim_attempts.state["real_fails"] = True
    with pytest.raises(BuildError):
        sim_attempts(f)
    sim_attempts.state["real_fails"] = False
    assert sim_attempts(f) == [True, False]  # the light header is tried again


@pytest.mark.parametrize("log, names", [
    (NN_LOG, ["nn"]),
    ("t.cu:9:3: error: 'NoGradGuard' is not a member of 'torch'\nt.cu:10:3: error: 'linear' was not declared "
     "in this scope\n", ["NoGradGuard", "linear"]),
    ("t.cu:3:20: error: 'Module' in namespace 'torch::nn' does not name a type\n", ["Module"]),
    ("t.cu:3:8: error: 'torch::autograd' has not been declared\n", ["autograd"]),
    ("t.cu:25:10: error: ‘torch::nn’ has not been declared\nt.cu:26:3: error: ‘linear’ was not declared in this "
     "scope\nt.cu:36:16: error: expected primary-expression before ‘float’\n", ["nn", "linear"]),  # UTF-8 quotes
    ("t.cu:3:8: error: expected ';' before '}' token\n", []),
])
def test_missing_names_are_read_from_gcc_errors(log, names):
    missing_names = sim_build.missing_names

    assert missing_names(log) == names
