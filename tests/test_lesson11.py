"""Lesson 11: other routes to the GPU. load_inline (a string of CUDA through the project's loader), the
Triton kernels (under Triton's interpreter on the CPU), the CuPy route (only where CuPy and a GPU are),
and the "spot the bugs" exercise with its planted bugs."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available() and "triton" not in sys.modules:
    # Triton's interpreter must be chosen before triton is first imported (see kernels/lessons/lesson11_triton.py)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernels import BuildError, cupy_route, load, load_inline, triton_ops  # noqa: E402
from kernels.build import build_root  # noqa: E402
from kernels.exercises import check_exercise, find, fitting_hint  # noqa: E402
from kernels.lessons.lesson11 import (TRITON_SHAPES, bias_gelu_grads_ref, bias_gelu_ref,  # noqa: E402
                                        check_bias_gelu, grads_of, with_bias)
from kernels.lessons.lesson07 import check_softmax, softmax_ref  # noqa: E402
from planting import assert_diagnosis, checked_in_notebook, plant  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "11_other_routes"
SOLUTION = ROOT / "solutions" / "11_other_routes" / "cupy_autograd.py"
REFERENCE = ROOT / "kernels" / "reference" / "11_other_routes.cu"

INLINE_SRC = r'''
#include "helpers.cuh"
#include <ATen/ops/empty_like.h>

__global__ void triple_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 3.0f * x[i];
}

at::Tensor triple(const at::Tensor& x) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  auto y = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return y;
  triple_kernel<<<ceil_div(n, (int64_t)256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return y;
}

TORCH_LIBRARY_FRAGMENT(lesson11_inline, m) { m.def("triple(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(lesson11_inline, CUDA, m) { m.impl("triple", &triple); }
'''


def _triton_skip() -> str:
    """Why the Triton tests cannot run in this process ('' when they can)."""
    why = triton_ops.missing()
    if why:
        return why
    if not torch.cuda.is_available() and not triton_ops.interpreting():
        return "triton was imported without TRITON_INTERPRET=1 before this module, and there is no GPU"
    return ""


needs_triton = pytest.mark.skipif(bool(_triton_skip()), reason=_triton_skip() or "-")
needs_cupy = pytest.mark.skipif(bool(cupy_route.missing()), reason=cupy_route.missing() or "-")


@pytest.fixture(scope="module")
def ext():
    return load("11")


@pytest.fixture(scope="module")
def inline():
    return load_inline("triple", INLINE_SRC)


# ---------------------------------------------------------------------------------------------
# The reference file and load_inline.

@checked_in_notebook  # in make test-all by the solution notebook's compared cell (tests/planting.py)
def test_the_reference_ops_match_pytorch_on_ragged_shapes_and_an_empty_batch(ext):
    check_bias_gelu(ext.bias_gelu, name="bias_gelu", quiet=True, raise_on_fail=True)


def test_the_reference_backward_matches_autograd(ext, dev):
    x, b, g = (torch.randn(s, device=dev) for s in ((33, 1000), (1000,), (33, 1000)))
    dx = ext.bias_gelu_backward(g, x, b)
    torch.testing.assert_close(dx, bias_gelu_grads_ref(x, b, g)[0], rtol=1e-5, atol=1e-5)


def test_the_reference_refuses_a_bias_of_the_wrong_length(ext, dev):
    with pytest.raises(RuntimeError, match=r"bias must have shape \[8\] \(one value per column of x\), got \[5\]"):
        ext.bias_gelu(torch.randn(4, 8, device=dev), torch.randn(5, device=dev))


def test_a_string_of_cuda_loads_as_ops_registered_by_a_fragment(inline, dev):
    x = torch.randn(1000, device=dev)
    assert torch.equal(inline.triple(x), 3 * x)
    assert torch.equal(torch.ops.lesson11_inline.triple(x), 3 * x)


def test_the_same_string_loads_from_the_cache_in_this_process_and_in_a_new_one(inline, capsys):
    assert load_inline("triple", INLINE_SRC) is inline
    assert "building" not in capsys.readouterr().out
    code = ("import sys; sys.path.insert(0, '.'); from kernels import load_inline; "
            f"e = load_inline('triple', {INLINE_SRC!r}); print(e.ops())")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "building" not in run.stdout and "['triple']" in run.stdout, run.stdout


def test_an_edited_string_that_defines_the_same_op_again_is_refused_not_a_crash(inline):
    with pytest.raises(BuildError, match=r"the op lesson11_inline::triple is already defined in this process"):
        load_inline("triple", INLINE_SRC.replace("3.0f * x[i]", "4.0f * x[i]"))


def test_the_string_is_written_once_under_build_with_a_hash_of_its_text(inline):
    written = list((build_root() / "inline").glob("triple-*/triple.cu"))
    assert [p.read_text() for p in written].count(INLINE_SRC) == 1


def test_a_compile_error_names_the_line_of_the_string():
    src = '#include "helpers.cuh"\n\n__global__ void k(float* x) {\n  x[0] = not_declared_anywhere;\n}\n'
    with pytest.raises(BuildError) as e:
        load_inline("broken", src)
    msg = str(e.value)
    assert "line 4 of the inline source 'broken'" in msg, msg
    assert "not_declared_anywhere" in msg
    assert "inline/broken-" not in msg  # the string's line, not the file it was written to


@pytest.mark.parametrize("name, src, match", [
    ("has space", "x", "must be an identifier"),
    ("ok", "   \n", "non-empty string"),
    ("ok", None, "non-empty string"),
])
def test_load_inline_refuses_a_bad_name_or_source_saying_what_was_expected(name, src, match):
    with pytest.raises(ValueError, match=match):
        load_inline(name, src)


# ---------------------------------------------------------------------------------------------
# Triton.

@pytest.fixture(scope="module")
def triton_ops_registered():
    return triton_ops.register()


@needs_triton
def test_the_triton_bias_gelu_passes_the_checker(triton_ops_registered):
    shapes = ((1, 1), (3, 31), (7, 33), (33, 1000), (5, 4097), (0, 8))
    dtypes = (torch.float32,) if not torch.cuda.is_available() else (torch.float32, torch.bfloat16)
    check_bias_gelu(triton_ops_registered.bias_gelu, shapes, dtypes=dtypes, orders=("forward",), quiet=True,
                    raise_on_fail=True)


@checked_in_notebook  # in make test-all by the solution notebook's compared cell (tests/planting.py)
@needs_triton
def test_the_triton_softmax_passes_lesson_07s_checker_with_masked_and_large_rows(triton_ops_registered):
    check_softmax(lambda x, out: out.copy_(triton_ops_registered.softmax(x)), TRITON_SHAPES, quiet=True,
                  raise_on_fail=True)


@needs_triton
def test_the_triton_softmax_gives_zeros_for_a_fully_masked_row(triton_ops_registered, dev):
    x = torch.randn(3, 40, device=dev)
    x[1] = float("-inf")
    y = triton_ops_registered.softmax(x)
    assert torch.equal(y[1], torch.zeros(40, device=dev))
    torch.testing.assert_close(y, softmax_ref(x))


@needs_triton
def test_the_triton_ops_pass_opcheck(triton_ops_registered, dev):
    x, b = torch.randn(4, 33, device=dev), torch.randn(33, device=dev)
    torch.library.opcheck(torch.ops.triton_routes.bias_gelu, (x, b), test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.triton_routes.softmax, (x,), test_utils=("test_schema", "test_faketensor"))


@needs_triton
@pytest.mark.parametrize("call, match", [
    (lambda ops, d: ops.softmax(torch.randn(2, 3, 4, device=d)), r"x must be 2-D \(rows, cols\), got shape \[2, 3, 4\]"),
    (lambda ops, d: ops.softmax(torch.randn(4, 8, device=d).t()), "x must be contiguous"),
    (lambda ops, d: ops.softmax(torch.randn(2, 8, device=d, dtype=torch.float64)), "float32 or bfloat16"),
    (lambda ops, d: ops.bias_gelu(torch.randn(4, 8, device=d), torch.randn(5, device=d)), r"shape \[8\]"),
])
def test_the_triton_ops_refuse_bad_inputs_saying_what_was_expected(triton_ops_registered, dev, call, match):
    with pytest.raises(ValueError, match=match):
        call(triton_ops_registered, dev)


def _matmul_failures(launch, dev, only: str | None = None) -> list[str]:
    """The cases (or the case `only`) where launch(a, b, out, bias, gelu) leaves `out` (poisoned with NaN) unlike
    the float64 product: ragged M, N, K (no multiples of a tile), transposed and sliced views, the epilogue and
    empty sides in float32, the ragged, transposed and fused cases in each 16-bit dtype too."""
    def t(rows, cols, dtype):  # a transposed view: strides (1, rows)
        return torch.randn(cols, rows, device=dev, dtype=dtype).t()

    fp32_tol = (3e-2, 1e-2) if torch.device(dev).type == "cuda" else (1e-4, 1e-4)  # TF32 on the GPU's tensor cores
    tol = {torch.float32: fp32_tol, torch.float16: (2e-2, 1e-2), torch.bfloat16: (1e-1, 2e-2)}
    failures = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        r = lambda *shape: torch.randn(*shape, device=dev, dtype=dtype)  # noqa: E731
        cases = {"37x45 @ 45x29": (r(37, 45), r(45, 29), None, False),
                 "a.t()": (t(37, 45, dtype), r(45, 29), None, False),
                 "b.t()": (r(37, 45), t(45, 29, dtype), None, False),
                 "a.t() @ b.t()": (t(37, 45, dtype), t(45, 29, dtype), None, False),
                 "a sliced (row stride 64)": (r(37, 64)[:, 3:48], r(45, 29), None, False),
                 "+ bias, GELU": (r(37, 45), r(45, 29), r(29), True),
                 "+ bias": (r(37, 45), r(45, 29), r(29), False),
                 "GELU": (r(37, 45), r(45, 29), None, True),
                 "K = 0, + bias": (r(5, 0), r(0, 7), r(7), False),
                 "M = 0": (r(0, 9), r(9, 7), None, False)}
        if torch.device(dev).type == "cuda":  # GPU tiles are up to 256 wide: N = 270 puts two tile columns in a band
            cases["37x45 @ 45x270"] = (r(37, 45), r(45, 270), None, False)  # shorter than GROUP_SIZE_M rows
        for name, (a, b, bias, gelu) in cases.items():
            if only not in (None, f"{name} {dtype}") or dtype != torch.float32 and name not in HALF_CASES:
                continue
            want = a.double() @ b.double() + (0 if bias is None else bias.double())
            want = torch.nn.functional.gelu(want, approximate="tanh") if gelu else want
            out = torch.full((a.shape[0], b.shape[1]), float("nan"), device=dev, dtype=dtype)
            launch(a, b, out, bias, gelu)
            atol, rtol = tol[dtype]
            if not torch.allclose(out.double(), want.to(dtype).double(), atol=atol, rtol=rtol):
                failures.append(f"{name} {dtype}")
    return failures


HALF_CASES = ("37x45 @ 45x29", "a.t() @ b.t()", "+ bias, GELU")


@needs_triton
def test_the_triton_matmul_matches_torch_on_ragged_transposed_and_fused_cases(triton_ops_registered, dev):
    op = lambda a, b, out, bias, gelu: out.copy_(triton_ops_registered.matmul(a, b, bias, gelu))  # noqa: E731
    assert _matmul_failures(op, dev) == []


MATMUL_BUGS = {  # name: (the right text, the planted one, a case it must fail)
    "b_assumed_row_contiguous": ("cols[None, :] * stride_bn", "cols[None, :]", "b.t() torch.float32"),
    "ragged_k_step_forgotten": ("for k0 in range(0, K, BK):", "for k0 in range(0, K // BK * BK, BK):",
                                "37x45 @ 45x29 torch.float32"),
    "short_last_band_ignored": ("first_row + (pid % per_band) % rows", "first_row + (pid % per_band) % GROUP_SIZE_M",
                                {"cpu": "37x45 @ 45x29 torch.float32", "cuda": "37x45 @ 45x270 torch.float32"}),
}


@needs_triton
@pytest.mark.parametrize("bug", MATMUL_BUGS)
def test_the_matmul_check_fails_a_planted_bug(bug, dev):
    import importlib.util

    old, new, case = MATMUL_BUGS[bug]
    case = case if isinstance(case, str) else case[torch.device(dev).type]  # a band is short for other shapes there
    path = plant(ROOT / "kernels" / "lessons" / "lesson11_triton.py", old, new, f"lesson11_triton_{bug}.py")
    spec = importlib.util.spec_from_file_location(f"kernels.lessons.planted_{bug}", path)  # its relative imports work
    planted = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(planted)
    assert _matmul_failures(planted.matmul_launch, dev, only=case) == [case]  # the right kernel passes it (above)


@needs_triton
def test_the_matmul_kernels_tile_order_is_the_pictures(dev):
    import triton
    import triton.language as tl

    @triton.jit
    def probe(out_ptr, tiles_m, tiles_n, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        row, col = triton_ops._tile_of(pid, tiles_m, tiles_n, GROUP)
        tl.store(out_ptr + 2 * pid, row)
        tl.store(out_ptr + 2 * pid + 1, col)

    for tiles_m, tiles_n, group in ((8, 8, 4), (3, 2, 2), (5, 3, 8), (7, 4, 3)):
        out = torch.full((tiles_m * tiles_n, 2), -1, device=dev, dtype=torch.int32)
        probe[(tiles_m * tiles_n,)](out, tiles_m, tiles_n, GROUP=group)
        order = [tuple(rc) for rc in out.tolist()]
        assert order == triton_ops.tile_order(tiles_m, tiles_n, group)
        assert sorted(order) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)]  # each tile once


@needs_triton
def test_the_matmul_op_passes_opcheck(triton_ops_registered, dev):
    a, b, bias = torch.randn(5, 18, device=dev), torch.randn(18, 7, device=dev), torch.randn(7, device=dev)
    for args in ((a, b), (a, b, bias, True)):
        torch.library.opcheck(torch.ops.triton_routes.matmul, args, test_utils=("test_schema", "test_faketensor"))


@needs_triton
@pytest.mark.parametrize("call, match", [
    (lambda mm, d: mm(torch.randn(4, device=d), torch.randn(4, 3, device=d)),
     r"2-D matrices, got shapes \[4\] and \[4, 3\]"),
    (lambda mm, d: mm(torch.randn(4, 5, device=d), torch.randn(4, 3, device=d)), r"got \[4, 5\] @ \[4, 3\]"),
    (lambda mm, d: mm(torch.randn(4, 5, device=d, dtype=torch.float64),
                      torch.randn(5, 3, device=d, dtype=torch.float64)),
     "float32, bfloat16, float16, one dtype for both, got torch.float64"),
    (lambda mm, d: mm(torch.randn(4, 5, device=d), torch.randn(5, 3, device=d, dtype=torch.float16)),
     "one dtype for both, got torch.float32 and torch.float16"),
    (lambda mm, d: mm(torch.randn(4, 5, device=d),
                      torch.randn(5, 3, device="meta" if torch.device(d).type == "cpu" else "cpu")),
     "on one device"),
    (lambda mm, d: mm(torch.randn(4, 5, device=d), torch.randn(5, 3, device=d), torch.randn(4, device=d)),
     r"bias must be a torch.float32 tensor of shape \[3\]"),
])
def test_the_triton_matmul_refuses_bad_inputs_saying_what_was_expected(triton_ops_registered, dev, call, match):
    with pytest.raises(ValueError, match=match):
        call(triton_ops_registered.matmul, dev)


def test_without_triton_the_route_says_why_and_refuses_to_register(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # as on a CPU-only setup: `import triton` fails
    assert "Triton is not installed" in triton_ops.missing()
    with pytest.raises(RuntimeError, match="Triton is not installed"):
        triton_ops.register()


def test_without_the_interpreter_a_cpu_tensor_gets_a_clear_error_in_a_fresh_process():
    if triton_ops.missing():
        pytest.skip(triton_ops.missing())
    code = ("import sys; sys.path.insert(0, '.'); import os; os.environ.pop('TRITON_INTERPRET', None); "
            "import torch; from kernels import triton_ops; "
            "import triton\ntry: triton_ops.softmax_launch(torch.randn(2, 3), torch.empty(2, 3))\n"
            "except RuntimeError as e: print(e)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert "set os.environ['TRITON_INTERPRET'] = '1' before anything imports triton" in run.stdout, run.stdout + run.stderr


# ---------------------------------------------------------------------------------------------
# CuPy (a GPU and CuPy only).

def test_the_cupy_route_compiles_the_kernels_section_of_the_reference_file_alone():
    src = cupy_route.kernel_source()
    assert "extern \"C\" __global__ void bias_gelu_kernel1" in src
    assert "bias_gelu_backward_kernel1" in src
    assert "#include" not in src and "TORCH_LIBRARY" not in src and "at::Tensor" not in src
    assert src in REFERENCE.read_text()


def test_without_cupy_or_a_gpu_the_cupy_route_says_why():
    why = cupy_route.missing()
    if torch.cuda.is_available():
        try:
            import cupy  # noqa: F401
            assert why == ""
        except ImportError:
            assert "CuPy is not installed" in why
    else:
        assert "PyTorch sees none" in why


@needs_cupy
def test_cupy_shares_the_tensors_memory_through_dlpack():
    x = torch.randn(1000, device="cuda")
    a = cupy_route.as_cupy(x)
    assert a.data.ptr == x.data_ptr()
    a[0] = 42.0  # a write through CuPy is a write to the tensor
    assert x[0].item() == 42.0


@needs_cupy
def test_the_cupy_routes_pass_the_checker(ext):
    check_bias_gelu(cupy_route.bias_gelu, name="cupy zero-copy", quiet=True, raise_on_fail=True)
    check_bias_gelu(cupy_route.bias_gelu_round_trip, ((3, 31), (33, 1000)), name="cupy round trip", quiet=True,
                    raise_on_fail=True)


@needs_cupy
def test_cupy_kernels_run_on_pytorchs_current_stream():
    s = torch.cuda.Stream()
    x, b = torch.randn(4096, 1024, device="cuda"), torch.randn(1024, device="cuda")
    with torch.cuda.stream(s):
        y = cupy_route.bias_gelu(x, b)  # queued on s, not on the default stream
        z = y * 1.0  # PyTorch's next kernel on s reads y after CuPy wrote it, with no synchronisation between
    s.synchronize()
    torch.testing.assert_close(z, bias_gelu_ref(x, b))


# ---------------------------------------------------------------------------------------------
# The exercise: spot the bugs.

def test_the_exercise_as_given_fails_its_self_check_on_all_three_bugs():
    report = check_exercise("11")
    assert_diagnosis(report, "launch_config(", "scalar_args(", "the backward ran with x changed")


# what the three fixes are made of: the report must not say them ("spot the bugs" is not "read the report")
FIXES = ("(grid, block", "save_for_backward", "saved_tensors", "np.int64", "np.int32", "int64(", "int32(", "ctx.")


def test_the_report_on_the_exercise_says_what_is_wrong_for_which_input_not_how_to_fix_it():
    report = check_exercise("11", show_hints=0)
    failing = {c.size: f"{c.problem}\n{c.detail}" for c in report.cases if not c.passed}
    assert set(failing) == {"launch config", "scalar types", "x changed in place", "bias changed in place"}, str(report)
    for label, text in failing.items():
        told = [f for f in FIXES if f in text]
        assert not told, f"the {label} case names a fix, {told}:\n{text}"
    assert "returns grid" in failing["launch config"] and "returns Python int" in failing["scalar types"]
    assert "gradients at the new x" in failing["x changed in place"]


def test_the_solution_passes_its_self_check():
    report = check_exercise("11", solution=True)
    assert report.passed, str(report)


def test_the_exercise_file_is_the_solution_with_the_three_bugs():
    given = (LESSON / "cupy_autograd.py").read_text()
    assert "return (THREADS,), (blocks,)" in given and "return n, C" in given and "ctx.x, ctx.bias = x, bias" in given
    assert "save_for_backward" not in given


SAVED, UNPACKED = "ctx.save_for_backward(x, bias)", "x, bias = ctx.saved_tensors"
BUGS = {  # (old text of the solution, new text) in order, the diagnosis, the number of the hint that fits
    "grid_and_block_swapped": ([("return (blocks,), (THREADS,)", "return (THREADS,), (blocks,)")],
                               "launch_config(1048579) returns grid (256,), block (4097,)", 1),
    "one_block_short": ([("blocks = (n + THREADS - 1) // THREADS", "blocks = n // THREADS")],
                        "elements 1048576 to 1048578 are never computed", 1),
    "python_ints": ([("return np.int64(n), np.int32(C)", "return n, C")],
                    "scalar_args(3000000000, 7) returns Python int 3000000000, Python int 7", 2),
    "int32_for_long_long": ([("return np.int64(n), np.int32(C)", "return np.int32(n), np.int32(C)")],
                            "scalar_args(3000000000, 7) raised OverflowError", 2),
    "ctx_attribute": ([(SAVED, "ctx.saved = (x, bias)"), (UNPACKED, "x, bias = ctx.saved")],
                      "the backward ran with x changed after the forward", 3),
    # x saved as it should be, bias not: a bias changed in place after the forward gives a wrong dx silently
    "bias_as_ctx_attribute": ([(SAVED, "ctx.save_for_backward(x)\n        ctx.bias = bias"),
                               (UNPACKED, "(x,) = ctx.saved_tensors\n        bias = ctx.bias")],
                              "the backward ran with bias changed after the forward", 3),
    # right gradients from a copy of x: a second x held until the backward
    "x_copied_into_ctx": ([(SAVED, "ctx.save_for_backward(bias)\n        ctx.xc = x.detach().clone()"),
                           (UNPACKED, "(bias,) = ctx.saved_tensors\n        x = ctx.xc")],
                          "the backward kept its own copy of x", 3),
}


def planted(bug: str) -> Path:
    """The solution with BUGS[bug]'s replacements, under build/planted/."""
    path, name = SOLUTION, f"lesson11_cupy_autograd_{bug}.py"
    for old, new in BUGS[bug][0]:
        path = plant(path, old, new, name)
    return path


@pytest.mark.parametrize("bug", list(BUGS))
def test_the_self_check_catches_a_planted_bug_with_its_diagnosis_and_the_hint_that_fits_it(bug):
    _, diagnosis, hint = BUGS[bug]
    report = check_exercise("11", path=planted(bug))
    assert_diagnosis(report, diagnosis)
    assert fitting_hint(find("11", "cupy_autograd")[0], report) == hint


def test_a_copy_of_x_kept_on_ctx_is_reported_as_a_copy_with_right_gradients_not_as_new_values():
    report = check_exercise("11", path=planted("x_copied_into_ctx"))
    failing = [c for c in report.cases if not c.passed]
    assert [c.size for c in failing] == ["x changed in place"], str(report)
    assert "the gradients are right" in failing[0].detail and "new values" not in failing[0].detail


def test_an_exercise_file_that_does_not_import_is_reported_not_raised(tmp_path):
    bad = tmp_path / "cupy_autograd.py"
    bad.write_text("def launch_config(n):\n    return (\n")
    report = check_exercise("11", path=bad)
    assert not report.passed and report.cases[0].problem == "the file does not import"


def test_the_self_check_checks_the_gradients_of_both_inputs():
    x, b, g = torch.randn(3, 5), torch.randn(5), torch.randn(3, 5)
    dx, db = grads_of(lambda x, b: torch.nn.functional.gelu(x + b, approximate="tanh"))(x, b, g)
    want_dx, want_db = bias_gelu_grads_ref(x, b, g)
    torch.testing.assert_close(dx, want_dx)
    torch.testing.assert_close(db, want_db)
    assert with_bias((3, 5), torch.float32, "cpu")[1].shape == (5,)


# ---------------------------------------------------------------------------------------------
# The recorded figures and the comparison.

RECORDED = ("bench,variant,ms,gbps,tflops,of_copy,vs_eager,vs_compile,note,copy_gbps,device,date,torch\n"
            "bias + GELU 8192x8192 fp32,eager,0.5,1074,,0.36,1.0,0.4,,3000,H100,2026-11-23,2.11\n"
            "bias + GELU 8192x8192 fp32,load (.cu),0.2,2684,,0.89,2.5,1.0,,3000,H100,2026-11-23,2.11\n"
            "bias + GELU 8192x8192 fp32,triton op,0.25,2147,,0.72,2.0,0.8,,3000,H100,2026-11-23,2.11\n"
            "build: first and cached,load (.cu): first build,41000,,,,,,,3000,H100,2026-11-23,2.11\n"
            "build: first and cached,load (.cu): cached load,120,,,,,,,3000,H100,2026-11-23,2.11\n")


def test_recorded_build_times_are_tabled_in_seconds_but_not_drawn_as_empty_bars(tmp_path, monkeypatch, capsys):
    import matplotlib.pyplot as plt

    from kernels.benchmarks import show_recorded

    (tmp_path / "lesson11.csv").write_text(RECORDED)
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.gcf().axes[0].get_title()))
    show_recorded("11", recorded_dir=tmp_path)
    assert shown == ["bias + GELU 8192x8192 fp32\nH100"]  # the chart names the GPU that made it
    builds = [line.split(": ", 1)[1].split() for line in capsys.readouterr().out.splitlines()
              if line.startswith("load (.cu): ")]
    assert builds == [["first", "build", "41.00", "s"], ["cached", "load", "0.12", "s"]]  # seconds, apart from the name


def test_the_comparison_reads_build_times_in_seconds_and_speed_from_the_recording(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from kernels.benchmarks.lesson11 import comparison

    (tmp_path / "lesson11.csv").write_text(RECORDED)
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    rows = {r["route"]: r for r in comparison(tmp_path)}
    assert rows["load (.cu)"]["first build s"] == 41.0 and rows["load (.cu)"]["cached load s"] == 0.12
    assert rows["load (.cu)"]["bias+GELU GB/s"] == 2684.0 and rows["triton"]["bias+GELU GB/s"] == 2147.0
    assert rows["cupy"]["first build s"] is None and rows["cupy"]["bias+GELU GB/s"] is None
    assert all(r["lines"] > 10 for r in rows.values())


def test_lines_of_code_skip_blank_lines_comments_and_docstrings():
    from kernels.benchmarks.lesson11 import code_lines

    assert code_lines('def f():\n    """doc\n    more"""\n    # note\n\n    return 1\n') == 2
    assert code_lines('#include "x.h"\n// comment\nint a;\n') == 2


def test_the_recorded_matmul_figures_are_tabled_or_said_to_be_missing(tmp_path, capsys):
    from kernels.benchmarks.lesson11 import matmul_figures

    (tmp_path / "lesson11.csv").write_text(RECORDED)  # no matmul rows yet
    assert matmul_figures(tmp_path) == []
    assert "not recorded yet" in capsys.readouterr().out
    (tmp_path / "lesson11.csv").write_text(
        RECORDED + "matmul 4096^3 bf16,eager,0.25,,550,,1.0,1.0,,3000,H100,2026-11-27,2.11\n"
                   "matmul 4096^3 bf16,triton (autotuned),0.275,,500,,0.91,0.91,,3000,H100,2026-11-27,2.11\n")
    rows = matmul_figures(tmp_path)
    assert [(r["variant"], r["tflops"], r["of cuBLAS"]) for r in rows] == [("eager", 550.0, 1.0),
                                                                          ("triton (autotuned)", 500.0, 0.91)]
    assert "cuBLAS (eager)" in capsys.readouterr().out
