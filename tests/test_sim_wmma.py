"""The WMMA API (nvcuda::wmma from <mma.h>) runs unchanged on the simulator and agrees with a GPU.

The kernels live in tests/sim_kernels/wmma.cu (ordinary CUDA: every op runs on sim and, with a GPU,
on cuda, and must agree with PyTorch on both) and tests/sim_kernels/wmma_misuse.cu (calls that break
CUDA's rules for WMMA, which the simulator refuses; a GPU leaves them undefined, so sim only).
References are computed in float64 from the inputs as the tensor cores read them.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.dev.compile_check import needs_line
from kernels.sim.translate import translate_source

HERE = Path(__file__).parent / "sim_kernels"
WMMA = HERE / "wmma.cu"
MISUSE = HERE / "wmma_misuse.cu"
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])
SHAPES = [(16, 16, 16), (32, 8, 16), (8, 32, 16)]


def _device(backend: str) -> torch.device:
    return torch.device("cuda" if backend == "cuda" else "cpu")


@pytest.fixture(scope="module", params=BACKENDS)
def wmma(request):
    if request.param == "cuda" and needs_line(WMMA):
        pytest.skip(needs_line(WMMA))  # bf16, TF32 and double fragments: compute capability 8.0
    return request.param, load(WMMA, request.param)


@pytest.fixture(scope="module")
def misuse():
    return load(MISUSE, "sim")


def _line_of(marker: str, path: Path) -> int:
    """The 1-based line of the file that holds `marker`."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker} not in {path.name}")


def tf32_round(x: torch.Tensor) -> torch.Tensor:
    """cvt.rna.tf32.f32: 10 mantissa bits, round to nearest, ties away from zero; NaN and inf kept."""
    bits = x.contiguous().view(torch.int32)
    finite = (bits & 0x7F800000) != 0x7F800000
    return torch.where(finite, (bits + 0x1000) & ~0x1FFF, bits).view(torch.float32)


def tf32_truncate(x: torch.Tensor) -> torch.Tensor:
    """The 13 low mantissa bits cleared: what a tensor core reads from a float it is given as tf32."""
    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def _stored(m: torch.Tensor, col: bool) -> torch.Tensor:
    """The matrix as the kernel reads it: row by row, or column by column (its transpose's rows)."""
    return m.t().contiguous() if col else m.contiguous()


def _tile(ext, a, b, c, shape, a_col, b_col, c_col, d_col, round_tf32=True):
    m, n, k = shape
    d = ext.wmma_tile(_stored(a, a_col), _stored(b, b_col), _stored(c, c_col), m, n, k, a_col, b_col, c_col, d_col,
                      round_tf32)
    return d.reshape(n, m).t() if d_col else d  # a column-major D holds D^T's rows


LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


# ---------------------------------------------------------------------------------------------
# one tile: every shape, input type and layout
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "m{}n{}k{}".format(*s))
@pytest.mark.parametrize("a_col, b_col", LAYOUTS, ids=["rr", "rc", "cr", "cc"])
def test_tile_of_half_inputs_matches_torch_with_fp32_accumulation(wmma, dtype, shape, a_col, b_col):
    backend, ext = wmma
    m, n, k = shape
    dev = _device(backend)
    a = torch.randn(m, k, device=dev).to(dtype)
    b = torch.randn(k, n, device=dev).to(dtype)
    c = torch.randn(m, n, device=dev)
    # C loaded and D stored in the layouts of A and B, so each of the four combinations is used
    d = _tile(ext, a, b, c, shape, a_col, b_col, a_col, b_col)
    ref = a.double() @ b.double() + c.double()
    torch.testing.assert_close(d, ref.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_col, b_col", LAYOUTS, ids=["rr", "rc", "cr", "cc"])
def test_tile_of_tf32_inputs_matches_torch_on_the_rounded_inputs(wmma, a_col, b_col):
    backend, ext = wmma
    dev = _device(backend)
    a, b, c = torch.randn(16, 8, device=dev), torch.randn(8, 16, device=dev), torch.randn(16, 16, device=dev)
    d = _tile(ext, a, b, c, (16, 16, 8), a_col, b_col, b_col, a_col)
    ref = tf32_round(a).double() @ tf32_round(b).double() + c.double()
    torch.testing.assert_close(d, ref.float(), rtol=1e-4, atol=1e-4)
    # and tf32 is visibly coarser than fp32: the exact product differs by more than that tolerance
    assert (d.double() - (a.double() @ b.double() + c.double())).abs().max() > 1e-3


def test_tf32_operands_not_rounded_lose_their_low_mantissa_bits(wmma):
    backend, ext = wmma
    dev = _device(backend)
    a = torch.randn(16, 8, device=dev)
    b = torch.zeros(8, 16, device=dev)
    b[:, :8] = torch.eye(8, device=dev)  # D = [A | 0]: each element of A times exactly one 1
    c = torch.zeros(16, 16, device=dev)
    d = _tile(ext, a, b, c, (16, 16, 8), False, False, False, False, round_tf32=False)
    assert torch.equal(d[:, :8], tf32_truncate(a)) and torch.equal(d[:, 8:], c[:, 8:])
    assert not torch.equal(tf32_truncate(a), tf32_round(a))  # the inputs tell truncation from rounding


@pytest.mark.parametrize("a_col, b_col", LAYOUTS, ids=["rr", "rc", "cr", "cc"])
def test_tile_of_int8_inputs_is_exact_in_int32(wmma, a_col, b_col):
    backend, ext = wmma
    dev = _device(backend)
    a = torch.randint(-128, 128, (16, 16), dtype=torch.int8, device=dev)
    b = torch.randint(-128, 128, (16, 16), dtype=torch.int8, device=dev)
    c = torch.randint(-(2**20), 2**20, (16, 16), dtype=torch.int32, device=dev)
    d = _tile(ext, a, b, c, (16, 16, 16), a_col, b_col, a_col, b_col)
    ref = (a.cpu().long() @ b.cpu().long() + c.cpu().long()).int()  # exact; no integer matmul on a GPU
    assert d.dtype == torch.int32 and torch.equal(d.cpu(), ref)


@pytest.mark.parametrize("a_col, b_col", LAYOUTS, ids=["rr", "rc", "cr", "cc"])
def test_tile_of_double_inputs_matches_torch(wmma, a_col, b_col):
    backend, ext = wmma
    dev = _device(backend)
    a, b = torch.randn(8, 4, dtype=torch.float64, device=dev), torch.randn(4, 8, dtype=torch.float64, device=dev)
    c = torch.randn(8, 8, dtype=torch.float64, device=dev)
    d = _tile(ext, a, b, c, (8, 8, 4), a_col, b_col, b_col, a_col)
    torch.testing.assert_close(d, a @ b + c, rtol=1e-13, atol=1e-13)


def test_tile_refuses_a_shape_wmma_does_not_have(wmma):
    backend, ext = wmma
    dev = _device(backend)
    a = torch.randn(16, 16, device=dev).half()
    with pytest.raises(RuntimeError, match="m16n16k16, m32n8k16 or m8n32k16, got m16n8k16"):
        ext.wmma_tile(a, a, torch.zeros(16, 8, device=dev), 16, 8, 16, False, False, False, False, True)


# ---------------------------------------------------------------------------------------------
# a tiled matmul of awkward sizes, padded in shared memory, accumulating over K
MATMUL_SIZES = [(1, 1, 1), (17, 33, 20), (31, 5, 47), (64, 64, 64), (33, 100, 129)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["f16", "bf16", "tf32"])
@pytest.mark.parametrize("mnk", MATMUL_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_tiled_matmul_of_any_size_matches_torch(wmma, dtype, mnk):
    backend, ext = wmma
    m, n, k = mnk
    dev = _device(backend)
    a = torch.randn(m, k, device=dev).to(dtype)
    b = torch.randn(k, n, device=dev).to(dtype)
    d = ext.wmma_matmul(a, b)
    if dtype == torch.float32:
        a, b = tf32_round(a), tf32_round(b)
    ref = a.double() @ b.double()
    torch.testing.assert_close(d, ref.float(), rtol=1e-4, atol=1e-4 * math.sqrt(k))


@pytest.mark.parametrize("mnk", [(0, 5, 7), (5, 0, 7), (5, 7, 0)], ids=["M=0", "N=0", "K=0"])
def test_tiled_matmul_of_empty_sizes(wmma, mnk):
    backend, ext = wmma
    m, n, k = mnk
    dev = _device(backend)
    d = ext.wmma_matmul(torch.randn(m, k, device=dev).half(), torch.randn(k, n, device=dev).half())
    assert d.shape == (m, n) and torch.equal(d, torch.zeros(m, n, device=dev))


def test_tiled_matmul_survives_reordered_threads_and_blocks(wmma, monkeypatch):
    backend, ext = wmma
    if backend != "sim":
        pytest.skip("thread and block order are simulator knobs")
    a, b = torch.randn(45, 70).half(), torch.randn(70, 38).half()
    ref = (a.double() @ b.double()).float()
    from kernels.sim import knobs

    for order in ("reverse", "random"):
        with knobs.set(order=order, shuffle_blocks=True):
            torch.testing.assert_close(ext.wmma_matmul(a, b), ref, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# fragments element by element, fill and store
def test_fragment_elements_scaled_in_x_give_alpha_ab_plus_beta_c(wmma):
    backend, ext = wmma
    dev = _device(backend)
    a, b = torch.randn(16, 16, device=dev).half(), torch.randn(16, 16, device=dev).half()
    c = torch.randn(16, 16, device=dev)
    d = ext.wmma_axpby(a, b, c, 2.0, 0.5, -1.5)  # A doubled in its fragment: exact in half
    ref = 0.5 * ((2 * a.double()) @ b.double()) - 1.5 * c.double()
    torch.testing.assert_close(d, ref.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("col", [False, True], ids=["mem_row_major", "mem_col_major"])
def test_fill_and_store_write_the_tile_and_nothing_past_it(wmma, col):
    backend, ext = wmma
    out = torch.full((16, 24), float("nan"), device=_device(backend))
    ext.wmma_fill(out, 3.25, col)
    # ldm 24: each of the 16 rows (row-major) or columns (column-major) gets 16 values, then a gap
    assert torch.equal(out[:, :16], torch.full_like(out[:, :16], 3.25))
    assert out[:, 16:].isnan().all()


def test_fragments_have_cudas_num_elements(wmma):
    _, ext = wmma
    # CUDA 13's mma.h, in the order wmma_counts lists the fragments
    assert list(ext.wmma_counts()) == [16, 16, 8, 8, 16, 16, 16, 8, 16, 4, 4, 16, 4, 4, 8, 8, 8, 1, 2]


# ---------------------------------------------------------------------------------------------
# __float_to_tf32
def _tf32_cases() -> torch.Tensor:
    def f(bits: int) -> float:
        return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32).item()

    special = [
        f(0x3F801000), f(0x3F803000), f(0xBF801000),  # ties, even and odd kept bit, and a negative tie
        f(0x3F800FFF), f(0x3F801001), f(0x3F801FFF),  # just below and above a tie
        f(0x00001000), f(0x00300000), f(0x007FFFFF),  # subnormals (the last rounds up to the smallest normal)
        1.0, -2.5, 0.0, -0.0, 3.0e38, -1.0e-30, float("inf"), float("-inf"),
    ]
    return torch.cat([torch.tensor(special, dtype=torch.float32), torch.randn(5000) * 100])


def test_float_to_tf32_rounds_to_nearest_with_ties_away_from_zero(wmma):
    backend, ext = wmma
    x = _tf32_cases().to(_device(backend))
    out = ext.to_tf32(x)
    assert torch.equal(out.view(torch.int32), tf32_round(x).view(torch.int32))
    assert (out.view(torch.int32) & 0x1FFF == 0).all()


def test_float_to_tf32_keeps_nan(wmma):
    backend, ext = wmma
    assert ext.to_tf32(torch.tensor([float("nan")], device=_device(backend))).isnan().all()


# ---------------------------------------------------------------------------------------------
# wrong use: refused by the simulator with the rule and the line (undefined on a GPU)
def _buf():
    return torch.randn(1024).half()


def test_a_load_after_half_the_warp_returned_names_the_exited_lane(misuse):
    load_line, exit_line = _line_of("HALF-LOAD", MISUSE), _line_of("HALF-EXIT", MISUSE)
    with pytest.raises(RuntimeError) as e:
        misuse.half_warp_load(_buf())
    msg = str(e.value)
    assert f"wmma::load_matrix_sync at wmma_misuse.cu:{load_line} is a warp-wide call" in msg
    assert f"lane 16 (thread (16,0,0)) has exited (returned at wmma_misuse.cu:{exit_line})" in msg


def test_loads_on_two_lines_by_two_halves_of_a_warp_are_refused(misuse):
    low, high = _line_of("DIVERGENT-LOW", MISUSE), _line_of("DIVERGENT-HIGH", MISUSE)
    with pytest.raises(RuntimeError, match=rf"different warp-wide calls: lane 0 at wmma::load_matrix_sync "
                                           rf"\(wmma_misuse.cu:{low}\), lane 16 at wmma::load_matrix_sync "
                                           rf"\(wmma_misuse.cu:{high}\)"):
        misuse.divergent_loads(_buf())


# each: the op, the marker on the line the error must name, and the rest of the message (a regex)
MISUSE_CASES = {
    "an mma skipped by half the warp is a deadlock naming the call": (
        "branch_barrier", "BRANCH-MMA",
        r"deadlock: wmma::mma_sync at wmma_misuse.cu:{line} waits for lane 16 \(waiting at __syncthreads\)"),
    "lanes passing different pointers": (
        "lane_pointers", "LANE-POINTERS",
        r"wmma::load_matrix_sync at wmma_misuse.cu:{line}: lane 0 passed .* but lane 1 passed .*the same pointer, "
        r"ldm and layout"),
    "a pointer off a 32-byte boundary": (
        "misaligned", "MISALIGNED", r"wmma_misuse.cu:{line}: the pointer .* is not 32-byte \(256-bit\) aligned"),
    "an ldm that is not a multiple of 16 bytes": (
        "odd_ldm", "ODD-LDM",
        r"wmma_misuse.cu:{line}: ldm 20 is not a multiple of 16 bytes \(8 elements of this type\)"),
    "a warp with missing lanes": (
        "short_block", "SHORT-BLOCK",
        r"wmma::load_matrix_sync at wmma_misuse.cu:{line} is a warp-wide call, but warp 1 has only 16 lanes: the "
        r"block has 48 threads"),
    "copies of a half element changed differently": (
        "uneven_copies", "UNEVEN-MMA",
        r"wmma::mma_sync at wmma_misuse.cu:{line}: the matrix_a fragment of this lane holds two different values "
        r"for one element \(x\[0\] and x\[8\]\)"),
}


@pytest.mark.parametrize("case", list(MISUSE_CASES))
def test_wmma_misuse_is_refused_naming_the_rule_and_line(misuse, case):
    op, marker, pattern = MISUSE_CASES[case]
    args = (_buf(), torch.empty(256)) if op in ("branch_barrier", "uneven_copies") else (_buf(),)
    with pytest.raises(RuntimeError, match=pattern.format(line=_line_of(marker, MISUSE))):
        getattr(misuse, op)(*args)


# ---------------------------------------------------------------------------------------------
# inline PTX runs through the translator's PTX support (tests/test_sim_ptx.py); what it leaves alone
@pytest.mark.parametrize("code", [
    '// asm("mma.sync") in a comment\nconst char* s = "asm(";',
    "int asm_count(int); int y = asm_count(1);",
    '#if defined(__CUDA_ARCH__)\nasm("nop");\n#else\nint fallback;\n#endif',
    '#ifndef __CUDASIM__\n#ifdef X\nasm("nop");\n#endif\n#endif',
])
def test_asm_in_comments_strings_names_or_gpu_only_branches_is_kept(code):
    assert "asm" in translate_source(code, "t.cu")
