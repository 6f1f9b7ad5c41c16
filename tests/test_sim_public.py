"""Public CUDA as people publish it runs unchanged: the 16- and 8-bit float APIs, launches in
macros, enumerators as sizes, shuffles in a partial warp, registrations through a project's macro,
tiles of several warps and scans, and the runtime API that the CUDA samples use.

The kernels live in tests/sim_compat/ and are ordinary CUDA: every op runs on the sim backend and,
where a GPU is present, on cuda too, against an exact reference or PyTorch. Tests of what only the
simulator does (its errors) run on sim alone.
"""
from __future__ import annotations

import math
import os
import re
import time
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.dev.compile_check import file_flags

# The simulator's reach beyond the lessons (public CUDA, inline PTX): `make test-toolkit` (kernels/dev/all_tests.py).
pytestmark = pytest.mark.toolkit

HERE = Path(__file__).parent / "sim_compat"
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])
# As llm.c builds: the implicit conversions and operators of the 16-bit types on (the file's "build flags:" line,
# which the compile check and the build cache use too).
CONVERSIONS_ON = file_flags(HERE / "half_types.cu")
assert "-U__CUDA_NO_BFLOAT16_CONVERSIONS__" in CONVERSIONS_ON


def _device(backend: str) -> torch.device:
    return torch.device("cuda" if backend == "cuda" else "cpu")


def _line_of(marker: str, path: Path) -> int:
    return next(i + 1 for i, line in enumerate(path.read_text().splitlines()) if marker in line)


@pytest.fixture(scope="module", params=BACKENDS)
def halves(request):
    return request.param, load(HERE / "half_types.cu", request.param, extra_cflags=CONVERSIONS_ON)


@pytest.fixture(scope="module", params=BACKENDS)
def forms(request):
    return request.param, load(HERE / "launch_forms.cu", request.param)


@pytest.fixture(scope="module", params=BACKENDS)
def tiles(request):
    return request.param, load(HERE / "cg_tiles.cu", request.param)


# ---------------------------------------------------------------------------------------------
# an exact reference for the small float formats: (stored mantissa bits, exponent bits, has infinity)
FORMATS = {"half": (10, 5, True), "bf16": (7, 8, True), "e4m3": (3, 4, False), "e5m2": (2, 5, True)}
MODES = ("rn", "rz", "rd", "ru")


def _max_finite(mant: int, exp: int, has_inf: bool) -> int:
    top = (1 << exp) - (2 if has_inf else 1)
    return top << mant | ((1 << mant) - (1 if has_inf else 2))


def round_bits(value, fmt: str, mode: str = "rn", satfinite: bool = False) -> int:
    """The bits of `value` (a float, int or Fraction; not NaN) rounded to the format in CUDA's mode."""
    mant, exp, has_inf = FORMATS[fmt]
    sign_bit = 1 << (mant + exp)
    neg = value < 0 or (isinstance(value, float) and math.copysign(1.0, value) < 0)
    sign = sign_bit if neg else 0
    inf_bits = ((1 << exp) - 1) << mant
    if isinstance(value, float) and math.isinf(value):
        return sign | (_max_finite(*FORMATS[fmt]) if satfinite else inf_bits if has_inf else sign_bit - 1)
    a = abs(Fraction(value))
    if a == 0:
        return sign
    bias = (1 << (exp - 1)) - 1
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e, 1 - bias) - mant
    n = a / Fraction(2) ** q
    r = math.floor(n)
    frac = n - r
    up = {"rn": frac > Fraction(1, 2) or (frac == Fraction(1, 2) and r % 2 == 1), "rz": False,
          "rd": neg and frac > 0, "ru": not neg and frac > 0}[mode]
    r += up
    if r == 1 << (mant + 1):
        r, q = r // 2, q + 1
    bits = r if r < (1 << mant) else (q + mant + bias) << mant | (r - (1 << mant))
    if bits > _max_finite(mant, exp, has_inf):
        to_max = satfinite or mode == "rz" or (mode == "rd" and not neg) or (mode == "ru" and neg)
        return sign | (_max_finite(mant, exp, has_inf) if to_max else inf_bits if has_inf else sign_bit - 1)
    return sign | bits


def decode(bits: int, fmt: str) -> float:
    """The value of a format's bits."""
    mant, exp, has_inf = FORMATS[fmt]
    neg, field, m = bits >> (mant + exp) & 1, bits >> mant & ((1 << exp) - 1), bits & ((1 << mant) - 1)
    top = (1 << exp) - 1
    if field == top and (has_inf or m == (1 << mant) - 1):
        return math.nan if (m or not has_inf) else (-math.inf if neg else math.inf)
    bias = (1 << (exp - 1)) - 1
    v = math.ldexp(m, 1 - bias - mant) if field == 0 else math.ldexp((1 << mant) + m, field - bias - mant)
    return -v if neg else v


def _special_floats() -> list[float]:
    return [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 5.96e-8, 2.98e-8, 1e-40, -1e-40,
            3.39e38, 3.4e38, math.inf, -math.inf, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8,
            1.0 + 2.0 ** -8 + 2.0 ** -20]


# ---------------------------------------------------------------------------------------------
# 16-bit floats: cuda_fp16.h and cuda_bf16.h
def test_the_issues_bfloat16_reproducer_builds_and_runs(halves):
    backend, ext = halves
    p = torch.tensor([1.5, 2.25, 0.5, 0.25, 7.0, 9.0], dtype=torch.bfloat16, device=_device(backend))
    torch.testing.assert_close(ext.bf16_api(p).cpu(), torch.tensor([1.5, 2.25, 3.5, 4.75, 0.0, 9.0],
                                                                   dtype=torch.bfloat16))


def test_a_build_with_its_own_nvcc_macro_flags_does_not_take_the_precompiled_headers(tmp_path):
    # LeetCUDA's scripts pass -U__CUDA_NO_HALF_OPERATORS__ and friends in extra_cuda_cflags. The precompiled headers
    # hold PyTorch's macros (made by an earlier build of the same headers: the first load below), and clang refused
    # them beside a file's own -U ("defined in the precompiled header but undef'd on the command line"): such a
    # build parses the headers itself. Copies with names and texts of their own, so that no cache answers.
    stamp = f"{os.getpid()}_{time.time_ns()}"
    body = ("#include <torch/extension.h>\n#include <cuda_fp16.h>\n"
            "__global__ void twice_kernel(half* x) { x[threadIdx.x] = X_PLUS_X; }\n"
            "void twice(torch::Tensor x) { twice_kernel<<<1, x.numel()>>>(reinterpret_cast<half*>(x.data_ptr())); }\n"
            "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"twice\", &twice); }\n")
    plain, own = tmp_path / f"plain_{stamp}.cu", tmp_path / f"own_{stamp}.cu"
    plain.write_text("#define X_PLUS_X __hadd(x[threadIdx.x], x[threadIdx.x])\n" + body)
    own.write_text("#define X_PLUS_X x[threadIdx.x] + x[threadIdx.x]  // half's operator+\n" + body)
    x = torch.tensor([1.5, -2.0, 0.25], dtype=torch.half)
    for src, flags in ((plain, []), (own, CONVERSIONS_ON)):
        ext = load(src, "sim", extra_cuda_cflags=flags, quiet=True)
        y = x.clone()
        ext.twice(y)
        assert y.tolist() == [3.0, -4.0, 0.5]


def test_the_exact_reference_rounds_to_nearest_as_pytorch_does():
    x = torch.tensor(_special_floats()[:-4] + torch.randn(2000).mul(100).tolist(), dtype=torch.float32)
    for fmt, dtype in (("half", torch.float16), ("bf16", torch.bfloat16)):
        want = x.to(dtype).view(torch.int16).int() & 0xFFFF
        assert [round_bits(v, fmt) for v in x.tolist()] == want.tolist(), fmt


def test_floats_round_to_half_and_bfloat16_in_all_four_modes_as_the_exact_reference(halves):
    backend, ext = halves
    values = _special_floats() + (torch.randn(3000) * torch.logspace(-9, 9, 3000)).tolist()
    x = torch.tensor(values, dtype=torch.float32)
    got = ext.round_floats(x.to(_device(backend))).cpu()
    for col, (fmt, mode) in enumerate((f, m) for f in ("half", "bf16") for m in MODES):
        want = [round_bits(v, fmt, mode) for v in x.tolist()]
        bad = [(v, g, w) for v, g, w in zip(x.tolist(), got[:, col].tolist(), want) if g != w]
        assert not bad, f"{fmt} _{mode}: (value, got, want) {bad[:5]}"


def test_64_bit_integers_round_to_half_and_bfloat16_exactly_in_all_four_modes(halves):
    backend, ext = halves
    ints = [0, 1, -1, 2049, 2051, 65519, 65520, -65520, 70000, 2 ** 53 + 1, -(2 ** 62) - 12345, 2 ** 63 - 1,
            -(2 ** 63), 0x0101000000000001, 257, 259, -259]
    ints += torch.randint(-2 ** 40, 2 ** 40, (500,)).tolist()
    got = ext.round_ints(torch.tensor(ints, dtype=torch.int64, device=_device(backend))).cpu()
    for col, (fmt, mode) in enumerate((f, m) for f in ("half", "bf16") for m in MODES):
        want = [round_bits(v, fmt, mode) for v in ints]
        bad = [(v, g, w) for v, g, w in zip(ints, got[:, col].tolist(), want) if g != w]
        assert not bad, f"{fmt} _{mode}: (value, got, want) {bad[:5]}"


def _to_integer(v: float, mode: str, lo: int, hi: int) -> int:
    """CUDA's float-to-integer conversion: rounded in `mode`, saturated to [lo, hi]; NaN to 0, or to
    0x8000000000000000 for a 64-bit type (cuda_fp16.h's documentation, and the H100)."""
    if math.isnan(v):
        return -2 ** 63 if hi - lo > 2 ** 32 else 0
    if math.isinf(v):
        return hi if v > 0 else lo
    f = Fraction(v)
    r = {"rn": round(f), "rz": math.trunc(f), "rd": math.floor(f), "ru": math.ceil(f)}[mode]
    return min(max(r, lo), hi)


@pytest.mark.parametrize("fmt", ["half", "bf16"])
def test_half_and_bfloat16_convert_to_integers_rounding_saturating_and_nan_as_cuda_defines(halves, fmt):
    backend, ext = halves
    bits = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x3E00, 0x4100, 0xC100, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00,
            0x3F80, 0x4F00, 0xCF00, 0x7F7F, 0xFF7F, 0x7F80, 0x7FC0, 0x5F00, 0x4380, 0xC300]
    bits += torch.randint(0, 0x10000, (400,)).tolist()
    got = ext.to_ints(torch.tensor(bits, dtype=torch.int32, device=_device(backend)), fmt == "bf16").cpu()
    i32, u32, i16, i64 = (-2 ** 31, 2 ** 31 - 1), (0, 2 ** 32 - 1), (-2 ** 15, 2 ** 15 - 1), (-2 ** 63, 2 ** 63 - 1)
    columns = [("rn", i32), ("rz", i32), ("rd", i32), ("ru", i32), ("rn", u32), ("rn", i16), ("rz", i64),
               ("rz", (0, 255)), ("rz", (-128, 127)), ("rz", i32)]
    for b, row in zip(bits, got.tolist()):
        v = decode(b, fmt)
        want = [_to_integer(v, mode, *limits) for mode, limits in columns]
        assert row == want, f"{fmt} bits 0x{b:04x} ({v}): got {row}, want {want}"


def _is_nan_bits(bits: int, fmt: str) -> bool:
    return math.isnan(decode(bits & 0xFFFF, fmt))


def _arith_expected(a: int, b: int, c: int, fmt: str) -> list:
    """What __hadd ... __hisinf give for a, b, c (bits): bits, None for any NaN, or 0/1 and -1/0/1."""
    x, y, z = decode(a, fmt), decode(b, fmt), decode(c, fmt)

    def exact(op):
        """op's exact result rounded to nearest even (None for NaN). With a zero, infinity or NaN among
        the operands float64 gives it exactly (and the signs of zeros); otherwise fractions do."""
        if any(math.isnan(t) or math.isinf(t) or t == 0 for t in (x, y, z)):
            v = op(*(torch.tensor(t, dtype=torch.float64) for t in (x, y, z))).item()
        else:
            v = op(Fraction(x), Fraction(y), Fraction(z))
        return None if isinstance(v, float) and math.isnan(v) else round_bits(v, fmt)

    def pick(greater: bool, nan_wins: bool):
        if math.isnan(x) or math.isnan(y):
            return None if (nan_wins or (math.isnan(x) and math.isnan(y))) else (b if math.isnan(x) else a)
        if x == y:  # +0 is above -0
            a_positive = not a >> sum(FORMATS[fmt][:2])
            return a if a_positive == greater else b
        return a if (x > y) == greater else b

    s, f = exact(lambda p, q, _: p + q), exact(lambda p, q, r: p * q + r)
    # the _sat forms clamp to [0, 1] with NaN to +0; the _relu forms make negatives +0 and keep NaN
    sat = 0 if s is None or decode(s, fmt) <= 0 else min(s, round_bits(1.0, fmt))
    relu = None if f is None else (0 if decode(f, fmt) < 0 else f)
    ordered = not (math.isnan(x) or math.isnan(y))
    return [s, exact(lambda p, q, _: p - q), exact(lambda p, q, _: p * q), exact(lambda p, q, _: p / q), f,
            pick(True, False), pick(False, False), pick(True, True), pick(False, True), sat, relu,
            int(ordered and x == y), int(not ordered or x != y), int(ordered and x < y), int(not ordered or x >= y),
            int(math.isnan(x)), 0 if not math.isinf(x) else (1 if x > 0 else -1)]


@pytest.mark.parametrize("fmt", ["half", "bf16"])
def test_arithmetic_max_min_and_comparisons_follow_cudas_rounding_nan_and_zero_rules(halves, fmt):
    backend, ext = halves
    if backend == "cuda" and fmt == "bf16" and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("bfloat16 arithmetic (__hfma, __hmax, ...) needs compute capability 8.0")
    special = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00, 0x0001, 0x7BFF] if fmt == "half" else \
              [0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x7F7F]
    ties = [(0x3C88, 0x3C88, 0x0001)] if fmt == "bf16" else [(0x3C10, 0x3C10, 0x0001)]  # products on a midpoint
    fmt_dtype = torch.float16 if fmt == "half" else torch.bfloat16
    rand = (torch.randn(3, 600) * torch.logspace(-3, 3, 600)).to(fmt_dtype).view(torch.int16).int() & 0xFFFF
    a = special * len(special) + [t[0] for t in ties] + rand[0].tolist()
    b = [s for s in special for _ in special] + [t[1] for t in ties] + rand[1].tolist()
    c = [special[(i * 7) % len(special)] for i in range(len(special) ** 2)] + [t[2] for t in ties] + rand[2].tolist()
    dev = _device(backend)
    got = ext.arith(*(torch.tensor(v, dtype=torch.int32, device=dev) for v in (a, b, c)), fmt == "bf16").cpu()
    names = ["hadd", "hsub", "hmul", "hdiv", "hfma", "hmax", "hmin", "hmax_nan", "hmin_nan", "hadd_sat",
             "hfma_relu", "heq", "hneu", "hlt", "hgeu", "hisnan", "hisinf"]
    for i, row in enumerate(got.tolist()):
        want = _arith_expected(a[i], b[i], c[i], fmt)
        for name, g, w in zip(names, row, want):
            if w is None:
                assert _is_nan_bits(g, fmt), f"{name}({a[i]:#06x}, {b[i]:#06x}, {c[i]:#06x}): got {g:#06x}, want a NaN"
            elif name == "hdiv" and backend == "cuda":  # the GPU's division may be off by one unit in the last place
                assert abs(g - w) <= 1 or g == w, f"hdiv({a[i]:#06x}, {b[i]:#06x}): got {g:#06x}, want {w:#06x}"
            else:
                assert g == w, f"{name}({a[i]:#06x}, {b[i]:#06x}, {c[i]:#06x}): got {g:#06x}, want {w:#06x}"


def test_fp8_conversions_round_to_nearest_and_saturate_as_the_reference_and_pytorch(halves):
    backend, ext = halves
    values = [0.0, -0.0, 0.1, 448.0, 464.0, 479.0, 480.0, 500.0, -1e9, 1e-9, 2.0 ** -10, 2.0 ** -9 * 1.5,
              57344.0, 61439.0, 61440.0, 1e6, -1e6, math.inf, -math.inf]
    values += (torch.randn(2000) * torch.logspace(-4, 5, 2000)).tolist()
    x = torch.tensor(values, dtype=torch.float32)
    bits, back = (t.cpu() for t in ext.fp8(x.to(_device(backend))))
    columns = [("e4m3", True), ("e4m3", False), ("e5m2", True), ("e5m2", False)]
    for col, (fmt, sat) in enumerate(columns):
        want = [round_bits(v, fmt, "rn", satfinite=sat) for v in x.tolist()]
        bad = [(v, g, w) for v, g, w in zip(x.tolist(), bits[:, col].tolist(), want)
               if g != w and not (_is_nan_bits(g, fmt) and _is_nan_bits(w, fmt))]
        assert not bad, f"{fmt} {'satfinite' if sat else 'nosat'}: (value, got, want) {bad[:5]}"
    finite = x.abs() <= 448
    torch.testing.assert_close(back[finite, 0], x[finite].to(torch.float8_e4m3fn).float(), rtol=0, atol=0)
    finite = x.abs() <= 57344
    torch.testing.assert_close(back[finite, 1], x[finite].to(torch.float8_e5m2).float(), rtol=0, atol=0)


def test_atomic_add_on_bfloat162_from_many_blocks_adds_every_thread_once(halves):
    backend, ext = halves
    like = torch.empty(0, device=_device(backend))
    out = ext.bf162_sum(like, 5, 8, 25).float().cpu()  # 200 threads; sums up to 80 are exact in bfloat16
    torch.testing.assert_close(out, torch.tensor([[40.0, 80.0]] * 5))


def test_bfloat16_pairs_read_through_an_int_pointer_are_the_values_just_stored(halves):
    # type punning as fast.cu packs bf16 pairs: with C++'s strict aliasing rules the host compiler may read the
    # ints before the bf16 stores of the same round (clang did), so sim builds turn them off
    backend, ext = halves
    x = torch.randn(32) * 100
    pairs = x.bfloat16().view(torch.int32).view(4, 4)[:, [0, 3]].reshape(-1)
    assert torch.equal(ext.bf16_pack(x.to(_device(backend))).cpu(), pairs)


def test_cache_hinted_stores_of_a_float_through_a_bfloat16_pointer_convert_it(halves):
    backend, ext = halves
    x = torch.randn(300)
    want = torch.stack([x.bfloat16(), x.bfloat16(), (2 * x).bfloat16()], 1)
    assert torch.equal(ext.bf16_stores(x.to(_device(backend))).cpu(), want)


@pytest.mark.sim_only
def test_the_race_check_sees_16_bit_atomic_adds_as_atomics_and_a_plain_add_as_a_race():
    from kernels.sim.instrumented import compiler_problem
    from kernels.sim.racecheck import checked

    if compiler_problem():
        pytest.skip(compiler_problem())
    ext = load(HERE / "half_types.cu", "sim", extra_cflags=CONVERSIONS_ON)
    out = checked(ext.bf162_sum, torch.empty(0), 5, 8, 25)
    torch.testing.assert_close(out.float(), torch.tensor([[40.0, 80.0]] * 5))
    line = _line_of("RACE-LINE", HERE / "half_types.cu")
    with pytest.raises(RuntimeError, match=rf"half_types.cu:{line}"):
        checked(ext.bf162_sum, torch.empty(0), 5, 8, 25, atomic=False)


# ---------------------------------------------------------------------------------------------
# launches and registrations as projects write them
def test_an_enumerator_gives_the_dynamic_shared_memory_size(forms):
    backend, ext = forms
    x = torch.randn(32, device=_device(backend))
    torch.testing.assert_close(ext.reverse32(x), x.flip(0), rtol=0, atol=0)


@pytest.mark.parametrize("n", [1, 300, 1000])
def test_launches_split_over_a_macros_lines_and_pasted_with_hash_hash_run(forms, n):
    backend, ext = forms
    x = torch.randn(n, device=_device(backend))
    plain, typed = ext.scale_macro(x, 3.0)
    torch.testing.assert_close(plain, 3 * x)
    torch.testing.assert_close(typed, 3 * x + 1)


@pytest.mark.parametrize("n", [40, 33, 64])
def test_a_full_mask_shuffle_in_a_partial_warp_reads_only_lanes_that_exist(forms, n):
    backend, ext = forms
    out = ext.shift_up(torch.empty(0, device=_device(backend)), n).cpu()
    assert out.tolist() == [t if t % 32 == 0 else t - 1 for t in range(n)]


@pytest.mark.parametrize("n", [120, 240, 1000])
def test_a_tile_scan_in_120_thread_blocks_covers_the_partial_last_tile(forms, n):
    backend, ext = forms
    x = torch.randint(-50, 50, (n,), dtype=torch.int32, device=_device(backend))
    want = torch.empty_like(x.cpu())
    for block in range(0, n, 120):
        for start in range(block, min(block + 120, n), 32):
            end = min(start + 32, block + 120, n)
            want[start:end] = x.cpu()[start:end].cumsum(0)
    assert torch.equal(ext.row_prefix(x).cpu(), want)


def test_cuda_launch_kernel_with_arguments_behind_void_pointers_runs(forms):
    backend, ext = forms
    x = torch.randn(1000, device=_device(backend))
    torch.testing.assert_close(ext.launch_kernel(x, -2.0), -2 * x)


def test_a_project_macro_around_torch_library_impl_registers_for_the_simulators_device(forms):
    backend, ext = forms
    key = "CUDA" if backend == "cuda" else "CPU"
    op = getattr(torch.ops, ext.ns).reverse32.default
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)


# ---------------------------------------------------------------------------------------------
# torch/extension.h's light stand-in on the simulator: what public bindings use of it
_BINDING = """#include <torch/extension.h>
#include <torch/types.h>

__global__ void twice_kernel(const float* x, float* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 2 * x[i];
}

torch::Tensor twice(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cuda() && x.dtype() == torch::kFloat32, "x must be a float32 CUDA tensor");
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n) twice_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("twice", torch::wrap_pybind_function(twice), "twice");
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_binding_as_load_inline_writes_it_with_torch_types_h_builds_with_the_light_header(tmp_path, backend):
    """PyTorch's load_inline binds each function through torch::wrap_pybind_function; extensions also
    include <torch/types.h>, whose names the light header gives itself."""
    path = tmp_path / f"bound_{backend}.cu"
    path.write_text(_BINDING)
    ext = load(path, backend)
    if backend == "sim":
        out = Path(ext.__file__).parent
        main = next((out / "sim_src").glob("sim_0_*.cpp")).read_text()
        assert "#include <cudasim_torch_extension.h>" in main and not (out / "light_torch.log").exists()
    x = torch.randn(1000, device=_device(backend))
    torch.testing.assert_close(ext.twice(x), 2 * x)


@pytest.mark.sim_only
def test_a_syntax_error_in_a_torch_extension_file_is_reported_from_the_first_compile(tmp_path, capsys):
    path = tmp_path / "typo.cu"
    path.write_text(_BINDING.replace("auto out = torch::empty_like(x);", "auto out = torch::empty_like(x)"))
    with pytest.raises(Exception, match=r"typo.cu:1[12]:\d+: error: expected (.,. or .;. before .const.|.;. at end of declaration)"):
        load(path, "sim")
    assert "full header" not in capsys.readouterr().out  # no second compile with the real torch/extension.h


# ---------------------------------------------------------------------------------------------
# cooperative groups: tiles of several warps, scans
def _big_tile_expected(x: list[int], n: int) -> list[list[int]]:
    rows = []
    for i, v in enumerate(x):
        t = i % 512
        r, base = t % n, i - t % n
        tile = x[base:base + n]
        rows.append([r, t // n, 512 // n, n, tile[(r + 1) % n], tile[5], int(any(u > 6 for u in tile)),
                     int(all(u > -7 for u in tile)), sum(tile), sum(tile[:r + 1]), sum(tile[:r])])
    return rows


@pytest.mark.parametrize("n", [64, 128, 256, 512])
def test_tiles_of_several_warps_sync_shuffle_vote_reduce_and_scan(tiles, n):
    backend, ext = tiles
    x = torch.randint(-8, 8, (1024,), dtype=torch.int32)
    out = ext.big_tile(x.to(_device(backend)), n).cpu()
    assert out.tolist() == _big_tile_expected(x.tolist(), n)


def test_scans_over_tiles_of_a_warp_and_less_and_over_coalesced_threads(tiles):
    backend, ext = tiles
    x = torch.randint(-9, 10, (200,), dtype=torch.int32)
    out = ext.warp_scans(x.to(_device(backend))).cpu().tolist()
    v = x.tolist() + [0] * 56  # the last block's threads past the end take part with 0
    for i in range(200):
        t8, t32 = i - i % 8, i - i % 32
        odd_before = sum(1 for j in range(t32, i) if v[j] % 2 != 0)
        want = [sum(v[t8:i + 1]), sum(v[t8:i]), max(v[t32:i + 1]), sum(v[t32:i]),
                odd_before if v[i] % 2 != 0 else -1, i % 32 + 1]
        assert out[i] == want, f"element {i}: got {out[i]}, want {want}"


# ---------------------------------------------------------------------------------------------
# what a GPU leaves undefined or stops at, named by the simulator (undefined_public.cu)
@pytest.fixture(scope="module")
def undefined_public():
    return load(HERE / "undefined_public.cu", "sim")


@pytest.mark.sim_only
def test_a_shuffle_reading_a_lane_outside_its_mask_is_an_error_naming_both_lanes(undefined_public):
    line = _line_of("MASK-LINE", HERE / "undefined_public.cu")
    with pytest.raises(RuntimeError, match=re.escape(
            f"__shfl_down_sync at undefined_public.cu:{line} with mask 0x000fffff: lane 4 reads lane 20 "
            "(thread (20,0,0)), which is not in the mask") + ".*undefined on a GPU"):
        undefined_public.outside_mask_sum(torch.randn(32), 20)
    x = torch.randn(32)
    torch.testing.assert_close(undefined_public.outside_mask_sum(x, 32), x.sum().reshape(1))


@pytest.mark.sim_only
def test_a_tile_of_64_waiting_for_threads_at_syncthreads_is_a_deadlock_naming_both(undefined_public):
    src = HERE / "undefined_public.cu"
    tile, bar = _line_of("TILE-LINE", src), _line_of("BAR-LINE", src)
    with pytest.raises(RuntimeError, match=rf"deadlock: thread_block_tile<64>::sync\(\) at undefined_public.cu:{tile} "
                                           rf"waits for threads of its tile \(threads 0-63 of the block\).*32 (\(at "
                                           rf"__syncthreads, undefined_public.cu:{bar}\))"):
        undefined_public.tile_deadlock(torch.empty(0))


@pytest.mark.sim_only
def test_trap_stops_the_kernel_with_an_error_naming_the_thread_and_line(undefined_public):
    line = _line_of("TRAP-LINE", HERE / "undefined_public.cu")
    with pytest.raises(RuntimeError, match=rf"__trap\(\) at undefined_public.cu:{line}: the kernel stopped itself.*"
                                           r"thread \(5,0,0\)"):
        undefined_public.trap(torch.empty(0))
