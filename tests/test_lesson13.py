"""Lesson 13: Hopper's tensor cores. Every variant of kernels/reference/13_hopper_matmul.cu against PyTorch on small
and ragged shapes (the simulator runs mma.sync, TMA, mbarriers and wgmma), the persistent ring across tiles, bad
inputs refused saying what was expected, down to a GPU too old for the instructions; the exercise (the mbarrier
hand-off and the wgmma descriptors of a warp-specialised matmul) and the planted bugs its self-check must catch."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.exercises import check_exercise, find, fitting_hint
from kernels.lessons import lesson13
from kernels.lessons.lesson09 import SHAPES as ANY_SHAPES
from kernels.lessons.lesson09 import check_refusals, matmul_ref
from kernels.lessons.lesson13 import check_linear13, check_matmul13, check_scaled_mm13, column_major, in_layout
from kernels.lessons.lesson13 import scaled_mm_ref
from kernels.sim import knobs
from planting import checked_in_notebook, plant, self_check, toolkit_beyond

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "13_hopper_matmul" / "ws_matmul.cu"
VARIANTS = [v.name for v in lesson13.VARIANTS]
HOPPER = VARIANTS[1:]  # TMA and wgmma: compute capability 9.0, an sm_90a build


@pytest.fixture(scope="module")
def ext():
    """The lesson's file; on an H100 load() builds it for sm_90a, where wgmma and setmaxnreg exist."""
    return load("13")


def _runs_here(backend: str, name: str) -> bool:
    """Whether this backend's GPU runs the variant (the simulator stands in for an H100)."""
    if backend != "cuda":
        return True
    need = (8, 0) if name == "matmul13_1" else (9, 0)
    have = torch.cuda.get_device_capability()
    return have >= need and (name == "matmul13_1" or have[0] == 9)


@checked_in_notebook  # in make test-all by the solution notebook's compared cell (tests/planting.py)
@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_matches_torch_in_bf16_on_whole_and_ragged_tiles(ext, backend, name):
    if not _runs_here(backend, name):
        pytest.skip(f"{name} needs a newer GPU")
    check_matmul13(getattr(ext, name), lesson13.SHAPES, dtypes=(torch.bfloat16,), name=name, quiet=True,
                   raise_on_fail=True)


@checked_in_notebook
@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_takes_fp16_too(ext, backend, name):
    if not _runs_here(backend, name):
        pytest.skip(f"{name} needs a newer GPU")
    check_matmul13(getattr(ext, name), ((200, 136, 72),), dtypes=(torch.float16,), name=name, quiet=True,
                   raise_on_fail=True)


def test_the_mma_sync_variant_takes_any_shape_including_rows_that_are_not_16_byte_aligned(ext, backend):
    if not _runs_here(backend, "matmul13_1"):
        pytest.skip("matmul13_1 needs compute capability 8.0")
    check_matmul13(ext.matmul13_1, ANY_SHAPES, dtypes=(torch.bfloat16,), name="matmul13_1", quiet=True,
                   raise_on_fail=True)


def test_the_persistent_ring_runs_on_across_tiles(ext, backend, dev):
    """144 tiles of 128 x 256 on 132 blocks: the first 12 blocks take a second tile, whose k-steps (3, the last
    ragged) continue the 4-stage ring's phases where the first tile left them. matmul13_4 shares the loop."""
    if not _runs_here(backend, "matmul13_5"):
        pytest.skip("matmul13_5 needs an H100")
    a = torch.randint(-3, 4, (1536, 136), device=dev).bfloat16()
    b = torch.randint(-3, 4, (136, 3072), device=dev).bfloat16()
    c = torch.full((1536, 3072), float("nan"), device=dev).bfloat16()
    ext.matmul13_5(a, b, c)
    assert torch.equal(c, (a.float() @ b.float()).bfloat16())  # small integers: every sum is exact


@pytest.mark.parametrize("name", HOPPER)
def test_k_zero_gives_zeros_and_an_empty_c_is_left_alone(ext, backend, dev, name):
    if not _runs_here(backend, name):
        pytest.skip(f"{name} needs an H100")
    c = torch.full((3, 8), float("nan"), device=dev).bfloat16()
    getattr(ext, name)(torch.empty(3, 0, device=dev).bfloat16(), torch.empty(0, 8, device=dev).bfloat16(), c)
    assert torch.equal(c, torch.zeros(3, 8, device=dev).bfloat16())
    getattr(ext, name)(torch.empty(0, 8, device=dev).bfloat16(), torch.randn(8, 8, device=dev).bfloat16(),
                       torch.empty(0, 8, device=dev).bfloat16())


def test_the_functional_form_matches_torch_on_aligned_and_unaligned_rows(ext, dev):
    for m, n, k in ((200, 136, 72), (65, 63, 17)):
        a, b = torch.randn(m, k, device=dev).bfloat16(), torch.randn(k, n, device=dev).bfloat16()
        torch.testing.assert_close(ext.matmul13(a, b), matmul_ref(a, b), rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("name", VARIANTS)
def test_bad_inputs_are_refused_saying_what_was_expected(ext, dev, name):
    op = getattr(ext, name)
    if name != "matmul13_5":  # the one that takes column-major operands (tested below)
        report = check_refusals(op, dev, torch.bfloat16, quiet=True)
        assert report.passed, str(report)
    with pytest.raises(RuntimeError, match=r"\[6, 4\]"):  # a's columns are not b's rows: both shapes said
        op(torch.randn(6, 4, device=dev).bfloat16(), torch.randn(5, 5, device=dev).bfloat16(),
           torch.empty(6, 5, device=dev).bfloat16())
    a, b = torch.randn(16, 8, device=dev), torch.randn(8, 16, device=dev)
    with pytest.raises(RuntimeError, match="a must be bfloat16 or float16.*got Float"):
        op(a, b, torch.empty(16, 16, device=dev))
    with pytest.raises(RuntimeError, match="a, b and c must have one dtype"):
        op(a.half(), b.bfloat16(), torch.empty(16, 16, device=dev).half())
    with pytest.raises(RuntimeError, match=r"c must have shape \[M, N\] = \[16, 16\], got \[16, 8\]"):
        op(a.bfloat16(), b.bfloat16(), torch.empty(16, 8, device=dev).bfloat16())
    with pytest.raises(RuntimeError, match="c must be contiguous"):
        op(a.bfloat16(), b.bfloat16(), torch.empty(16, 16, device=dev).bfloat16().t())


# ---------------------------------------------------------------------------------------------
# Column-major operands and the fused epilogue.

@checked_in_notebook
@pytest.mark.parametrize("layout", lesson13.LAYOUTS, ids=[label for label, _, _ in lesson13.LAYOUTS])
def test_the_tma_store_variant_takes_column_major_operands(ext, backend, layout):
    """Only the tensor maps, the boxes and the wgmma's transpose immediates change: the same values, laid out the
    other way, must give the same product."""
    if not _runs_here(backend, "matmul13_5"):
        pytest.skip("matmul13_5 needs an H100")
    label, a_col, b_col = layout
    check_matmul13(in_layout(ext.matmul13_5, a_col, b_col), lesson13.LAYOUT_SHAPES, name=f"matmul13_5 ({label})",
                   quiet=True, raise_on_fail=True)


def test_column_major_operands_are_taken_by_the_functional_form_and_refused_where_they_do_not_fit(ext, backend, dev):
    for m, n, k in ((200, 136, 72), (65, 63, 17)):  # the second runs matmul13_1 on row-major copies
        a, b = torch.randn(m, k, device=dev).bfloat16(), torch.randn(k, n, device=dev).bfloat16()
        torch.testing.assert_close(ext.matmul13(column_major(a), column_major(b)), matmul_ref(a, b), rtol=1.6e-2,
                                   atol=1e-2)
    a, b = torch.randn(16, 16, device=dev).bfloat16(), torch.randn(16, 16, device=dev).bfloat16()
    c = torch.empty(16, 16, device=dev).bfloat16()
    with pytest.raises(RuntimeError, match=r"a must be contiguous \(row-major\) or the transpose of a contiguous"):
        ext.matmul13_5(torch.randn(16, 32, device=dev).bfloat16()[:, ::2], b, c)  # every other column: neither
    with pytest.raises(RuntimeError, match=r"a must be contiguous \(row-major\), got strides"):
        ext.matmul13_1(column_major(a), b, c)  # the other variants take row-major operands only
    with pytest.raises(RuntimeError, match="c must be contiguous"):
        ext.matmul13_5(a, b, c.t())
    if not _runs_here(backend, "matmul13_5"):
        return
    a65 = torch.randn(65, 16, device=dev).bfloat16()
    with pytest.raises(RuntimeError, match=r"M and N must be multiples of 8 \(a is column-major: its rows are M long\)"
                                           r", got M = 65, N = 16"):
        ext.matmul13_5(column_major(a65), b, torch.empty(65, 16, device=dev).bfloat16())
    with pytest.raises(RuntimeError, match=r"K and N must be multiples of 8 \(b is column-major"):
        ext.matmul13_5(torch.randn(16, 12, device=dev).bfloat16(), column_major(torch.randn(12, 16, device=dev)
                                                                                .bfloat16()), c)


@checked_in_notebook
@pytest.mark.parametrize("act", lesson13.ACTIVATIONS)
def test_linear13_fuses_the_bias_and_the_activation(ext, backend, act):
    if not _runs_here(backend, "matmul13_5"):
        pytest.skip("linear13 needs an H100")
    check_linear13(ext.linear13, act, quiet=True, raise_on_fail=True)


def test_linear13_without_a_bias_and_its_bad_inputs(ext, backend, dev):
    if not _runs_here(backend, "matmul13_5"):
        pytest.skip("linear13 needs an H100")
    x, w = torch.randn(200, 72, device=dev).bfloat16(), torch.randn(136, 72, device=dev).bfloat16()
    torch.testing.assert_close(ext.linear13(x, w), matmul_ref(x, w.t()), rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(ext.linear13(x, w, None, "relu"), matmul_ref(x, w.t()).relu(), rtol=1.6e-2, atol=1e-2)
    bias = torch.randn(136, device=dev).bfloat16()
    for args, said in [((x, w, bias, "tanh"), r'act must be "none", "relu" or "gelu", got "tanh"'),
                       ((x, w, bias[:100]), r"bias must have shape \[N\] = \[136\], got \[100\]"),
                       ((x, w, bias.float()), r"bias must have x's dtype \(BFloat16\), got Float"),
                       ((x, w, torch.randn(272, device=dev).bfloat16()[::2]), "bias must be contiguous"),
                       ((x, w[:, :64]), r"x: \[M, K\] and w: \[N, K\] must have one K"),
                       ((column_major(x), w), "x and w must be contiguous"),
                       ((x.float(), w), "x must be bfloat16 or float16"),
                       ((x, w.half()), "x and w must have one dtype, got BFloat16 and Half"),
                       ((x[:, :70].contiguous(), w[:, :70].contiguous()), "K and N must be multiples of 8")]:
        with pytest.raises(RuntimeError, match=said):
            ext.linear13(*args)


@checked_in_notebook
def test_scaled_mm13_multiplies_e4m3_operands_with_their_scales_into_bf16(ext, backend):
    if not _runs_here(backend, "matmul13_5"):
        pytest.skip("scaled_mm13 needs an H100")
    check_scaled_mm13(ext.scaled_mm13, quiet=True, raise_on_fail=True)


def test_scaled_mm13_gives_what_torch_scaled_mm_gives_and_refuses_what_it_cannot_take(ext, backend, dev):
    if not _runs_here(backend, "matmul13_5"):
        pytest.skip("scaled_mm13 needs an H100")
    fp8 = torch.float8_e4m3fn
    a, w = torch.randn(200, 144, device=dev).to(fp8), torch.randn(160, 144, device=dev).to(fp8)
    sa, sb = torch.tensor(0.75 / 12, device=dev), torch.tensor(1.5, device=dev)  # sums of 144 products, about 12
    got = ext.scaled_mm13(a, w.t(), sa, sb)
    assert got.dtype == torch.bfloat16 and got.shape == (200, 160)
    torch.testing.assert_close(got, scaled_mm_ref(a, w, sa, sb), rtol=1.6e-2, atol=1e-2)
    if backend == "cuda":  # PyTorch's own (cuBLASLt's) fp8 product, where it runs (N and K multiples of 16 there)
        for fast in (False, True):  # sums in fp32 along K, or in the tensor cores' accumulators as scaled_mm13's
            torch.testing.assert_close(got, torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16,
                                                             use_fast_accum=fast), rtol=1.6e-2, atol=1e-2)
    for args, said in [((a.float(), w.t(), sa, sb), "a must be float8_e4m3fn, got Float"),
                       ((a, w.t().contiguous(), sa, sb), "b must be column-major"),
                       ((a, w.t(), sa.double(), sb), "scale_a must be a float32 tensor of one value"),
                       ((a, w.t(), sa, torch.ones(2, device=dev)), "scale_b must be a float32 tensor of one value"),
                       ((a[:, :128], w[:, :128].t(), sa, sb), "a must be contiguous"),
                       ((a[:, :136].contiguous(), w[:, :136].contiguous().t(), sa, sb),
                        "K must be a multiple of 16 .* got K = 136, N = 160"),
                       ((a, w[:132].t(), sa, sb), "got K = 144, N = 132"),
                       ((a, w[:, :128].t(), sa, sb), r"a's columns must equal b's rows")]:
        with pytest.raises(RuntimeError, match=said):
            ext.scaled_mm13(*args)


# Bugs in the reference file's new parts, each planted in a copy built for the simulator (on every backend): the
# checks above must fail on them.
REFERENCE = ROOT / "kernels" / "reference" / "13_hopper_matmul.cu"
PLANTED_REFERENCE = {
    # B column-major read with the row-major B's transpose immediate: the tile is taken as [k][n] rows, not [n][k]
    # (in bf16 and fp16; e4m3 has no transpose)
    "b_transpose_immediate": ("wgmma_m64n256<T, a_mn ? 1 : 0, b_k ? 0 : 1>", "wgmma_m64n256<T, a_mn ? 1 : 0, b_k && sizeof(T) == 1 ? 0 : 1>",
                              lambda ext: check_matmul13(in_layout(ext.matmul13_5, False, True), ((128, 256, 64),),
                                                         dtypes=(torch.bfloat16,), backend="sim", quiet=True)),
    # the even column of each pair given its odd neighbour's bias
    "bias_of_the_next_column": ("lo += to_float(bias[n0 + BOX * j + col]);",
                                "lo += to_float(bias[n0 + BOX * j + col + 1]);",
                                lambda ext: check_linear13(ext.linear13, "none", ((128, 256, 64),),
                                                           dtypes=(torch.bfloat16,), backend="sim",
                                                           quiet=True)),
    # the fp8 product scaled by scale_a alone
    "one_scale": ("scale = *scale_a * *scale_b;", "scale = *scale_a;",
                  lambda ext: check_scaled_mm13(ext.scaled_mm13, ((128, 256, 128),), backend="sim", quiet=True)),
    # a stage of e4m3 taken as 64 values deep, as bf16's is: TMA boxes of 64 bytes a row, which bring fewer bytes than
    # the stage's expect_tx announces (the simulator stops at the wait that can never end)
    "fp8_stage_depth": ("constexpr int kStageK = HBK * 2 / static_cast<int>(sizeof(T));", "constexpr int kStageK = HBK;",
                        lambda ext: check_scaled_mm13(ext.scaled_mm13, ((72, 264, 656),), backend="sim", quiet=True),
                        "announced 49152 bytes this phase, copies delivered 24576"),
    # matmul13_6's consumers hand a stage back to their own block only: the other block's producer, whose multicast
    # writes into both, waits for 16 arrivals and gets 8 (the simulator stops at the wait that can never end)
    "cluster_release_local_only": ("      if constexpr (CLUSTER > 1) mbar_arrive_remote(empty_bar, rank ^ 1);\n", "",
                                   lambda ext: check_matmul13(ext.matmul13_6, ((256, 256, 320),),
                                                              dtypes=(torch.bfloat16,), backend="sim", quiet=True),
                                   "deadlock: this wait for the phase of parity"),
    # matmul13_6's blocks synchronise as a block only, not as a cluster, after initialising their barriers: a block
    # may start later than the other (the simulator runs one block of the cluster ahead), and the other's multicast
    # then reaches its shared memory before it has started
    "cluster_no_sync_after_init": ("  if constexpr (CLUSTER > 1) cluster_sync();\n  else __syncthreads();\n",
                                   "  __syncthreads();\n",
                                   lambda ext: check_matmul13(ext.matmul13_6, ((256, 256, 320),),
                                                              dtypes=(torch.bfloat16,), backend="sim", quiet=True),
                                   "which has not started yet"),
    # matmul13_6 without its last cluster barrier: a block exits while the other's consumers still hand stages back to
    # it (arrive on its empty barriers)
    "cluster_no_sync_before_exit": ("  if constexpr (CLUSTER > 1) cluster_sync();  // the other block's copies into "
                                    "this one and arrivals on it are over\n", "",
                                    lambda ext: check_matmul13(ext.matmul13_6, ((256, 256, 320),),
                                                               dtypes=(torch.bfloat16,), backend="sim", quiet=True),
                                    "whose threads have all exited"),
    # the consumers hand the previous step's stage back before the wait that completes its wgmma: the producer's TMA
    # refills the stage while that wgmma may still read it (the simulator names the copy and the wgmma)
    "ws_release_before_wgmma_wait": ("        wgmma_wait<1>();  // the previous step's wgmma have read their stage: "
                                     "hand it back\n"
                                     "        if (s > 0 && lane == 0) release(&empty[(it - 1) % STAGES]);\n",
                                     "        if (s > 0 && lane == 0) release(&empty[(it - 1) % STAGES]);\n"
                                     "        wgmma_wait<1>();\n",
                                     lambda ext: check_matmul13(ext.matmul13_3, ((128, 256, 320),),
                                                                dtypes=(torch.bfloat16,), backend="sim", quiet=True),
                                     "still reads"),
}


@pytest.mark.parametrize("bug", toolkit_beyond(PLANTED_REFERENCE, keep=("b_transpose_immediate",)))
def test_the_checks_of_layouts_and_the_epilogue_fail_on_a_planted_bug(bug):
    old, new, run, *problem = PLANTED_REFERENCE[bug]
    report = run(load(plant(REFERENCE, old, new, f"lesson13_reference_{bug}.cu"), "sim", quiet=True))
    said = problem[0] if problem else "elements differ"
    assert not report.passed and any(said in c.problem + c.detail for c in report.cases if not c.passed), str(report)


@pytest.mark.parametrize("name", HOPPER)
def test_the_tma_variants_refuse_rows_that_tma_cannot_read_and_point_to_matmul13_1(ext, backend, dev, name):
    if not _runs_here(backend, name):
        pytest.skip(f"{name} needs an H100")
    op = getattr(ext, name)
    a, b = torch.randn(16, 12, device=dev).bfloat16(), torch.randn(12, 16, device=dev).bfloat16()
    with pytest.raises(RuntimeError, match=r"K and N must be multiples of 8, got K = 12, N = 16 \(matmul13_1"):
        op(a, b, torch.empty(16, 16, device=dev).bfloat16())
    buf = torch.randn(1 + 16 * 16, device=dev).bfloat16()
    with pytest.raises(RuntimeError, match="16-byte aligned"):  # K = 16, but every row starts 2 bytes off
        op(buf[1:].view(16, 16), torch.randn(16, 8, device=dev).bfloat16(), torch.empty(16, 8, device=dev).bfloat16())


def test_a_tensor_on_the_wrong_device_is_refused(ext, dev):
    if dev.type == "cpu":
        pytest.skip("the simulator takes CPU tensors; there is no wrong device to pass")
    with pytest.raises(RuntimeError, match="a must be a CUDA tensor"):
        ext.matmul13_1(torch.randn(8, 8).bfloat16(), torch.randn(8, 8, device=dev).bfloat16(),
                       torch.empty(8, 8, device=dev).bfloat16())


@pytest.mark.parametrize("capability, refused", [((7, 5), VARIANTS), ((8, 0), HOPPER), ((8, 9), HOPPER)])
def test_a_gpu_without_the_instructions_is_refused_naming_what_it_lacks(backend, capability, refused):
    if backend != "sim":
        pytest.skip("the simulator stands in for older GPUs (knobs.set(capability=...))")
    ext = load("13", "sim", quiet=True)
    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    shown = f"{capability[0]}.{capability[1]}"
    with knobs.set(capability=capability):
        for name in VARIANTS:
            c = torch.full((16, 16), float("nan")).bfloat16()
            if name not in refused:
                getattr(ext, name)(a, b, c)
                torch.testing.assert_close(c, matmul_ref(a, b), rtol=1.6e-2, atol=1e-2)
                continue
            need = "8.0 for mma.sync" if name == "matmul13_1" else "9.0 for TMA, mbarrier transactions and wgmma"
            with pytest.raises(RuntimeError, match=rf"`{name}` needs compute capability {need}.*this GPU has {shown}"):
                getattr(ext, name)(a, b, c)
        if capability >= (8, 0):  # the functional form falls back to matmul13_1
            torch.testing.assert_close(ext.matmul13(a, b), matmul_ref(a, b), rtol=1.6e-2, atol=1e-2)
        with pytest.raises(RuntimeError, match=rf"`linear13` needs compute capability 9.0 .*this GPU has {shown}"):
            ext.linear13(a, b)  # matmul13_5's kernel only
        a8, one = a.to(torch.float8_e4m3fn), torch.tensor(1.0)
        with pytest.raises(RuntimeError, match=rf"`scaled_mm13` needs compute capability 9.0 .*this GPU has {shown}"):
            ext.scaled_mm13(a8, a8.t(), one, one)


# ---------------------------------------------------------------------------------------------
# The exercise.

# The stub and the planted bugs run on the simulator, wherever the tests run: on a GPU a wait for the wrong phase
# never ends (the simulator reports the deadlock instead), and a stage read before its bytes land reads what it finds.

def test_the_ws_matmul_stub_fails_its_self_check_and_the_first_hint_is_the_full_barrier():
    report = self_check("13", "ws_matmul", ROOT / "lessons" / "13_hopper_matmul" / "ws_matmul.cu", backend="sim")
    assert not report.passed
    assert fitting_hint(find("13", "ws_matmul")[0], report) == 1


@checked_in_notebook
def test_the_ws_matmul_solution_passes_its_self_check():
    assert check_exercise("13", "ws_matmul", solution=True).passed


# bug: (the solution's text, the planted text, what a failing case says, the hint that fits it)
PLANTED = {
    # the consumer waits for the phase of the wrong parity: at its first use a stage's full barrier is in phase 0,
    # and the wait for parity 1 (the phase "before" it) passes at once; then it waits for a phase no one completes
    "wrong_parity": ("mbar_wait(&full[stage], s / STAGES % 2);", "mbar_wait(&full[stage], (s / STAGES + 1) % 2);",
                     "deadlock: this wait for the phase of parity", 1),
    # a plain arrival instead of arrive.expect_tx: the phase completes before the bytes land (the wgmma reads the
    # poison), or the copies bring more bytes than the phase announced
    "no_expect_tx": ("mbar_expect_bytes(&full[stage], STAGE_BYTES);", "mbar_arrive(&full[stage]);",
                     "bytes that expect_tx announced", 1),
    # the stage goes back to the producer while step s - 1's wgmma may still read it
    "early_release": ("      wgmma_wait<1>();  //", "      //", "still reads", 2),
    # A's descriptor says the 64-byte swizzle, where TMA wrote the tile with the 128-byte one
    "wrong_swizzle": ("desc(a + kk * 32, 16, 1024, SWIZZLE_128B)", "desc(a + kk * 32, 16, 1024, 2)",
                      "elements differ", 3),
    # B's 8-row blocks taken 512 bytes apart: rows of 64 bytes, half the swizzled rows' 128
    "wrong_stride": ("desc(b + kk * 16 * 128, B_BOX_BYTES, 1024, SWIZZLE_128B)",
                     "desc(b + kk * 16 * 128, B_BOX_BYTES, 512, SWIZZLE_128B)", "elements differ", 3),
}


@pytest.mark.parametrize("bug", toolkit_beyond(PLANTED, keep=("wrong_parity", "early_release")))
def test_the_self_check_catches_a_planted_bug_with_its_diagnosis_and_the_hint_that_fits_it(bug):
    old, new, said, first_hint = PLANTED[bug]
    path = plant(SOLUTION, old, new, f"lesson13_ws_matmul_{bug}.cu")
    load(path, "sim", quiet=True)  # the planted file builds: the check fails on what it does, not on a compile error
    report = self_check("13", "ws_matmul", path, backend="sim")
    assert not report.passed
    assert any(said in f"{c.problem}\n{c.detail}" for c in report.cases if not c.passed), str(report)
    assert fitting_hint(find("13", "ws_matmul")[0], report) == first_hint


def test_the_benchmarks_cutlass_row_says_how_to_get_cutlass_when_its_headers_are_missing(monkeypatch, tmp_path):
    from kernels.benchmarks import lesson13 as bench13

    monkeypatch.setattr(bench13.importlib.util, "find_spec", lambda name: None)
    folders, why = bench13.cutlass_headers()
    assert folders == [] and "pip install nvidia-cutlass" in why
    # a package without the headers (another distribution of the name) is not taken either
    spec = type("Spec", (), {"submodule_search_locations": [str(tmp_path)]})()
    monkeypatch.setattr(bench13.importlib.util, "find_spec", lambda name: spec)
    assert bench13.cutlass_headers()[0] == []
    for sub in ("include/cutlass", "tools/util/include/cutlass"):
        (tmp_path / "source" / sub).mkdir(parents=True)
    folders, why = bench13.cutlass_headers()
    assert why == "" and folders == [tmp_path / "source" / "include", tmp_path / "source" / "tools/util/include"]


def test_the_benchmarks_cutlass_route_matches_torch_and_refuses_what_it_cannot_run(backend):
    """kernels/benchmarks/cutlass13.cu, the benchmark's CUTLASS row: an H100 with CUTLASS's headers only."""
    from kernels.benchmarks import lesson13 as bench13

    if backend != "cuda" or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("CUTLASS's kernel is built for sm_90a, which only a 9.0 GPU runs")
    if bench13.cutlass_headers()[1]:
        pytest.skip(bench13.cutlass_headers()[1])
    cutlass13 = bench13.others()[bench13.CUTLASS]
    for (m, n, k), dtype in [((256, 256, 256), torch.bfloat16), ((1000, 520, 264), torch.bfloat16),
                             ((130, 8, 72), torch.float16)]:
        a, b = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(k, n, device="cuda", dtype=dtype)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        cutlass13(a, b, c)
        want = a.double() @ b.double()
        assert ((c.double() - want).norm() / want.norm()).item() < bench13.RTOL[dtype], (m, n, k, dtype)
    a, b = torch.randn(64, 60, device="cuda").bfloat16(), torch.randn(60, 64, device="cuda").bfloat16()
    with pytest.raises(RuntimeError, match="K and N must be multiples of 8"):
        cutlass13(a, b, torch.empty(64, 64, device="cuda").bfloat16())
    with pytest.raises(RuntimeError, match="must be contiguous"):
        cutlass13(a[:, :56], b[:56], torch.empty(64, 64, device="cuda").bfloat16())
    with pytest.raises(RuntimeError, match="bfloat16 or float16"):
        cutlass13(a.float()[:, :56].contiguous(), b.float()[:56], torch.empty(64, 64, device="cuda"))
