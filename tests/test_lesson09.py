"""Lesson 09: matrix multiply. Every fp32 variant against PyTorch on awkward (M, N, K), the float4 kernels'
one-float path, the tensor-core variants (bf16, fp16, TF32), bad inputs, the exercise and its teeth."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.check import Diagnosis
from kernels.exercises import check_exercise
from kernels.lessons import lesson09
from kernels.lessons.lesson09 import SHAPES, check_matmul, check_refusals, matmul_ref
from planting import assert_diagnosis, checked_in_notebook, plant, self_check, self_check_of_planted

# The reference variants run in one thread order: each order is a full run of every case, and the race check
# (small cases, first order) finds what the other orders would show. Exercises and planted bugs keep all three.
ONE_ORDER = ("forward",)

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "09_matmul" / "matmul_blocktile.cu"
FP32, HALF = lesson09.FP32, lesson09.HALF  # as the lesson declares them
# shapes that cross the 128-wide tiles of matmul5 .. matmul11 and their 16- and 32-deep steps
WIDE = ((129, 257, 33), (128, 128, 32), (3, 200, 70), (256, 5, 129))


@pytest.fixture(scope="module")
def ext():
    return load("09")


@checked_in_notebook  # in make test-all by the solution notebook's compared cells, in all 3 orders (tests/planting.py)
@pytest.mark.parametrize("name", FP32)
def test_every_fp32_variant_matches_torch_on_awkward_shapes(ext, name):
    check_matmul(getattr(ext, name), (*SHAPES, *WIDE), name=name, quiet=True, raise_on_fail=True, orders=ONE_ORDER)


@pytest.mark.parametrize("name", ["matmul6", "matmul7", "matmul8"])
def test_the_float4_kernels_take_the_one_float_path_for_misaligned_or_ragged_rows(ext, dev, name):
    buf = torch.randn(1 + 40 * 36, device=dev)
    a = buf[1:].view(40, 36)  # K a multiple of 4, but every row starts 4 bytes past a 16-byte boundary
    b = torch.randn(36, 37, device=dev)  # N = 37: rows of B and C start anywhere
    c = torch.empty(40, 37, device=dev)
    getattr(ext, name)(a, b, c)
    torch.testing.assert_close(c, matmul_ref(a, b), rtol=1e-4, atol=1e-3)


def test_k_zero_gives_zeros_and_an_empty_c_is_left_alone(ext, dev):
    for name in FP32:
        c = torch.full((3, 5), float("nan"), device=dev)
        getattr(ext, name)(torch.empty(3, 0, device=dev), torch.empty(0, 5, device=dev), c)
        assert torch.equal(c, torch.zeros(3, 5, device=dev)), name
        getattr(ext, name)(torch.empty(0, 4, device=dev), torch.randn(4, 5, device=dev), torch.empty(0, 5, device=dev))


@pytest.mark.parametrize("name", [*FP32, "matmul11"])
def test_transposed_inputs_and_mismatched_shapes_are_refused_saying_what_was_expected(ext, dev, name):
    report = check_refusals(getattr(ext, name), dev, quiet=True)
    assert report.passed, str(report)
    op = getattr(ext, name)
    a, b = torch.randn(6, 4, device=dev), torch.randn(4, 5, device=dev)
    with pytest.raises(RuntimeError, match=r"a's columns must equal b's rows \(a: \[M, K\], b: \[K, N\]\), got a \[6, 4\] and b \[5, 5\]"):
        op(a, torch.randn(5, 5, device=dev), torch.empty(6, 5, device=dev))
    with pytest.raises(RuntimeError, match=r"c must have shape \[M, N\] = \[6, 5\], got \[6, 4\]"):
        op(a, b, torch.empty(6, 4, device=dev))
    with pytest.raises(RuntimeError, match="a must be float32.*got Double"):
        op(a.double(), b, torch.empty(6, 5, device=dev))
    with pytest.raises(RuntimeError, match=r"b must have 2 dimensions, got shape \[4\]"):
        op(a, torch.randn(4, device=dev), torch.empty(6, 5, device=dev))
    with pytest.raises(RuntimeError, match="c must be contiguous"):
        op(a, b, torch.empty(5, 6, device=dev).t())


@pytest.mark.parametrize("name", HALF)
def test_the_tensor_core_variants_refuse_float32_and_mixed_dtypes(ext, dev, name):
    a = torch.randn(4, 4, device=dev)
    with pytest.raises(RuntimeError, match="a must be bfloat16 or float16"):
        getattr(ext, name)(a, a, torch.empty_like(a))
    h, bf = a.half(), a.bfloat16()
    with pytest.raises(RuntimeError, match="a, b and c must have one dtype"):
        getattr(ext, name)(h, bf, torch.empty_like(h))


def test_a_tensor_on_the_wrong_device_is_refused(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    with pytest.raises(RuntimeError, match="a must be a CUDA tensor"):
        ext.matmul8(torch.randn(4, 4), torch.randn(4, 4, device=dev), torch.empty(4, 4, device=dev))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@checked_in_notebook
@pytest.mark.parametrize("name", HALF)
def test_the_wmma_variants_match_torch_in_bf16_and_fp16_on_awkward_shapes(ext, name, dtype):
    check_matmul(getattr(ext, name), (*SHAPES, *WIDE), dtypes=(dtype,), name=name, quiet=True, raise_on_fail=True,
                 orders=ONE_ORDER)


# K and N multiples of 8, so matmul12 takes its asynchronous 16-byte copies, with M, N and K crossing its
# 128x256x32 tiles: the copies past an edge must read nothing and write zeros (zfill)
ALIGNED_EDGES = ((129, 264, 40), (3, 8, 264), (200, 136, 8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matmul12_zero_fills_the_tile_edges_of_shapes_with_16_byte_rows(ext, dtype):
    check_matmul(ext.matmul12, ALIGNED_EDGES, dtypes=(dtype,), name="matmul12", quiet=True, raise_on_fail=True,
                 orders=ONE_ORDER)


def test_matmul12_takes_the_value_by_value_path_when_a_row_is_not_16_byte_aligned(ext, dev):
    buf = torch.randn(1 + 40 * 48, device=dev).bfloat16()
    a = buf[1:].view(40, 48)  # K a multiple of 8, but every row of A starts 2 bytes past a 16-byte boundary
    b = torch.randn(48, 264, device=dev).bfloat16()
    c = torch.full((40, 264), float("nan"), device=dev).bfloat16()
    ext.matmul12(a, b, c)
    torch.testing.assert_close(c, matmul_ref(a, b), rtol=1.6e-2, atol=1e-2)


def tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32 (10 mantissa bits) to nearest, ties away from zero, as __float_to_tf32 does."""
    bits = t.contiguous().view(torch.int32)
    finite = torch.isfinite(t)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)  # adding half the dropped range carries into the kept bits
    return torch.where(finite, rounded, t)


def test_the_tf32_variant_equals_a_float64_product_of_tf32_rounded_inputs(ext):
    check_matmul(ext.matmul11, (*SHAPES, *WIDE), ref=lambda a, b: matmul_ref(tf32(a), tf32(b)), name="matmul11",
                 quiet=True, raise_on_fail=True, orders=ONE_ORDER)


def test_the_tf32_variant_loses_precision_against_float32(ext, dev):
    a, b = torch.randn(256, 512, device=dev), torch.randn(512, 256, device=dev)
    c = torch.empty(256, 256, device=dev)
    ext.matmul11(a, b, c)
    exact = a.double() @ b.double()
    rel = lambda x: ((x.double() - exact).norm() / exact.norm()).item()  # noqa: E731
    ext.matmul8(a, b, c32 := torch.empty_like(c))
    assert rel(c32) < 1e-6 < 1e-4 < rel(c) < 2e-3  # fp32 keeps about 7 digits, TF32 about 3 to 4


def test_the_functional_op_takes_float32_and_bf16(ext, dev):
    a, b = torch.randn(70, 33, device=dev), torch.randn(33, 90, device=dev)
    torch.testing.assert_close(ext.matmul(a, b), matmul_ref(a, b), rtol=1e-4, atol=1e-3)
    got = ext.matmul(a.bfloat16(), b.bfloat16())
    torch.testing.assert_close(got, matmul_ref(a.bfloat16(), b.bfloat16()), rtol=1.6e-2, atol=1e-2)


def test_the_matmul_blocktile_stub_fails_its_self_check():
    path = ROOT / "lessons" / "09_matmul" / "matmul_blocktile.cu"
    assert not self_check("09", "matmul_blocktile", path).passed


@checked_in_notebook
def test_the_matmul_blocktile_solution_passes_its_self_check():
    assert check_exercise("09", "matmul_blocktile", solution=True).passed


def test_a_missing_barrier_between_tile_steps_is_caught_wherever_k_spans_two_steps(backend):
    if backend != "sim":
        pytest.skip("on a GPU a missing barrier may or may not change the result: only the simulator is sure to show it")
    # without it, a fast thread stages the next step's tiles while others still read this step's
    report = self_check_of_planted("09", "matmul_blocktile", SOLUTION, "lesson09_matmul_blocktile_no_barrier.cu",
                                   "    __syncthreads();  // done with the tiles before the next step overwrites them\n",
                                   "")
    assert_diagnosis(report, "elements differ")
    one_step = [c for c in report.cases if isinstance(c.size, tuple) and 0 < c.size[2] <= 8]
    assert one_step and all(c.passed for c in one_step), str(report)  # K <= BK: a single step, nothing to overwrite


def test_the_block_tile_solution_makes_the_loads_its_self_check_compares_with(backend):
    if backend != "sim":
        pytest.skip("the access profile is the simulator's")
    counts, _ = lesson09.loads(load(SOLUTION, "sim", quiet=True).matmul_blocktile)
    assert counts == lesson09.SOLUTION_LOADS


def test_an_inner_loop_that_reads_a_and_b_from_global_memory_is_caught_by_the_access_profile():
    # on a GPU too: the self-check counts the loads on the simulator there as well
    # the right values, with the tiles staged in shared memory and never read there
    report = self_check_of_planted("09", "matmul_blocktile", SOLUTION, "lesson09_matmul_blocktile_global_inner_loop.cu",
                                   """      for (int i = 0; i < TM; ++i) ra[i] = As[tr + i][kk];
      for (int j = 0; j < TN; ++j) rb[j] = Bs[kk][tc + j];""", """      for (int i = 0; i < TM; ++i) {
        const int m = m0 + tr + i, k = k0 + kk;
        ra[i] = m < M && k < K ? A[(int64_t)m * K + k] : 0.f;
      }
      for (int j = 0; j < TN; ++j) {
        const int k = k0 + kk, n = n0 + tc + j;
        rb[j] = k < K && n < N ? B[(int64_t)k * N + n] : 0.f;
      }""")
    assert_diagnosis(report, "the inner loop reads global memory, not the shared-memory tiles",
                     "4228 global load requests and 0 shared load requests", "the solution's shows 228 global")
    assert [c.size for c in report.cases if not c.passed] == ["70x70x20 profile"], str(report)


def test_an_off_by_one_at_the_tile_edge_is_caught_as_a_write_past_the_end():
    report = self_check_of_planted("09", "matmul_blocktile", SOLUTION, "lesson09_matmul_blocktile_edge.cu",
                                   "if (m < M && n < N)", "if (m < M && n <= N)")
    assert_diagnosis(report, "past the end")


PTXAS_LOG = """ptxas info    : Compiling entry function '_Z14matmul_kernel2PKfS0_Pfiii' for 'sm_90'
ptxas info    : Function properties for _Z14matmul_kernel2PKfS0_Pfiii
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compiling entry function '_Z14matmul_kernel3ILi32EEvPKfS1_Pfiii' for 'sm_90'
ptxas info    : Function properties for _Z14matmul_kernel3ILi32EEvPKfS1_Pfiii
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8192 bytes smem, 380 bytes cmem[0]
"""


def test_ptxas_reports_are_parsed_into_registers_spills_and_shared_memory_per_kernel():
    from kernels.tools.ptxas import parse_ptxas, resource_table

    rows = parse_ptxas(PTXAS_LOG)
    assert [(r.registers, r.spill_stores, r.spill_loads, r.shared_bytes, r.stack_bytes) for r in rows] == [
        (32, 0, 0, 0, 0), (255, 12, 16, 8192, 8)]
    assert rows[0].kernel.startswith("matmul_kernel2") and "matmul_kernel3<32>" in resource_table(rows)


def test_the_recorded_ptxas_table_has_every_kernel_of_the_reference_file():
    """The notebook shows the recorded table on the simulator: a kernel added to 09_matmul.cu (as matmul12's
    matmul_wmma_async_kernel once was) must be recorded too (nvcc -Xptxas -v needs no GPU)."""
    import re

    source = (ROOT / "kernels" / "reference" / "09_matmul.cu").read_text()
    kernels = set(re.findall(r"__global__[^;{]*?\b(\w*kernel\w*)\s*\(", source))
    table = (ROOT / "kernels" / "benchmarks" / "recorded" / "lesson09_ptxas.txt").read_text()
    recorded = {re.match(r"(?:void )?(\w+)", line).group(1) for line in table.splitlines()[2:] if line.strip()}
    assert len(kernels) >= 9 and kernels == recorded, (kernels ^ recorded)


def test_a_ptxas_report_is_kept_until_its_file_changes(tmp_path, monkeypatch):
    import subprocess

    from kernels.build import cuda_home
    from kernels.tools.ptxas import resource_usage

    if not cuda_home():
        pytest.skip("resource_usage needs nvcc")
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "build"))
    src = tmp_path / "tiny.cu"
    src.write_text("__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    first = resource_usage(src)
    assert [r.kernel.split("(")[0] for r in first] == ["twice"]
    real_run, compiles = subprocess.run, []

    def run(cmd, *args, **kwargs):
        compiles.extend([cmd] if "-cubin" in cmd else [])
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    assert resource_usage(src) == first and compiles == []
    src.write_text(src.read_text() + "__global__ void thrice(float* x) { x[threadIdx.x] *= 3.0f; }\n")
    assert len(resource_usage(src)) == 2 and len(compiles) == 1  # an edit compiles again


def test_the_readme_table_shows_tflops_for_benchmarks_without_a_byte_count(tmp_path):
    from kernels.benchmarks import results_table

    (tmp_path / "lesson09.csv").write_text(
        "bench,variant,ms,gbps,tflops,of_copy,vs_eager,vs_compile,note,copy_gbps,device\n"
        "matmul 4096^3 fp32,eager,2.7,,51.0,,1.0,1.0,,3000,GPU\n"
        "matmul 4096^3 fp32,matmul8,3.4,,40.4,,0.79,0.79,,3000,GPU\n")
    assert "| 09 | matmul 4096^3 fp32 | 51.0 TFLOP/s |  | matmul8 | 40.4 TFLOP/s |  | 0.79x | 0.79x |" in results_table(tmp_path)


def test_the_matmul_wmma_stub_fails_its_self_check():
    assert not self_check("09", "matmul_wmma", ROOT / "lessons" / "09_matmul" / "matmul_wmma.cu").passed


@checked_in_notebook
def test_the_matmul_wmma_solution_passes_its_self_check():
    assert check_exercise("09", "matmul_wmma", solution=True).passed


def test_a_wmma_loop_without_its_trailing_barrier_is_caught_as_a_race(backend):
    """After a WMMA call the simulator's warps go on in step, so no thread order shows the next step's loads
    overwriting tiles that other warps still read (on an H100: a wrong product in 3 of 20 runs at 2048^3); the race
    check names the two lines."""
    if backend != "sim":
        pytest.skip("on a GPU a missing barrier may or may not change the result: only the simulator is sure to show it")
    report = self_check_of_planted("09", "matmul_wmma", ROOT / "solutions" / "09_matmul" / "matmul_wmma.cu",
                                   "lesson09_matmul_wmma_no_trailing_barrier.cu",
                                   "    __syncthreads();  // done with the tiles before the next step overwrites them\n",
                                   "", races=True)
    assert_diagnosis(report, "data race on shared memory")


def test_an_accumulator_never_set_to_zero_gets_a_hint_about_values_used_before_written(backend, capsys):
    """Without wmma::fill_fragment the accumulator starts from whatever its registers held: wrong in one thread
    order and, by chance, right in another, so the check calls it order-dependent; its hint must name this cause
    too, not only a missing barrier, and the lesson's first hint (the accumulator starts at zero) follows."""
    report = self_check_of_planted("09", "matmul_wmma", ROOT / "solutions" / "09_matmul" / "matmul_wmma.cu",
                                   "lesson09_matmul_wmma_no_fill_fragment.cu", "  wmma::fill_fragment(acc, 0.0f);\n", "")
    assert not report.passed
    printed = capsys.readouterr().out
    if any(c.diagnosis is Diagnosis.RACE for c in report.cases):
        assert "an accumulator never set to zero" in printed, printed[-1500:]
    assert "hint 1/3: The accumulator starts at zero" in printed, printed[-1500:]


def test_whole_tiles_stored_over_a_ragged_output_are_caught_and_the_process_lives_on(backend, tmp_path):
    """The most common matmul bug: the store guard left out. Whole 64x64 tiles land far past a ragged C; the race
    and bounds check stops the first case whose overshoot goes past the canary margins before the write, and the
    check stops there, so the larger cases cannot corrupt the process (it used to abort with `malloc(): invalid size`)."""
    if backend != "sim":
        pytest.skip("on a GPU the overshoot is an illegal address or silent corruption; compute-sanitizer's memcheck finds it")
    path = plant(SOLUTION, "      if (m < M && n < N) C[(int64_t)m * N + n] = acc[i][j];",
                 "      C[(int64_t)m * N + n] = acc[i][j];", "lesson09_matmul_blocktile_no_store_guard.cu")
    run = subprocess.run([sys.executable, "-c", "from kernels.exercises import check_exercise; "
                          f"r = check_exercise('09', 'matmul_blocktile', path={str(path)!r}, backend='sim'); "
                          "print('diagnoses:', sorted({c.diagnosis.name for c in r.cases if not c.passed}))"],
                         capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "out-of-bounds write at lesson09_matmul_blocktile_no_store_guard.cu:" in run.stdout, run.stdout[-3000:]
    # the 1x1x1 case's overshoot stays inside the canary margins (reported from them); the next one's goes past them
    assert "'OUT_OF_BOUNDS'" in run.stdout.split("diagnoses:")[1], run.stdout[-3000:]


WMMA_ROW_LENGTHS = {
    # ldm is the length of a row of the shared array; the A tile's rows are BK long, not BN
    "b_tile_row": ("load_matrix_sync(fa, &As[wm * BK + kk], BK)", "load_matrix_sync(fa, &As[wm * BK + kk], BN)"),
    # nor the fragment's 16: as if the A tile were stored fragment by fragment, 16 values a row (BK is 32)
    "fragment_row": ("load_matrix_sync(fa, &As[wm * BK + kk], BK)", "load_matrix_sync(fa, &As[wm * F + kk], F)"),
}


@pytest.mark.parametrize("bug", WMMA_ROW_LENGTHS)
def test_a_wmma_fragment_loaded_with_the_wrong_row_length_is_caught(bug):
    old, new = WMMA_ROW_LENGTHS[bug]
    report = self_check_of_planted("09", "matmul_wmma", ROOT / "solutions" / "09_matmul" / "matmul_wmma.cu",
                                   f"lesson09_matmul_wmma_ldm_{bug}.cu", old, new)
    assert_diagnosis(report, "elements differ")
