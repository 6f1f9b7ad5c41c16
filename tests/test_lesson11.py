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
from planting import assert_diagnosis, plant  # noqa: E402

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


def test_the_solution_passes_its_self_check():
    report = check_exercise("11", solution=True)
    assert report.passed, str(report)


def test_the_exercise_file_is_the_solution_with_the_three_bugs():
    given = (LESSON / "cupy_autograd.py").read_text()
    assert "return (THREADS,), (blocks,)" in given and "return n, C" in given and "ctx.x, ctx.bias = x, bias" in given
    assert "save_for_backward" not in given


BUGS = {  # old text of the solution, new text, the diagnosis, the number of the hint that fits
    "grid_and_block_swapped": ("return (blocks,), (THREADS,)", "return (THREADS,), (blocks,)", "gives a block of", 1),
    "one_block_short": ("blocks = (n + THREADS - 1) // THREADS", "blocks = n // THREADS", "blocks of", 1),
    "python_ints": ("return np.int64(n), np.int32(C)", "return n, C", "not int64, int32", 2),
    "int32_for_long_long": ("return np.int64(n), np.int32(C)", "return np.int32(n), np.int32(C)",
                            "scalar_args(3000000000, 7) raised OverflowError", 2),
    "ctx_attribute": ("ctx.save_for_backward(x, bias)", "ctx.saved = (x, bias)", "changed after the forward", 3),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_the_self_check_catches_a_planted_bug_with_its_diagnosis_and_the_hint_that_fits_it(bug):
    old, new, diagnosis, hint = BUGS[bug]
    name = f"lesson11_cupy_autograd_{bug}.py"
    path = plant(SOLUTION, old, new, name)
    if bug == "ctx_attribute":  # the backward reads what the forward kept
        path = plant(path, "x, bias = ctx.saved_tensors", "x, bias = ctx.saved", name)
    report = check_exercise("11", path=path)
    assert_diagnosis(report, diagnosis)
    assert fitting_hint(find("11", "cupy_autograd")[0], report) == hint


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
            "build: first and cached (ms),load (.cu): first build,41000,,,,,,,3000,H100,2026-11-23,2.11\n"
            "build: first and cached (ms),load (.cu): cached load,120,,,,,,,3000,H100,2026-11-23,2.11\n")


def test_recorded_build_times_are_tabled_but_not_drawn_as_empty_bars(tmp_path, monkeypatch, capsys):
    import matplotlib.pyplot as plt

    from kernels.benchmarks import show_recorded

    (tmp_path / "lesson11.csv").write_text(RECORDED)
    shown = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(plt.gcf().axes[0].get_title()))
    show_recorded("11", recorded_dir=tmp_path)
    assert shown == ["bias + GELU 8192x8192 fp32"]
    assert "load (.cu): first build" in capsys.readouterr().out


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
