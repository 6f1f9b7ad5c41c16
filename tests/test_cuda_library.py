"""Lesson 11's route for a CUDA library a team already has (lessons/11_other_routes/cuda_library): its Makefile
run with the backend's compiler (nvcc on cuda, the simulator's driver kernels/sim/nvcc-sim on sim), the static
library linked into an extension (setup.py on cuda, load(extra_objects=...) on sim), the op checked against
torch, and each of the seed's bugs, planted in a copy of the library, failing check_cuda_library as the lesson
says it does. Each build takes seconds on sim (tens of seconds on a loaded machine), so a build is shared by the
tests of a module; they are toolkit tests (make test-toolkit), not part of make test-all."""
from __future__ import annotations

import subprocess

import pytest
import torch

from kernels import BuildError
from kernels.lessons.lesson11 import (CUDA_LIBRARY, LIBRARY_BUGS, LIBRARY_FILES, build_cuda_library,
                                        check_cuda_library, make_library, planted_library)

pytestmark = pytest.mark.toolkit

BUGS = {bug.name: bug for bug in LIBRARY_BUGS}


def failing_text(report) -> str:
    return "\n".join(f"{c.label()} {c.problem}\n{c.detail}" for c in report.cases if not c.passed)


@pytest.fixture(scope="module")
def library(backend):
    return build_cuda_library(backend=backend)


@pytest.fixture(scope="module")
def planted(backend):
    """The extension of each planted copy, built the first time a test asks for it."""
    built = {}

    def get(name: str):
        if name not in built:
            built[name] = build_cuda_library(planted_library(BUGS[name]), backend)
        return built[name]
    return get


def test_the_makefile_builds_an_object_and_a_static_library_with_the_backends_compiler(backend, tmp_path):
    lib = make_library(CUDA_LIBRARY, backend, tmp_path)
    assert lib == tmp_path / "libvector_add.a" and (tmp_path / "vector_add.o").is_file()
    members = subprocess.run(["ar", "t", str(lib)], capture_output=True, text=True, check=True).stdout.split()
    assert members == ["vector_add.o"]


def test_the_fixed_library_passes_the_check(library):
    report = check_cuda_library(library, quiet=True)
    assert report.passed, str(report)
    assert len(report.cases) == 10  # add_gpu_out and add_gpu at five sizes, 2^20 + 3 past the capped grid


def test_the_linked_op_adds_like_torch(library, dev):
    a, b = torch.randn(5000, device=dev), torch.randn(5000, device=dev)
    torch.testing.assert_close(library.add_gpu(a, b), a + b, rtol=0, atol=0)


@pytest.mark.parametrize("call,message", [
    (lambda m, d: m.add_gpu(torch.ones(3, device=d), torch.ones(4, device=d)), "b must have a's shape [3], got [4]"),
    (lambda m, d: m.add_gpu(torch.ones(3, device=d, dtype=torch.float64), torch.ones(3, device=d)),
     "a must be float32, got Double"),
    (lambda m, d: m.add_gpu(torch.ones(6, device=d)[::2], torch.ones(3, device=d)), "a must be contiguous"),
    (lambda m, d: m.add_gpu_out(torch.ones(3, device=d), torch.ones(3, device=d), torch.empty(4, device=d)),
     "out must have a's shape [3], got [4]"),
], ids=["shape", "dtype", "strided", "out's shape"])
def test_the_binding_refuses_bad_tensors_saying_what_it_expected(library, dev, call, message):
    with pytest.raises(RuntimeError) as e:
        call(library, dev)
    assert message in str(e.value)


def test_the_binding_refuses_a_tensor_on_the_wrong_device(library, backend):
    other = "meta"  # neither the GPU nor the simulator's CPU tensors
    with pytest.raises(RuntimeError) as e:
        library.add_gpu(torch.ones(3, device=other), torch.ones(3, device=other))
    assert "a must be " + ("a CUDA tensor" if backend == "cuda" else "a CPU tensor") in str(e.value)


def test_i_le_n_writes_one_element_past_the_end(planted):
    report = check_cuda_library(planted("off_by_one"), quiet=True)
    assert not report.passed
    text = failing_text(report)
    assert "wrote past the end: element(s) 1000 (size is 1000) of out" in text, text


def test_a_grid_capped_at_4096_blocks_without_a_grid_stride_loop_leaves_the_tail_unwritten(planted):
    report = check_cuda_library(planted("capped_grid"), quiet=True)
    failing = [c for c in report.cases if not c.passed]
    assert [c.size for c in failing] == ["add_gpu_out 1048579", "add_gpu 1048579"], str(report)
    assert all(c.problem.startswith("3 of 1048579 elements are NaN") and "never written" in c.detail
               for c in failing), str(report)


def test_a_four_element_output_is_refused_at_every_size(planted):
    report = check_cuda_library(planted("four_floats"), quiet=True)
    failing = [c for c in report.cases if not c.passed]
    assert [c.size for c in failing] == [f"add_gpu {n}" for n in (0, 1, 31, 1000, 2**20 + 3)], str(report)
    assert "out must have a's shape [1000], got [4]" in failing_text(report)


def test_a_binding_named_AddGPU_is_reported_with_the_names_the_module_has(planted):
    report = check_cuda_library(planted("wrong_name"), quiet=True)
    assert not report.passed
    text = failing_text(report)
    assert "the extension has no function add_gpu" in text
    assert "Python calls add_gpu; the extension defines AddGPU, add_gpu_out." in text, text


def test_every_planted_bug_patches_its_file_once_and_the_copy_differs_from_the_library():
    for bug in LIBRARY_BUGS:
        copy = planted_library(bug)
        assert (copy / bug.file).read_text() != (CUDA_LIBRARY / bug.file).read_text()
        others = [n for n in LIBRARY_FILES if n != bug.file]
        assert all((copy / n).read_text() == (CUDA_LIBRARY / n).read_text() for n in others)


def test_the_planted_copies_take_every_file_the_library_has():
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "."], cwd=CUDA_LIBRARY, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    assert sorted(tracked) == sorted(LIBRARY_FILES)


def test_a_library_that_does_not_compile_is_a_build_error_with_the_compilers_words(backend, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in LIBRARY_FILES:
        text = (CUDA_LIBRARY / name).read_text()
        (broken / name).write_text(text.replace("out[i] = a[i] + b[i];", "out[i] = a[i] + c[i];"))
    line = next(n for n, text in enumerate((broken / "vector_add.cu").read_text().splitlines(), 1) if "c[i]" in text)
    with pytest.raises(BuildError) as e:
        make_library(broken, backend, tmp_path / "build")
    message = str(e.value)
    assert "make in broken/ failed" in message
    assert f"vector_add.cu:{line}" in message or f"vector_add.cu({line})" in message, message  # host compiler, nvcc
