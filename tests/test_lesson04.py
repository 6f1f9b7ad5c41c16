"""Lesson 04, memory-bound kernels: every copy and scale-add variant against PyTorch, bad inputs, the exercise."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import check, elementwise, like
from kernels.exercises import check_exercise, find, fitting_hint
from planting import assert_diagnosis, built, checked_in_notebook, self_check, self_check_of_planted, toolkit_beyond

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "04_memory_bound"
SOLUTION = ROOT / "solutions" / "04_memory_bound"
A = 1.5
# Empty, one element, every remainder n % 4 with and without whole float4s, ragged block edges.
SIZES = (0, 1, 2, 3, 4, 5, 31, 33, 1000, 4099, 2**20 + 3)


@pytest.fixture(scope="module")
def ext():
    return load("04")


def scale_add_ref(x, y):
    return torch.add(y, x, alpha=A)


def check_scale_add(fn, name, sizes=SIZES):
    return check(fn, scale_add_ref, elementwise(2), out=like(0), sizes=sizes, name=name,
                 raise_on_fail=True, quiet=True)


@pytest.mark.parametrize("name", ["copy1", "copy5"])
def test_copy_matches_torch(ext, name):
    check(getattr(ext, name), torch.clone, elementwise(1), out=like(0), sizes=SIZES, name=name,
          raise_on_fail=True, quiet=True)


@pytest.mark.parametrize("name", ["scale_add1", "scale_add2", "scale_add4", "scale_add5"])
def test_scale_add_matches_torch(ext, name):
    f = getattr(ext, name)
    check_scale_add(lambda x, y, out: f(A, x, y, out), name)


@pytest.mark.parametrize("block", [1, 32, 100, 1024])
def test_scale_add1_any_block_size_covers_every_element(ext, block):
    check_scale_add(lambda x, y, out: ext.scale_add1(A, x, y, out, block), f"scale_add1 block {block}",
                    sizes=(0, 1, 33, 1000, 65537))


@pytest.mark.parametrize("stride", [1, 2, 7, 32, 1000])
def test_scale_add3_strided_walk_still_computes_the_same_op(ext, stride):
    check_scale_add(lambda x, y, out: ext.scale_add3(A, x, y, out, stride), f"scale_add3 stride {stride}")


@pytest.mark.parametrize("name", ["scale_add1", "scale_add4", "scale_add5"])
def test_scale_add_takes_any_shape(ext, name, dev):
    x, y = torch.randn(33, 31, device=dev), torch.randn(33, 31, device=dev)
    out = torch.full_like(x, float("nan"))
    getattr(ext, name)(A, x, y, out)
    torch.testing.assert_close(out, scale_add_ref(x, y), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Bad inputs: each launcher refuses them with a message that says what it expected.

SCALE_ADDS = ["scale_add1", "scale_add2", "scale_add3", "scale_add4", "scale_add5"]


def call(ext, name, x, y, out):
    if name.startswith("copy"):
        return getattr(ext, name)(x, out)
    if name == "scale_add3":
        return ext.scale_add3(A, x, y, out, 4)
    return getattr(ext, name)(A, x, y, out)


@pytest.mark.parametrize("name", SCALE_ADDS)
def test_rejects_wrong_dtype(ext, name, dev):
    x = torch.randn(64, device=dev)
    with pytest.raises(RuntimeError, match="y must have dtype Float, got Double"):
        call(ext, name, x, x.double(), torch.empty_like(x))


@pytest.mark.parametrize("name", SCALE_ADDS + ["copy1", "copy5"])
def test_rejects_shape_mismatch(ext, name, dev):
    x = torch.randn(64, device=dev)
    with pytest.raises(RuntimeError, match=r"x and out must have the same shape, got \[64\] and \[63\]"):
        call(ext, name, x, x.clone(), torch.empty(63, device=dev))


@pytest.mark.parametrize("name", SCALE_ADDS + ["copy1", "copy5"])
def test_rejects_non_contiguous(ext, name, dev):
    x = torch.randn(64, 2, device=dev)[:, 0]  # every other float
    with pytest.raises(RuntimeError, match="x must be contiguous"):
        call(ext, name, x, torch.randn(64, device=dev), torch.empty(64, device=dev))


@pytest.mark.parametrize("name", ["scale_add4", "scale_add5", "copy5"])
def test_float4_launchers_reject_a_misaligned_view(ext, name, dev):
    buf = torch.randn(65, device=dev)
    x = buf[1:]  # contiguous, but 4 bytes past a 16-byte boundary
    with pytest.raises(RuntimeError, match=r"x must be 16-byte aligned for float4 loads and stores, got an address 16k \+ 4"):
        call(ext, name, x, torch.randn(64, device=dev), torch.empty(64, device=dev))
    out = torch.empty(66, device=dev)[2:]
    with pytest.raises(RuntimeError, match=r"out must be 16-byte aligned .* 16k \+ 8"):
        call(ext, name, torch.randn(64, device=dev), torch.randn(64, device=dev), out)


@pytest.mark.parametrize("name", ["scale_add1", "scale_add2", "scale_add3"])
def test_float_launchers_accept_a_misaligned_view(ext, name, dev):
    buf, ybuf = torch.randn(65, device=dev), torch.randn(65, device=dev)
    out = torch.empty(64, device=dev)
    call(ext, name, buf[1:], ybuf[1:], out)
    torch.testing.assert_close(out, scale_add_ref(buf[1:], ybuf[1:]), rtol=1e-5, atol=1e-6)


def test_rejects_bad_block_and_stride(ext, dev):
    x = torch.randn(64, device=dev)
    with pytest.raises(RuntimeError, match="block must be 1..1024 threads"):
        ext.scale_add1(A, x, x, torch.empty_like(x), 2048)
    with pytest.raises(RuntimeError, match="stride must be 1..65535 elements, got 0"):
        ext.scale_add3(A, x, x, torch.empty_like(x), 0)


@pytest.mark.parametrize("name", ["scale_add1", "scale_add5"])
def test_rejects_a_tensor_on_another_device(ext, name, dev, backend):
    if backend == "sim":
        pytest.skip("on the simulator every tensor is a CPU tensor: there is no other device to pass")
    x = torch.randn(64, device=dev)
    with pytest.raises(RuntimeError, match="y must be a CUDA tensor, got a tensor on cpu"):
        call(ext, name, x, x.cpu(), torch.empty_like(x))


# ---------------------------------------------------------------------------------------------
# The exercise: its self-check fails on the stub and on typical bugs, and passes on the solution.

# Bugs planted in the solution, one change each: (old, new, the diagnosis the self-check must give,
# the hint it prints first: the one tagged for that diagnosis, else hint 1, the plan).
PLANTED_BUGS = {
    "lesson04_notail.cu": ("  if (j < n) out[j] = a * x[j] + y[j];\n", "", "never written (still the NaN poison)", 1),
    "lesson04_noloop.cu": ("for (int64_t i = t; i < n4; i += stride) {", "if (int64_t i = t; i < n4) {",
                           "never written (still the NaN poison)", 1),
    "lesson04_tail_off_by_one.cu": ("if (j < n) out[j]", "if (j <= n) out[j]", "past the end", 4),
    "lesson04_no_scale_in_z.cu": ("a * xv.z + yv.z", "xv.z + yv.z", "differ", 3),
}


def test_exercise_stub_builds_and_fails_its_self_check_with_unwritten_elements():
    report = self_check("04", "scale_add_vec4", built(LESSON / "scale_add_vec4.cu"))
    assert_diagnosis(report, "never written (still the NaN poison)")


@checked_in_notebook
def test_exercise_self_check_passes_on_the_solution():
    assert check_exercise("04", "scale_add_vec4", path=built(SOLUTION / "scale_add_vec4.cu")).passed


@pytest.mark.parametrize("bug", toolkit_beyond(sorted(PLANTED_BUGS), keep=("lesson04_tail_off_by_one.cu",)))
def test_exercise_self_check_names_a_planted_bug_and_shows_the_hint_that_fits_it_first(bug):
    old, new, diagnosis, first_hint = PLANTED_BUGS[bug]
    report = self_check_of_planted("04", "scale_add_vec4", SOLUTION / "scale_add_vec4.cu", bug, old, new)
    assert_diagnosis(report, diagnosis)
    assert fitting_hint(find("04", "scale_add_vec4")[0], report) == first_hint


# --- TORCH_CHECK messages with numbers streamed in (the evidence for how kernels/ formats them) -------

# The ops run in a child process: if streaming a number crashed the process, the test reports the crash instead of
# taking pytest down with it. One child runs them all (each process imports torch: seconds of CPU), one op a line;
# where a child dies, the op it was running is that crash, and a new child runs the ones left.
RAISE_EACH = """
import sys, torch
from kernels import device, load
ext = load(sys.argv[1])
for op in sys.argv[2:]:
    print("=== op", op, flush=True)
    try:
        getattr(ext, op)(torch.zeros(2, 3, device=device()))
        print("no error raised", flush=True)
    except RuntimeError as e:
        print(str(e).splitlines()[0], flush=True)
"""
MESSAGES = {
    "fail_int64": "numel is 6, streamed as an int64_t",
    "fail_int": "dim is 2, streamed as an int",
    "fail_sizes": "sizes are [2, 3], streamed as sizes()",
    "fail_dtype": "dtype is Float",
}


@pytest.fixture(scope="module")
def raised():
    """{op: (the exit code of the child that ran it, 0 unless it died then; the first line of the op's error; the
    child's stderr)}. An op whose line never came killed its child; a child that died after every op's line (at its
    exit) gives its code to each of them, as a child of their own would have."""
    env, left, out = {**os.environ, "PYTHONPATH": str(ROOT)}, list(MESSAGES), {}
    while left:
        run = subprocess.run([sys.executable, "-c", RAISE_EACH, str(ROOT / "tests/toolkit/check_message.cu"), *left],
                             capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
        said: dict[str, list[str]] = {}
        for line in run.stdout.splitlines():
            if line.startswith("=== op "):
                said[line.split()[-1]] = []
            elif said:
                said[list(said)[-1]].append(line)
        for op in said:
            died = run.returncode != 0 and (not said[op] or all(said.values()))
            out[op] = (run.returncode if died else 0, "\n".join(said[op]), run.stderr)
        if not said:  # died before its first op (the build, or torch): every op left gets that
            out.update({op: (run.returncode or 1, run.stdout, run.stderr) for op in left})
        left = [op for op in left if op not in out]
    return out


@pytest.mark.parametrize("op, message", MESSAGES.items())
def test_torch_check_message_takes_a_number_streamed_straight_in(op, message, dev, raised):
    returncode, printed, stderr = raised[op]
    if returncode != 0 and dev.type == "cuda" and op != "fail_dtype":
        # Measured on an H100 (torch 2.11, CUDA 13.0): a number or sizes() streamed into TORCH_CHECK in an
        # nvcc-built extension killed the process (SIGSEGV); a dtype did not. Hence std::to_string in kernels/.
        pytest.skip(f"{op}: streaming a number into TORCH_CHECK killed the process (exit {returncode}) on this "
                    "GPU build; kernels/ formats numbers with std::to_string")
    assert returncode == 0, f"{op}: the process died with exit code {returncode}\n{stderr[-2000:]}"
    assert message in printed, f"{op}: expected {message!r} in the error, got {printed!r}"
