"""Test cases for single PTX instructions: their inputs, what the PTX ISA says they give, and the
recorder that runs them on a GPU.

Each case names an op of tests/sim_kernels/ptx_ops.cu (or ptx_hopper.cu) and its arguments, drawn
from a fixed seed, so that the simulator's test (tests/test_sim_ptx.py) and a GPU run see the same
inputs. `reference` computes the expected result from the PTX ISA's definitions (fragment layouts,
swizzles, rounding), written here independently of the simulator. On a GPU machine

    python tests/ptx_cases.py --out DIR

runs every case on the GPU (in a child process; after a case that faults, the rest go on in a new one) and saves
{case: {"digest" of its inputs, "out" or "error"}} in one file per source file (the interleaved tensor maps' cases
in ptx_tma_interleave.pt; `--files ptx_tma_interleave` records that file alone); copied to tests/ptx_vectors/,
the simulator's test then also compares itself with the GPU's answers (bit for bit, or within the stated
tolerance for float sums whose order the hardware chooses and .approx functions), and expects an error where
the GPU stopped the kernel.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "sim_kernels"
VECTORS = HERE / "ptx_vectors"


@dataclass
class Case:
    file: str                 # the .cu file in tests/sim_kernels
    op: str                   # its op
    args: list                # tensors (on the CPU) and numbers
    exact: bool = True        # bit for bit; else within rtol/atol of the GPU
    rtol: float = 0.0
    atol: float = 0.0
    notes: dict = field(default_factory=dict)
    faults: str = ""          # the GPU stops the kernel: the simulator must raise an error matching this
    sim_refuses: str = ""     # the GPU runs it, past what the simulator can do: it raises an error matching this
    vectors: str = ""         # the vector file that holds its recorded answer, when not the .cu file's stem


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _bits(x: torch.Tensor) -> torch.Tensor:
    """A float32 tensor's bits as int32."""
    return x.contiguous().view(torch.int32)


def _u32(t: torch.Tensor) -> list[int]:
    return [v & 0xFFFFFFFF for v in t.reshape(-1).tolist()]


def _i32(values) -> torch.Tensor:
    return torch.tensor([v - (1 << 32) if v >= 1 << 31 else v for v in values], dtype=torch.int32)


# ---------------------------------------------------------------------------------------------
# mma.sync: the forms of ptx_ops.cu's mma_raw, in its order
@dataclass(frozen=True)
class MmaForm:
    k: int
    d: str
    a: str
    b: str
    c: str
    satf: bool = False

    @property
    def name(self) -> str:
        return f"m16n8k{self.k}.{'satfinite.' if self.satf else ''}{self.d}.{self.a}.{self.b}.{self.c}"


MMA_FORMS = [MmaForm(16, "f32", "bf16", "bf16", "f32"), MmaForm(16, "f32", "f16", "f16", "f32"),
             MmaForm(16, "f16", "f16", "f16", "f16"), MmaForm(8, "f32", "bf16", "bf16", "f32"),
             MmaForm(8, "f32", "f16", "f16", "f32"), MmaForm(8, "f32", "tf32", "tf32", "f32"),
             MmaForm(4, "f32", "tf32", "tf32", "f32"), MmaForm(32, "s32", "s8", "s8", "s32"),
             MmaForm(32, "s32", "u8", "u8", "s32"), MmaForm(32, "s32", "s8", "s8", "s32", True),
             MmaForm(16, "s32", "s8", "s8", "s32"), MmaForm(32, "s32", "s8", "u8", "s32"),
             MmaForm(8, "f16", "f16", "f16", "f16"), MmaForm(32, "f32", "e4m3", "e4m3", "f32")]

ELEM_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "s8": 8, "u8": 8, "e4m3": 8, "f32": 32, "s32": 32}


def mma_a_place(k: int, t: str, lane: int, reg: int, part: int) -> tuple[int, int]:
    """PTX ISA, 'Matrix fragments for mma.m16n8k*': the (row, column) of A that part `part` of
    register `reg` of `lane` holds."""
    group, tid = lane // 4, lane % 4
    if t == "tf32":
        return (group + 8 * (reg % 2), tid + 4 * (reg // 2)) if k == 8 else (group + 8 * reg, tid)
    if ELEM_BITS[t] == 16:
        return (group + 8 * (reg % 2), 2 * tid + part + 8 * (reg // 2)) if k == 16 else (group + 8 * reg, 2 * tid + part)
    return (group + 8 * (reg % 2), 4 * tid + part + 16 * (reg // 2)) if k == 32 else (group + 8 * reg, 4 * tid + part)


def mma_b_place(k: int, t: str, lane: int, reg: int, part: int) -> tuple[int, int]:
    """The (row k, column n) of B."""
    group, tid = lane // 4, lane % 4
    if t == "tf32":
        return (tid + 4 * reg, group)
    if ELEM_BITS[t] == 16:
        return (2 * tid + part + 8 * reg, group)
    return (4 * tid + part + 16 * reg, group)


def mma_cd_place(t: str, lane: int, reg: int, part: int) -> tuple[int, int]:
    group, tid = lane // 4, lane % 4
    if t == "f16":
        return (group + 8 * reg, 2 * tid + part)
    return (group + 8 * (reg // 2), 2 * tid + reg % 2)


def _parts(t: str) -> int:
    return 32 // ELEM_BITS[t]


def _decode(t: str, bits: int) -> float:
    if t in ("f16", "bf16"):
        dt = torch.float16 if t == "f16" else torch.bfloat16
        return torch.tensor([bits - (1 << 16) if bits >= 1 << 15 else bits], dtype=torch.int16).view(dt).item()
    if t in ("tf32", "f32"):
        if t == "tf32" and (bits >> 23) & 0xFF != 0xFF:
            bits &= ~0x1FFF  # the tensor core reads 19 bits of a tf32 operand
        return torch.tensor([bits - (1 << 32) if bits >= 1 << 31 else bits], dtype=torch.int32).view(torch.float32).item()
    if t == "s8":
        return bits - 256 if bits >= 128 else bits
    if t == "u8":
        return bits
    if t == "e4m3":
        return torch.tensor([bits], dtype=torch.uint8).view(torch.float8_e4m3fn).float().item()
    if t == "e5m2":
        return torch.tensor([bits], dtype=torch.uint8).view(torch.float8_e5m2).float().item()
    if t == "s32":
        return bits - (1 << 32) if bits >= 1 << 31 else bits
    raise ValueError(t)


def _encode(t: str, v) -> int:
    if t == "f32":
        return torch.tensor([v], dtype=torch.float32).view(torch.int32).item() & 0xFFFFFFFF
    if t == "f16":
        return torch.tensor([v], dtype=torch.float16).view(torch.int16).item() & 0xFFFF
    if t == "s32":
        return int(v) & 0xFFFFFFFF
    raise ValueError(t)


def mma_reference(form: MmaForm, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """D = A B + C from the registers, in float64 (exact for the integer-valued inputs used), then
    rounded once to D's type."""
    k = form.k
    na = 16 * k // 32 // _parts(form.a)
    nb = k * 8 // 32 // _parts(form.b)
    nc = 2 if form.c == "f16" else 4
    nd = 2 if form.d == "f16" else 4
    A = [[0.0] * k for _ in range(16)]
    B = [[0.0] * 8 for _ in range(k)]
    C = [[0.0] * 8 for _ in range(16)]
    au, bu, cu = (_u32(x) for x in (a, b, c))
    for lane in range(32):
        for r in range(na):
            for p in range(_parts(form.a)):
                i, j = mma_a_place(k, form.a, lane, r, p)
                A[i][j] = _decode(form.a, (au[lane * 4 + r] >> (ELEM_BITS[form.a] * p)) & ((1 << ELEM_BITS[form.a]) - 1))
        for r in range(nb):
            for p in range(_parts(form.b)):
                i, j = mma_b_place(k, form.b, lane, r, p)
                B[i][j] = _decode(form.b, (bu[lane * 2 + r] >> (ELEM_BITS[form.b] * p)) & ((1 << ELEM_BITS[form.b]) - 1))
        for r in range(nc):
            for p in range(2 if form.c == "f16" else 1):
                i, j = mma_cd_place(form.c, lane, r, p)
                C[i][j] = _decode(form.c, (cu[lane * 4 + r] >> (16 * p)) & (0xFFFF if form.c == "f16" else 0xFFFFFFFF))
    D = [[sum(A[i][x] * B[x][j] for x in range(k)) + C[i][j] for j in range(8)] for i in range(16)]
    out = [0] * 128
    for lane in range(32):
        for r in range(nd):
            if form.d == "f16":
                lo = _encode("f16", D[mma_cd_place("f16", lane, r, 0)[0]][mma_cd_place("f16", lane, r, 0)[1]])
                hi = _encode("f16", D[mma_cd_place("f16", lane, r, 1)[0]][mma_cd_place("f16", lane, r, 1)[1]])
                out[lane * 4 + r] = lo | hi << 16
            else:
                v = D[mma_cd_place(form.d, lane, r, 0)[0]][mma_cd_place(form.d, lane, r, 0)[1]]
                if form.d == "s32":
                    v = max(-(1 << 31), min((1 << 31) - 1, int(v))) if form.satf else int(v)
                out[lane * 4 + r] = _encode(form.d, v)
    return _i32(out).view(32, 4)


def _mma_inputs(form: MmaForm, seed: int, exact: bool) -> list[torch.Tensor]:
    """Registers full of elements: small integers (sums exact in any order), or random floats."""
    g = _gen(seed)

    def elems(t: str, n: int) -> list[int]:
        if t in ("s8", "u8"):
            lo, hi = (-128, 128) if t == "s8" else (0, 256)
            return [v & 0xFF for v in torch.randint(lo, hi, (n,), generator=g).tolist()]
        vals = torch.randint(-4, 5, (n,), generator=g).float() if exact else torch.randn(n, generator=g)
        if t == "e4m3":
            return vals.to(torch.float8_e4m3fn).view(torch.uint8).tolist()
        if t in ("f16", "bf16"):
            return [v & 0xFFFF for v in vals.to(torch.float16 if t == "f16" else torch.bfloat16).view(torch.int16).tolist()]
        bits = _u32(_bits(vals))
        if t == "tf32" and not exact:  # leave the low bits set: the tensor core must ignore them
            return bits
        return bits

    def regs(t: str, count: int, width: int) -> torch.Tensor:
        per = _parts(t)
        e = elems(t, 32 * count * per)
        out = []
        for lane in range(32):
            for r in range(width):
                v = 0
                if r < count:
                    for p in range(per):
                        v |= e[(lane * count + r) * per + p] << (ELEM_BITS[t] * p)
                out.append(v)
        return _i32(out).view(32, width)

    k = form.k
    a = regs(form.a, 16 * k // 32 // _parts(form.a), 4)
    b = regs(form.b, k * 8 // 32 // _parts(form.b), 2)
    if form.c == "s32":
        big = form.satf
        cvals = torch.randint(-(2**20), 2**20, (128,), generator=g)
        if big:  # push some sums past the int32 range: satfinite clamps, the others wrap
            cvals[::3] = 2**31 - 100
            cvals[1::3] = -(2**31) + 100
        c = cvals.to(torch.int32).view(32, 4)
    elif form.c == "f16":
        c = regs("f16", 2, 4)
    else:
        cv = torch.randint(-8, 9, (128,), generator=g).float() if exact else torch.randn(128, generator=g)
        c = _bits(cv).view(32, 4)
    return [a, b, c]


def mma_cases() -> dict[str, Case]:
    out = {}
    for i, form in enumerate(MMA_FORMS):
        a, b, c = _mma_inputs(form, 100 + i, exact=True)
        out[f"mma_{form.name}_exact"] = Case("ptx_ops.cu", "mma_raw", [a, b, c, i])
        if form.a not in ("s8", "u8"):
            a, b, c = _mma_inputs(form, 200 + i, exact=False)
            out[f"mma_{form.name}_random"] = Case("ptx_ops.cu", "mma_raw", [a, b, c, i], exact=False, rtol=1e-5,
                                                  atol=1e-5 if form.d == "f32" else 2e-3)
    return out


# ---------------------------------------------------------------------------------------------
# ldmatrix / stmatrix
LDMATRIX_FORMS = [(1, False), (2, False), (4, False), (1, True), (2, True), (4, True)]


def ldmatrix_reference(image: torch.Tensor, offsets: torch.Tensor, form: int) -> torch.Tensor:
    """PTX ISA, ldmatrix: row r of matrix m is 8 halves at the address of lane 8m + r; lane l gets,
    of matrix m, (row l/4, cols 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), 2(l%4)+1, col l/4)."""
    num, trans = LDMATRIX_FORMS[form]
    halves = [v & 0xFFFF for v in image.view(torch.int16).tolist()]
    offs = offsets.tolist()
    out = [0] * 128
    for lane in range(32):
        for m in range(num):
            def elem(r, c):
                return halves[offs[8 * m + r] // 2 + c]
            if trans:
                lo, hi = elem(2 * (lane % 4), lane // 4), elem(2 * (lane % 4) + 1, lane // 4)
            else:
                lo, hi = elem(lane // 4, 2 * (lane % 4)), elem(lane // 4, 2 * (lane % 4) + 1)
            out[lane * 4 + m] = lo | hi << 16
    return _i32(out).view(32, 4)


def stmatrix_reference(regs: torch.Tensor, offsets: torch.Tensor, form: int) -> torch.Tensor:
    num, trans = LDMATRIX_FORMS[form]
    halves = [0] * 1024
    r32 = _u32(regs)
    offs = offsets.tolist()
    for lane in range(32):
        for m in range(num):
            v = r32[lane * 4 + m]
            for part in range(2):
                r, c = (2 * (lane % 4) + part, lane // 4) if trans else (lane // 4, 2 * (lane % 4) + part)
                halves[offs[8 * m + r] // 2 + c] = (v >> (16 * part)) & 0xFFFF
    return torch.tensor([h - 65536 if h >= 32768 else h for h in halves], dtype=torch.int16).view(torch.int32)


def matrix_cases() -> dict[str, Case]:
    out = {}
    for form, (num, trans) in enumerate(LDMATRIX_FORMS):
        g = _gen(300 + form)
        image = torch.randint(-(2**31), 2**31, (512,), generator=g, dtype=torch.int64).to(torch.int32)
        offsets = (torch.randperm(128, generator=g)[:32] * 16).to(torch.int32)
        regs = torch.randint(-(2**31), 2**31, (32, 4), generator=g, dtype=torch.int64).to(torch.int32)
        tag = f"x{num}{'_trans' if trans else ''}"
        out[f"ldmatrix_{tag}"] = Case("ptx_ops.cu", "ldmatrix_raw", [image, offsets, form])
        out[f"stmatrix_{tag}"] = Case("ptx_ops.cu", "stmatrix_raw", [regs, offsets, form])
    return out


# ---------------------------------------------------------------------------------------------
# per-thread instructions (alu_raw's op numbers)
def _f(bits: int) -> float:
    return torch.tensor([bits - (1 << 32) if bits >= 1 << 31 else bits], dtype=torch.int32).view(torch.float32).item()


def _fb(x: float) -> int:
    """A float's bits; a NaN result is the GPU's canonical NaN, whatever NaN came in."""
    if math.isnan(x):
        return 0x7FFFFFFF
    return torch.tensor([x], dtype=torch.float32).view(torch.int32).item() & 0xFFFFFFFF


def _round16(x: float, bf: bool, relu: bool = False) -> int:
    if math.isnan(x):
        return 0x7FFF  # the canonical NaN
    if relu and math.copysign(1.0, x) < 0:  # -0 too: the H100 gives +0
        x = 0.0
    t = torch.tensor([x], dtype=torch.float32).to(torch.bfloat16 if bf else torch.float16)
    return t.view(torch.int16).item() & 0xFFFF


def _tf32(bits: int) -> int:
    if (bits >> 23) & 0xFF == 0xFF:
        return bits  # infinities, and a NaN as it came (the H100 returns 0x7fc00000 unchanged)
    return (bits + 0x1000) & ~0x1FFF & 0xFFFFFFFF


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _f2i(x: float, mode: str, lo: int, hi: int) -> int:
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return hi if x > 0 else lo
    v = math.trunc(x) if mode == "rz" else round(x)  # round() is to nearest even
    return max(lo, min(hi, v))


def _prmt(a: int, b: int, c: int, mode: str) -> int:
    bytes_ = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    s = c & 3
    sel = {"f4e": [(s + i) % 8 for i in range(4)], "b4e": [(s - i) % 8 for i in range(4)], "rc8": [s] * 4,
           "ecl": [max(s, i) for i in range(4)], "ecr": [min(s, i) for i in range(4)],
           "rc16": [2 * (c & 1), 2 * (c & 1) + 1] * 2}.get(mode)
    out = 0
    for i in range(4):
        if sel is None:
            nib = (c >> (4 * i)) & 0xF
            v = bytes_[nib & 7]
            if nib & 8:
                v = 0xFF if v & 0x80 else 0
        else:
            v = bytes_[sel[i]]
        out |= v << (8 * i)
    return out


def _lop3(a: int, b: int, c: int, lut: int) -> int:
    out = 0
    for bit in range(32):
        x, y, z = (a >> bit) & 1, (b >> bit) & 1, (c >> bit) & 1
        out |= ((lut >> (x * 4 + y * 2 + z)) & 1) << bit
    return out


def _bfe(a: int, pos: int, ln: int, signed: bool) -> int:
    if ln == 0:
        return 0
    sbit = (a >> min(pos + ln - 1, 31)) & 1 if signed else 0
    out = 0
    for i in range(32):
        bit = ((a >> (pos + i)) & 1 if pos + i < 32 else sbit) if i < ln else sbit
        out |= bit << i
    return out


def _bfi(f: int, b: int, pos: int, ln: int) -> int:
    out = b
    for i in range(ln):
        if pos + i >= 32:
            break
        out = (out & ~(1 << (pos + i))) | (((f >> i) & 1) << (pos + i))
    return out & 0xFFFFFFFF


def _shf(a: int, b: int, c: int, left: bool, wrap: bool) -> int:
    n = c & 31 if wrap else min(c, 32)
    v = (b << 32) | a
    return ((v << n) >> 32) & 0xFFFFFFFF if left else (v >> n) & 0xFFFFFFFF


def _fop(fn):
    def op(a, b, c):
        try:
            r = fn(_f(a), _f(b), _f(c))
        except (ValueError, ZeroDivisionError, OverflowError):
            r = math.nan
        return _fb(r)
    return op



def _f32(x: float) -> float:
    return torch.tensor([x], dtype=torch.float32).item()


def _ftz(x: float) -> float:
    return math.copysign(0.0, x) if x != 0 and abs(x) < 1.1754943508222875e-38 else x


def _fadd(x, y):
    return (torch.tensor([x], dtype=torch.float32) + torch.tensor([y], dtype=torch.float32)).item()


# op number -> (name, reference(a, b, c) -> d, exact, inputs): None for approximate instructions
ALU_OPS = {
    0: ("cvt.rn.bf16x2.f32", lambda a, b, c: _round16(_f(a), True) << 16 | _round16(_f(b), True), True, "float"),
    1: ("cvt.rn.f16x2.f32", lambda a, b, c: _round16(_f(a), False) << 16 | _round16(_f(b), False), True, "float"),
    2: ("cvt.rna.tf32.f32", lambda a, b, c: _tf32(a), True, "float"),
    3: ("cvt.rn.bf16.f32", lambda a, b, c: _round16(_f(a), True), True, "float"),
    4: ("cvt.rn.f16.f32", lambda a, b, c: _round16(_f(a), False), True, "float"),
    5: ("cvt.f32.bf16", lambda a, b, c: _fb(_decode("bf16", a & 0xFFFF)) if _decode("bf16", a & 0xFFFF) == _decode("bf16", a & 0xFFFF) else 0x7FFFFFFF, True, "half"),
    6: ("cvt.f32.f16", lambda a, b, c: _fb(_decode("f16", a & 0xFFFF)) if _decode("f16", a & 0xFFFF) == _decode("f16", a & 0xFFFF) else 0x7FFFFFFF, True, "half"),
    7: ("cvt.rzi.s32.f32", lambda a, b, c: _f2i(_f(a), "rz", -(2**31), 2**31 - 1) & 0xFFFFFFFF, True, "float"),
    8: ("cvt.rni.s32.f32", lambda a, b, c: _f2i(_f(a), "rn", -(2**31), 2**31 - 1) & 0xFFFFFFFF, True, "float"),
    9: ("cvt.rn.f32.s32", lambda a, b, c: _fb(float(_s32(a))), True, "int"),
    10: ("cvt.rn.relu.bf16x2.f32", lambda a, b, c: _round16(_f(a), True, True) << 16 | _round16(_f(b), True, True), True, "float"),
    11: ("cvt.rzi.u32.f32", lambda a, b, c: _f2i(_f(a), "rz", 0, 2**32 - 1), True, "float"),
    12: ("prmt.b32", lambda a, b, c: _prmt(a, b, c, ""), True, "int"),
    13: ("prmt.b32.f4e", lambda a, b, c: _prmt(a, b, c, "f4e"), True, "int"),
    14: ("prmt.b32.b4e", lambda a, b, c: _prmt(a, b, c, "b4e"), True, "int"),
    15: ("prmt.b32.rc8", lambda a, b, c: _prmt(a, b, c, "rc8"), True, "int"),
    16: ("prmt.b32.ecl", lambda a, b, c: _prmt(a, b, c, "ecl"), True, "int"),
    17: ("prmt.b32.ecr", lambda a, b, c: _prmt(a, b, c, "ecr"), True, "int"),
    18: ("prmt.b32.rc16", lambda a, b, c: _prmt(a, b, c, "rc16"), True, "int"),
    19: ("lop3.b32 0x96", lambda a, b, c: _lop3(a, b, c, 0x96), True, "int"),
    20: ("lop3.b32 0xE8", lambda a, b, c: _lop3(a, b, c, 0xE8), True, "int"),
    21: ("lop3.b32 0xCA", lambda a, b, c: _lop3(a, b, c, 0xCA), True, "int"),
    22: ("lop3.b32 0x01", lambda a, b, c: _lop3(a, b, c, 0x01), True, "int"),
    23: ("ex2.approx.f32", _fop(lambda x, y, z: math.inf if x >= 128 else 2.0 ** x), False, "small"),
    24: ("ex2.approx.ftz.f32", _fop(lambda x, y, z: math.inf if x >= 128 else _ftz(_f32(2.0 ** _ftz(x)))), False, "small"),
    25: ("shf.l.wrap.b32", lambda a, b, c: _shf(a, b, c, True, True), True, "int"),
    26: ("shf.r.clamp.b32", lambda a, b, c: _shf(a, b, c, False, False), True, "shift"),
    27: ("bfe.u32", lambda a, b, c: _bfe(a, b & 0xFF, c & 0xFF, False), True, "field"),
    28: ("bfe.s32", lambda a, b, c: _bfe(a, b & 0xFF, c & 0xFF, True), True, "field"),
    29: ("bfi.b32", lambda a, b, c: _bfi(a, b, c & 0xFF, (c >> 8) & 0xFF), True, "field"),
    30: ("mul.hi.s32", lambda a, b, c: ((_s32(a) * _s32(b)) >> 32) & 0xFFFFFFFF, True, "int"),
    31: ("mad.lo.u32", lambda a, b, c: (a * b + c) & 0xFFFFFFFF, True, "int"),
    32: ("tanh.approx.f32", _fop(lambda x, y, z: math.tanh(x)), False, "small"),
    33: ("rcp.rn.f32", _fop(lambda x, y, z: _f32(1.0 / x) if x != 0 else math.copysign(math.inf, x)), True, "float"),
    34: ("rsqrt.approx.f32", _fop(lambda x, y, z: math.copysign(math.inf, x) if x == 0 else 1.0 / math.sqrt(x)), False,
         "positive"),
    35: ("lg2.approx.f32", _fop(lambda x, y, z: -math.inf if x == 0 else math.log2(x)), False, "positive"),
    36: ("add.sat.s32", lambda a, b, c: max(-(2**31), min(2**31 - 1, _s32(a) + _s32(b))) & 0xFFFFFFFF, True, "int"),
    37: ("min.u32", lambda a, b, c: min(a, b), True, "int"),
    38: ("max.s32", lambda a, b, c: max(_s32(a), _s32(b)) & 0xFFFFFFFF, True, "int"),
    39: ("popc.b32", lambda a, b, c: bin(a).count("1"), True, "int"),
    40: ("clz.b32", lambda a, b, c: 32 - a.bit_length(), True, "int"),
    41: ("brev.b32", lambda a, b, c: int(f"{a:032b}"[::-1], 2), True, "int"),
    42: ("setp.lt.f32 + selp", lambda a, b, c: int(_f(a) < _f(b)), True, "float"),
    43: ("mul.wide.u32 (high word)", lambda a, b, c: (a * b) >> 32, True, "int"),
    44: ("fma.rn.f32", lambda a, b, c: _fb(_fma32(_f(a), _f(b), _f(c))), True, "float"),
    45: ("sqrt.rn.f32", _fop(lambda x, y, z: _f32(math.sqrt(x)) if x >= 0 else math.nan), True, "positive"),
    46: ("div.rn.f32", lambda a, b, c: _fb((torch.tensor([_f(a)]) / torch.tensor([_f(b)])).item()), True, "float"),
    47: ("mov.b64/b32 unpack and pack", lambda a, b, c: ((b >> 16) & 0xFFFF) | ((a & 0xFFFF) << 16), True, "int"),
    48: ("shl.b32", lambda a, b, c: (a << (b & 63)) & 0xFFFFFFFF if (b & 63) < 32 else 0, True, "int"),
    49: ("shr.s32", lambda a, b, c: (_s32(a) >> min(b & 63, 31)) & 0xFFFFFFFF, True, "int"),
    50: ("sub.s32", lambda a, b, c: (a - b) & 0xFFFFFFFF, True, "int"),
    51: ("mul.rn.f32", lambda a, b, c: _fb((torch.tensor([_f(a)]) * torch.tensor([_f(b)])).item()), True, "float"),
    52: ("add.rn.ftz.f32", lambda a, b, c: _fb(_ftz(_fadd(_ftz(_f(a)), _ftz(_f(b))))), True, "float"),
    53: ("max.f32", lambda a, b, c: _fb(_fmax(_f(a), _f(b))), True, "float"),
}


def _fma32(x: float, y: float, z: float) -> float:
    """x * y + z rounded once (through float64: a double rounding only in cases too rare to draw)."""
    from fractions import Fraction

    if any(math.isnan(v) or math.isinf(v) for v in (x, y, z)):
        return (torch.tensor([x], dtype=torch.float64) * y + z).float().item()
    return torch.tensor([float(Fraction(x) * Fraction(y) + Fraction(z))], dtype=torch.float64).float().item()


def _fmax(x: float, y: float) -> float:
    if math.isnan(x):
        return y
    if math.isnan(y):
        return x
    if x == y == 0:
        return 0.0 if not (math.copysign(1, x) < 0 and math.copysign(1, y) < 0) else -0.0
    return max(x, y)


def _alu_inputs(kind: str, seed: int, n: int = 256) -> list[torch.Tensor]:
    g = _gen(seed)
    rnd = torch.randint(-(2**31), 2**31, (3, n), generator=g, dtype=torch.int64).to(torch.int32)
    if kind in ("float", "small", "positive"):
        scale = {"float": 1e3, "small": 10.0, "positive": 1e3}[kind]
        x = torch.randn(3, n, generator=g) * scale
        if kind == "positive":
            x = x.abs()
        x[:, :16] = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 65504.0, 65520.0, 1e-40, -1e-40,
                                  3.4e38, float("inf"), float("-inf"), float("nan")])
        x[0, 16:32] = torch.tensor([1.00390625, 1.0048828125, 1 + 2**-9, 1 + 3 * 2**-9, 1 + 2**-12, 1 + 3 * 2**-12,
                                    2**-14, 2**-24, 2**-25, 3 * 2**-26, 1e-8, 6e4, 7e4, 1e10, -1e10, 2**31])
        return [_bits(x[0]), _bits(x[1]), _bits(x[2])]
    if kind == "half":
        h = torch.randn(n, generator=g).half().view(torch.int16).to(torch.int32) & 0xFFFF
        h[:4] = torch.tensor([0x7C00, 0xFC00, 0x7E00, 0x0001])
        return [h, rnd[1], rnd[2]]
    if kind == "shift":
        return [rnd[0], rnd[1], (rnd[2] & 63)]
    if kind == "field":
        return [rnd[0], rnd[1] & 0x3F, (rnd[2] & 0x3F) | ((rnd[2] >> 8) & 0x3F) << 8]
    return [rnd[0], rnd[1], rnd[2]]


def alu_reference(op: int, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    name, fn, _, _ = ALU_OPS[op]
    if op in (5, 6):  # a bf16 NaN keeps its bits (a shift); an f16 NaN becomes the canonical 0x7fffffff (H100)
        out = []
        for x in _u32(a):
            v = _decode("bf16" if op == 5 else "f16", x & 0xFFFF)
            out.append(_fb(v) if v == v else ((x & 0xFFFF) << 16 if op == 5 else 0x7FFFFFFF))
        return _i32(out)
    return _i32([fn(x, y, z) & 0xFFFFFFFF for x, y, z in zip(_u32(a), _u32(b), _u32(c))])


def alu_cases() -> dict[str, Case]:
    out = {}
    for op, (name, _, exact, kind) in ALU_OPS.items():
        a, b, c = _alu_inputs(kind, 400 + op)
        rtol = 1e-3 if name.startswith("tanh") else 2e-6  # tanh.approx: relative error up to 2^-11
        atol = 2.0 ** -22 if name.startswith("lg2") else 1e-30  # lg2.approx: absolute error 2^-22 near 1 (H100)
        out[f"alu_{op:02d}_{name.split(' ')[0]}"] = Case("ptx_ops.cu", "alu_raw", [a, b, c, op], exact=exact,
                                                        rtol=rtol, atol=atol, notes={"name": name})
    return out


# ---------------------------------------------------------------------------------------------
# shfl.sync, the special registers, cp.async
SHFL_MODES = ["up", "down", "bfly", "idx"]


def shfl_reference(v: torch.Tensor, b: torch.Tensor, c: int, mask: int, mode: int) -> list[torch.Tensor]:
    """PTX ISA, shfl.sync: the source lane j and the predicate from b, the clamp and segment mask in c."""
    vals, bs = _u32(v), _u32(b)
    seg, clamp = (c >> 8) & 0x1F, c & 0x1F
    d, p = [0] * 32, [0] * 32
    for lane in range(32):
        if not mask >> lane & 1:
            continue
        maxl = (lane & seg) | (clamp & ~seg & 0x1F)
        minl = lane & seg
        bv = bs[lane]
        m = SHFL_MODES[mode]
        if m == "up":
            j, ok = lane - bv, lane - bv >= maxl
        elif m == "down":
            j, ok = lane + bv, lane + bv <= maxl
        elif m == "bfly":
            j, ok = lane ^ bv, (lane ^ bv) <= maxl
        else:
            j = minl | (bv & ~seg & 0x1F)
            ok = j <= maxl
        if not ok:
            j = lane
        d[lane], p[lane] = vals[j], int(ok)
    return [_i32(d), _i32(p)]


def shfl_cases() -> dict[str, Case]:
    out = {}
    for mode, name in enumerate(SHFL_MODES):
        for width in (32, 16, 8):
            g = _gen(500 + mode * 10 + width)
            v = torch.randint(-(2**31), 2**31, (32,), generator=g, dtype=torch.int64).to(torch.int32)
            b = torch.randint(0, 32 if name in ("idx", "bfly") else width, (32,), generator=g).to(torch.int32)
            if name == "bfly":
                b[:] = int(torch.randint(0, width, (1,), generator=g))
            c = ((32 - width) << 8) | (0 if name == "up" else 0x1F)
            out[f"shfl_{name}_width{width}"] = Case("ptx_ops.cu", "shfl_raw", [v, b, c, 0xFFFFFFFF, mode])
    return out


def specials_reference() -> torch.Tensor:
    rows = []
    for by in range(3):
        for bx in range(2):
            for ty in range(2):
                for tx in range(40):
                    lane = (ty * 40 + tx) % 32
                    rows.append([lane, tx, ty, 40, 2, bx, by, 2, 3, (1 << lane) - 1, (~((1 << lane) - 1)) & 0xFFFFFFFF])
    return torch.tensor([[v - (1 << 32) if v >= 1 << 31 else v for v in r] for r in rows], dtype=torch.int32)


def cp_async_reference(src: torch.Tensor, size: int, src_size: int) -> torch.Tensor:
    out = torch.zeros_like(src).view(64, 16)
    s = src.view(64, 16)
    n = min(src_size, size)
    out[:, :n] = s[:, :n]
    return out.view(-1)


def misc_cases() -> dict[str, Case]:
    out = {"specials": Case("ptx_ops.cu", "specials_raw", [torch.zeros(1, dtype=torch.int32)])}
    g = _gen(600)
    src = torch.randint(1, 256, (1024,), generator=g, dtype=torch.int64).to(torch.uint8)
    for size, src_size, cg in [(4, 4, False), (8, 8, False), (16, 16, False), (16, 16, True), (16, 5, True),
                               (8, 3, False), (16, 0, False), (4, 1, False)]:
        out[f"cp_async_{'cg' if cg else 'ca'}_{size}_{src_size}"] = Case("ptx_ops.cu", "cp_async_raw",
                                                                         [src, size, src_size, cg])
    return out


# ---------------------------------------------------------------------------------------------
# wgmma (ptx_hopper.cu's wgmma_raw): a 32 KB shared image, 1024-byte aligned on both sides
SWIZZLE_BYTES = {0: 16, 1: 128, 2: 64, 3: 32}  # descriptor layout type -> swizzle width (0: none)
SWIZZLE_BITS = {0: 0, 1: 3, 2: 2, 3: 1}


def wg_desc(start: int, lbo: int, sbo: int, layout: int) -> int:
    """PTX ISA, 'Matrix Descriptor Format': start, leading and stride byte offsets in 16-byte units
    (14 bits each, at bits 0, 16, 32), the swizzle at bits 62-63. As a signed int64 for torch."""
    d = ((start >> 4) & 0x3FFF) | ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | layout << 62
    return d - (1 << 64) if d >= 1 << 63 else d


def wg_address(desc: int, mn_major: bool, i: int, k: int, size: int = 2) -> int:
    """The byte address of element (i along M or N, k) of an operand of `size` bytes (2, or 1 for the
    8-bit floats, K-major only): the canonical layouts (in 16-byte units T: K-major
    ((8,m),(T,2)):((1T or wT, SBO),(1, LBO or T)), MN-major ((T,w/16,m),(8,k)):((1,T,LBO),(wT,SBO)),
    none: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))), then the swizzle: bits 4.. of the address XOR bits
    7.. (1, 2, 3 of them for 32, 64, 128 bytes). A 16-byte unit holds 16 / size elements along K."""
    desc &= (1 << 64) - 1
    start, lbo, sbo = (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
    layout = desc >> 62
    w = SWIZZLE_BYTES[layout]
    if not mn_major:
        per = 16 // size
        if layout == 0:
            off = (i % 8) * 16 + (i // 8) * sbo + (k // per) * lbo + (k % per) * size
        else:
            off = (i % 8) * w + (i // 8) * sbo + k * size
    elif layout == 0:
        off = (i % 8) * 2 + (i // 8) * sbo + (k % 8) * 16 + (k // 8) * lbo
    else:
        off = (i % (w // 2)) * 2 + (i // (w // 2)) * lbo + (k % 8) * w + (k // 8) * sbo
    a = start + off
    bits = SWIZZLE_BITS[layout]
    return a ^ (((a >> 7) & ((1 << bits) - 1)) << 4)


# kind -> accumulator, A and B types; 3: A in registers; 4-6: the 8-bit floats, K = 32
WG_KINDS = {0: ("f32", "bf16", "bf16"), 1: ("f32", "f16", "f16"), 2: ("f16", "f16", "f16"), 3: ("f32", "bf16", "bf16"),
            4: ("f32", "e4m3", "e4m3"), 5: ("f32", "e5m2", "e5m2"), 6: ("f32", "e4m3", "e5m2")}
FP8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
WG_FLAGS = {0: (1, 1, 0, 0), 1: (1, 1, 1, 0), 2: (1, 1, 0, 1), 3: (1, 1, 1, 1), 4: (-1, 1, 0, 0), 8: (1, -1, 0, 0),
            12: (-1, -1, 1, 1)}  # flags -> scale-a, scale-b, trans-a, trans-b


def wgmma_reference(image, adesc, bdesc, a_regs, c, n, kind, flags, scale_d) -> torch.Tensor:
    """D (64 x n) = scale-a A x scale-b B + (scale-d ? C : 0), registers as the PTX ISA lays them out:
    warp w holds rows 16w..16w+15; f32 register r of lane l is (row l/4 + 8 ((r/2) % 2), column
    8 (r/4) + 2 (l%4) + r%2); an f16 register holds two consecutive such elements."""
    dt, at, bt = WG_KINDS[kind]
    sa, sb, ta, tb = WG_FLAGS[flags]
    halves = [v & 0xFFFF for v in image.view(torch.int16).tolist()]
    octets = image.view(torch.uint8).tolist()
    size = 1 if at in FP8 else 2
    K = 32 // size

    def elem(t, addr):
        return _decode(t, octets[addr]) if t in FP8 else _decode(t, halves[addr // 2])

    A = [[0.0] * K for _ in range(64)]
    if kind == 3:
        au = _u32(a_regs)
        for t in range(128):
            w, lane = t // 32, t % 32
            for r in range(4):
                for p in range(2):
                    i, j = mma_a_place(16, "bf16", lane, r, p)
                    A[16 * w + i][j] = _decode("bf16", (au[t * 4 + r] >> (16 * p)) & 0xFFFF)
    else:
        for m in range(64):
            for k in range(K):
                A[m][k] = elem(at, wg_address(adesc, ta == 1, m, k, size))
    B = [[elem(bt, wg_address(bdesc, tb == 1, j, k, size)) for j in range(n)] for k in range(K)]
    nd = n // 2 if dt == "f32" else n // 4
    cu = _u32(c)

    def place(lane, idx):
        return lane // 4 + 8 * ((idx // 2) % 2), 8 * (idx // 4) + 2 * (lane % 4) + idx % 2

    out = [0] * (128 * nd)
    for t in range(128):
        w, lane = t // 32, t % 32
        for r in range(nd):
            parts = [r] if dt == "f32" else [2 * r, 2 * r + 1]
            word = 0
            for p, idx in enumerate(parts):
                i, j = place(lane, idx)
                cv = _decode("f32", cu[t * nd + r]) if dt == "f32" else _decode("f16", (cu[t * nd + r] >> (16 * p)) & 0xFFFF)
                v = sum(sa * A[16 * w + i][k] * sb * B[k][j] for k in range(K)) + (cv if scale_d else 0.0)
                word |= _encode(dt, v) << (16 * p)
            out[t * nd + r] = word
    return _i32(out).view(128, nd)


def _wg_case(seed: int, n: int, kind: int, flags: int, adesc: int, bdesc: int, scale_d: int = 1, exact: bool = True,
             gpu_atol: float | None = None):
    g = _gen(seed)
    dt, at, bt = WG_KINDS[kind]
    tdt = torch.bfloat16 if at in ("bf16", *FP8) else torch.float16  # (the 8-bit kinds' A registers go unread)
    if at in FP8:  # 32 KB of bytes; A's part and B's part each read as their own type
        vals = torch.randint(-3, 4, (32768,), generator=g).float() if exact else torch.randn(32768, generator=g)
        image = vals.to(FP8[at]).view(torch.uint8)
        image[16384:] = vals[16384:].to(FP8[bt]).view(torch.uint8)
        image = image.view(torch.int32)
    else:
        vals = torch.randint(-3, 4, (16384,), generator=g).float() if exact else torch.randn(16384, generator=g)
        image = vals.to(tdt).view(torch.int32)
    a_regs = torch.randint(-3, 4, (128 * 8,), generator=g).float().to(tdt).view(torch.int32).view(128, 4)
    nd = n // 2 if dt == "f32" else n // 4
    cv = torch.randint(-8, 9, (128 * nd * (1 if dt == "f32" else 2),), generator=g).float()
    c = _bits(cv).view(128, nd) if dt == "f32" else cv.half().view(torch.int32).view(128, nd)
    return Case("ptx_hopper.cu", "wgmma_raw", [image, adesc, bdesc, a_regs, c, n, kind, flags, scale_d], exact=exact,
                rtol=1e-5, atol=1e-5, notes={"gpu_atol": gpu_atol} if gpu_atol else {})


def wgmma_cases() -> dict[str, Case]:
    K128 = lambda start, sbo=1024: wg_desc(start, 16, sbo, 1)  # noqa: E731 (LBO unused: 1 unit)
    out = {
        "wgmma_kmajor_none": _wg_case(700, 64, 0, 0, wg_desc(0, 128, 256, 0), wg_desc(8192, 128, 256, 0)),
        "wgmma_kmajor_none_wide_strides": _wg_case(701, 64, 0, 0, wg_desc(0, 2048, 512, 0), wg_desc(12288, 256, 1024, 0)),
        "wgmma_kmajor_128B": _wg_case(702, 64, 0, 0, K128(0), K128(8192)),
        "wgmma_kmajor_128B_k_step": _wg_case(703, 64, 0, 0, K128(32), K128(8192 + 64)),
        "wgmma_kmajor_64B": _wg_case(704, 64, 0, 0, wg_desc(0, 16, 512, 2), wg_desc(8192, 16, 512, 2)),
        "wgmma_kmajor_32B": _wg_case(705, 64, 0, 0, wg_desc(0, 16, 256, 3), wg_desc(8192, 16, 256, 3)),
        "wgmma_b_mnmajor_none": _wg_case(706, 64, 0, 2, K128(0), wg_desc(8192, 1024, 128, 0)),
        "wgmma_b_mnmajor_128B": _wg_case(707, 128, 0, 2, K128(0), wg_desc(8192, 2048, 1024, 1)),
        "wgmma_b_mnmajor_64B": _wg_case(708, 64, 0, 2, K128(0), wg_desc(8192, 1024, 512, 2)),
        "wgmma_b_mnmajor_32B": _wg_case(709, 64, 0, 2, K128(0), wg_desc(8192, 512, 256, 3)),
        "wgmma_ab_mnmajor_128B": _wg_case(710, 64, 0, 3, wg_desc(0, 2048, 1024, 1), wg_desc(8192, 2048, 1024, 1)),
        "wgmma_a_mnmajor_none": _wg_case(711, 64, 0, 1, wg_desc(0, 1024, 128, 0), K128(8192)),
        "wgmma_negated_a": _wg_case(712, 64, 0, 4, K128(0), K128(8192)),
        "wgmma_negated_b": _wg_case(713, 64, 0, 8, K128(0), K128(8192)),
        "wgmma_negated_both_transposed": _wg_case(714, 64, 0, 12, wg_desc(0, 2048, 1024, 1), wg_desc(8192, 2048, 1024, 1)),
        "wgmma_scale_d_0": _wg_case(715, 64, 0, 0, K128(0), K128(8192), scale_d=0),
        "wgmma_n8": _wg_case(716, 8, 0, 0, K128(0), K128(8192)),
        "wgmma_n16": _wg_case(717, 16, 0, 0, K128(0), wg_desc(8192, 128, 256, 0)),
        "wgmma_n128": _wg_case(718, 128, 0, 0, K128(0), K128(8192)),
        "wgmma_n256": _wg_case(719, 256, 0, 0, K128(0), K128(0)),
        "wgmma_f16_inputs": _wg_case(720, 64, 1, 0, K128(0), K128(8192)),
        "wgmma_f16_accumulators": _wg_case(721, 64, 2, 0, K128(0), K128(8192)),
        "wgmma_a_in_registers": _wg_case(722, 64, 3, 0, 0, K128(8192)),
        "wgmma_a_in_registers_b_mnmajor": _wg_case(723, 64, 3, 2, 0, wg_desc(8192, 2048, 1024, 1)),
        "wgmma_random_floats": _wg_case(724, 128, 0, 0, K128(0), K128(8192), exact=False),
        # the 8-bit floats (B from byte 16384 on: the part of the image written in B's type)
        "wgmma_e4m3_kmajor_128B": _wg_case(730, 64, 4, 0, K128(0), K128(16384)),
        "wgmma_e4m3_kmajor_128B_k_step": _wg_case(731, 64, 4, 0, K128(32), K128(16384 + 96)),
        "wgmma_e4m3_kmajor_none": _wg_case(732, 64, 4, 0, wg_desc(0, 128, 256, 0), wg_desc(16384, 128, 256, 0)),
        "wgmma_e4m3_kmajor_64B": _wg_case(733, 64, 4, 0, wg_desc(0, 16, 512, 2), wg_desc(16384, 16, 512, 2)),
        "wgmma_e5m2_kmajor_128B": _wg_case(734, 64, 5, 0, K128(0), K128(16384)),
        "wgmma_e4m3_e5m2_kmajor_32B": _wg_case(735, 64, 6, 0, wg_desc(0, 16, 256, 3), wg_desc(16384, 16, 256, 3)),
        "wgmma_e4m3_negated_a": _wg_case(736, 64, 4, 4, K128(0), K128(16384)),
        "wgmma_e5m2_negated_b": _wg_case(739, 64, 5, 8, K128(0), K128(16384)),
        "wgmma_e4m3_scale_d_0": _wg_case(737, 64, 4, 0, K128(0), K128(16384), scale_d=0),
        # The H100 adds the 32 products of an 8-bit wgmma with fewer bits than fp32 (recorded: up to 3e-3 off sums
        # of about 10, 0.2 relative on small ones); the simulator and the PTX ISA's answer sum exactly in fp32
        "wgmma_e4m3_random_floats": _wg_case(738, 64, 4, 0, K128(0), K128(16384), exact=False, gpu_atol=5e-3),
    }
    return out


# ---------------------------------------------------------------------------------------------
# TMA (ptx_hopper.cu's tma_load_raw, tma_store_raw, tma_encode_status) and cp.async.bulk
DTYPES = {0: (torch.uint8, 1), 7: (torch.float32, 4), 9: (torch.bfloat16, 2), 6: (torch.float16, 2)}


def tma_params(dtype: int, dims, strides, box, estride=None, swizzle: int = 0, oob: int = 0,
               interleave: int = 0) -> torch.Tensor:
    """rank, dtype, swizzle, oob fill, dims[5], strides[4] (bytes, dims 1..), box[5], elementStrides[5], and
    for an interleaved map (1: 16B, 2: 32B) the interleave last (the other maps' 23 values, and so their
    recorded answers, stay as they were)."""
    rank = len(dims)
    pad = lambda v, n, fill: list(v) + [fill] * (n - len(v))  # noqa: E731
    estride = estride or [1] * rank
    return torch.tensor([rank, dtype, swizzle, oob] + pad(dims, 5, 1) + pad(strides, 4, 0) + pad(box, 5, 1) +
                        pad(estride, 5, 1) + ([interleave] if interleave else []), dtype=torch.long)


def _slice(p: torch.Tensor) -> int:
    """An interleaved map's slice (16 or 32 bytes), or 0 for a plain map."""
    v = p.tolist()
    return {1: 16, 2: 32}.get(v[23], 0) if len(v) == 24 else 0


def _swizzled(so: int, swizzle: int) -> int:
    return so ^ (((so >> 7) & ((1 << swizzle) - 1)) << 4)


def _tma_walk(p: torch.Tensor, coords, store: bool = False):
    """For each element of the box in shared-memory order: (shared byte offset after the swizzle,
    global byte offset or None outside the tensor). Dim 0 is fastest; along dim d the box takes
    ceil(box / elementStride) elements, elementStride apart (dim 0's stride is always 1). Each row (a
    run along dim 0) starts a row's bytes after the last, or the swizzle's span after it when the row is
    narrower (the H100's layout). A store writes a row's last 16 bytes whole: elements past the tensor's
    end in dim 0, up to the next 16 bytes, are written too (the H100 does)."""
    v = p.tolist()
    rank, dtype, swizzle = v[0], v[1], v[2]
    dims, strides, est = v[4:4 + rank], v[9:9 + rank - 1], [1] + v[19:18 + rank]
    es = DTYPES[dtype][1]
    gstride = [es] + strides
    n, pitch = _box_rows(p)
    ends = list(dims)
    if store:
        ends[0] = (dims[0] * es + 15) // 16 * 16 // es
    total = math.prod(n)
    idx = [0] * rank
    for e in range(total):
        so = _swizzled(e // n[0] * pitch + idx[0] * es, swizzle)
        go = 0
        for d in range(rank):
            cd = coords[d] + idx[d] * est[d]
            if cd < 0 or cd >= ends[d]:
                go = None
                break
            go += cd * gstride[d]
        yield so, go, es
        for d in range(rank):
            idx[d] += 1
            if idx[d] < n[d]:
                break
            idx[d] = 0


def _interleaved_lines(p: torch.Tensor) -> tuple[int, int, list[int], list[int]]:
    """An interleaved box's slices per line, the line's bytes, the walked dimensions and their steps (see
    _interleaved_walk)."""
    v = p.tolist()
    rank, box, est = v[0], v[13:13 + v[0]], v[18:18 + v[0]]
    n0 = (box[0] + est[0] - 1) // est[0]
    walked = [d for d in range(1, rank) if d != rank - 2]
    return n0, n0 * _slice(p), walked, [(box[d] + est[d] - 1) // est[d] for d in walked]


def _interleaved_walk(p: torch.Tensor, coords):
    """An interleaved map (CU_TENSOR_MAP_INTERLEAVE_16B/32B) as the H100 copies it (its recorded answers:
    tests/ptx_vectors/ptx_tma_interleave.pt), for each 16 bytes of the box in shared-memory order: (shared byte
    offset after the swizzle, global byte offset or None outside the tensor).

    Dimension 0 counts whole slices (16 or 32 bytes), whatever the data type: its coordinate, boxDim[0] and
    globalDim[0] are slices, and a line of the box is boxDim[0] slices back to back in global memory from byte
    coordinate * slice of its row, elementStrides[0] slices apart (the step is recorded, the count with a step
    above 1 is not). Dimension rank - 2 is not walked: its coordinate places the box, its box size is not used
    (recorded for ranks 3 and 4). The other dimensions are walked as in a plain box, and a line with a coordinate
    outside the tensor in one of them is outside whole. In shared memory the lines lie back to back in the
    order of the walk, the map's swizzle applied."""
    v = p.tolist()
    rank, swizzle, dims, strides = v[0], v[2], v[4:4 + v[0]], v[9:8 + v[0]]
    sl = _slice(p)
    n0, line, walked, counts = _interleaved_lines(p)
    est = v[18:18 + rank]
    for i in range(math.prod(counts)):
        co, rest = list(coords[:rank]), i
        for d, c in zip(walked, counts):
            co[d] += rest % c * est[d]
            rest //= c
        inside = all(0 <= co[d] < dims[d] for d in range(1, rank))
        go = coords[0] * sl + sum(co[d] * strides[d - 1] for d in range(1, rank))
        for j in range(n0):
            for b in range(0, sl, 16):
                yield _swizzled(i * line + j * sl + b, swizzle), go + j * est[0] * sl + b if inside else None


def _box_rows(p: torch.Tensor) -> tuple[list[int], int]:
    """A box's elements along each dim (ceil(box / elementStride); dim 0's stride is always 1) and the
    shared-memory bytes from one row's start to the next (see _tma_walk)."""
    v = p.tolist()
    rank, dtype, swizzle = v[0], v[1], v[2]
    box, est = v[13:13 + rank], [1] + v[19:18 + rank]
    n = [(box[d] + est[d] - 1) // est[d] for d in range(rank)]
    return n, max(n[0] * DTYPES[dtype][1], 16 << swizzle if swizzle else 0)


def tma_footprint(p: torch.Tensor) -> int:
    """The shared-memory bytes of a box as the H100 lays it out (see _tma_walk's rows and _interleaved_walk's
    lines)."""
    if _slice(p):
        _, line, _, counts = _interleaved_lines(p)
        return math.prod(counts) * line
    n, pitch = _box_rows(p)
    return math.prod(n[1:]) * pitch


def tma_buffer(p: torch.Tensor) -> int:
    """The shared memory ptx_hopper.cu's kernels give a box (MapParams::footprint), the size of a store's image and
    of a load's answer: the footprint, but for an interleaved map ceil(box / elementStride) elements of the data
    type along every dimension (rows padded to the swizzle's span), the size its recorded answers were made with."""
    if not _slice(p):
        return tma_footprint(p)
    v = p.tolist()
    rank, es = v[0], DTYPES[v[1]][1]
    n = [(b + s - 1) // s for b, s in zip(v[13:13 + rank], v[18:18 + rank])]
    row, span = n[0] * es, 16 << v[2] if v[2] else 0
    return math.prod(n[1:]) * max(row, span)


def _h100_room(buffer: int, static_bytes: int) -> int:
    """The shared memory after a test kernel's 1024-aligned buffer on the H100 (ptx_hopper.cu, smem_for)."""
    start = 1024 + (static_bytes + 15) // 16 * 16
    return (start + buffer + 1024 + 127) // 128 * 128 - (start + 1023) // 1024 * 1024


def _tensor_end(p: torch.Tensor) -> int:
    """The bytes of the tensor a map describes, globalDim[0] taken as elements of the data type."""
    v = p.tolist()
    rank = v[0]
    return v[4] * DTYPES[v[1]][1] + sum((v[4 + d] - 1) * v[8 + d] for d in range(1, rank))


def interleaved_outcome(p: torch.Tensor, coords, store: bool) -> tuple[bool, str]:
    """For a copy through an interleaved map in ptx_hopper.cu's kernels: whether the H100 stops the kernel, and
    the simulator's error (a pattern of its message, "" when it runs the copy), checked in the simulator's order.
    The H100 stops a store with a negative coordinate (an illegal instruction) and a load whose box runs past the
    kernel's shared memory (an illegal memory access; see tma_buffer). It ran the one store whose box did (rank 5,
    every line but the first outside the tensor), so a store is not taken to stop there. The simulator refuses
    besides a box past the shared memory, what the recorded answers leave open, and a line that reaches past the
    tensor's end (the H100 reads or writes there)."""
    v = p.tolist()
    rank, est, box, dims = v[0], v[18:18 + v[0]], v[13:13 + v[0]], v[4:4 + v[0]]
    c = coords.tolist()[:rank]
    skip, (_, line, walked, _) = rank - 2, _interleaved_lines(p)
    span = 16 << v[2] if v[2] else 0
    fits = tma_footprint(p) <= _h100_room(tma_buffer(p), 0 if store else 8)
    faults = min(c) < 0 if store else not fits
    open_ = [(rank > 4, "rank 5"), (est[0] != 1, r"elementStrides\[0\]"),
             (any(est[d] != 1 for d in walked), "on a walked dimension"), (box[skip] > 8, rf"boxDim\[{skip}\]"),
             (c[0] < 0 or c[0] + box[0] > dims[0], "of dimension 0, not all inside"),
             (span and line % span, "not a multiple of its span")]
    for problem, pattern in open_:
        if problem:
            return faults, pattern + ".*not recorded"
    if store and min(c) < 0:
        return faults, "must not be negative"
    if not fits:
        return faults, r"the interleaved box takes \d+ bytes of shared memory"
    end = _tensor_end(p)
    for _, go in _interleaved_walk(p, c):
        if go is None and not store and v[3]:
            return faults, "NaN out-of-bounds fill.*not recorded"
        if go is not None and go + 16 > end:
            return faults, "past its end"
    return faults, ""


def tma_load_reference(glob: torch.Tensor, p: torch.Tensor, coords: torch.Tensor) -> list[torch.Tensor]:
    v = p.tolist()
    dtype, oob = v[1], v[3]
    es = DTYPES[dtype][1]
    g = glob.tolist()
    fill = [0xF7, 0x7F] * (es // 2) if oob else [0] * es  # the H100's NaN fill: 0x7ff7 in every 16 bits
    out = [0] * tma_buffer(p)  # the test kernel zeroes the gaps between narrow rows
    if _slice(p):  # the kernel's answer is its buffer: the first bytes of the box (see tma_buffer)
        for so, go in _interleaved_walk(p, coords.tolist()):
            if so < len(out):
                if go is None and oob:
                    raise ValueError("the H100's NaN fill of an interleaved line is not recorded")
                if go is not None and go + 16 > len(g):
                    raise ValueError("the H100 reads past the tensor here: its answer is not known")
                out[so:so + 16] = g[go:go + 16] if go is not None else [0] * 16
        return [torch.tensor([0]), torch.tensor(out, dtype=torch.uint8)]
    for so, go, _ in _tma_walk(p, coords.tolist()):
        out[so:so + es] = g[go:go + es] if go is not None else fill
    return [torch.tensor([0]), torch.tensor(out, dtype=torch.uint8)]


def tma_store_reference(glob: torch.Tensor, p: torch.Tensor, coords: torch.Tensor, image: torch.Tensor):
    if _slice(p):
        return _interleaved_store(glob, p, coords, image)[0]
    g = glob.clone()
    img = image.tolist()
    for so, go, es in _tma_walk(p, coords.tolist(), store=True):
        if go is not None and go + es <= g.numel():
            g[go:go + es] = torch.tensor(img[so:so + es], dtype=torch.uint8)
    return [torch.tensor([0]), g]


def _interleaved_store(glob: torch.Tensor, p: torch.Tensor, coords: torch.Tensor, image: torch.Tensor):
    """tma_store_raw through an interleaved map: [status, the tensor after], and which bytes of it came from
    shared memory past the image (the kernel never wrote them: 0xFF, the simulator's poison, there; the H100's
    leftovers on the GPU). Lines reaching past the tensor's end go on writing there on the H100: into the status
    tensor, when the caching allocator put it in the next 512-byte block, as it did for the recorded answers."""
    g, img, n = glob.tolist(), image.tolist(), glob.numel()
    unknown, beyond = [False] * n, {}
    for so, go in _interleaved_walk(p, coords.tolist()):
        if go is None:
            continue
        chunk = img[so:so + 16] if so + 16 <= len(img) else [0xFF] * 16
        for b in range(16):
            if go + b < n:
                g[go + b], unknown[go + b] = chunk[b], so + 16 > len(img)
            else:
                beyond[go + b] = chunk[b]
    at = (n + 511) // 512 * 512
    status = [beyond.get(at + i) for i in range(8)]
    status = int.from_bytes(bytes(status), "little", signed=True) if None not in status else 0
    return [torch.tensor([status]), torch.tensor(g, dtype=torch.uint8)], torch.tensor(unknown)


def _tma_tensor(seed: int, dtype: int, dims, pad_bytes: int = 0):
    """Random bytes for a tensor of `dims` (dim 0 fastest), each row padded; returns it and the strides."""
    es = DTYPES[dtype][1]
    row = dims[0] * es + pad_bytes
    row = (row + 15) // 16 * 16
    strides = [row]
    for d in dims[1:-1]:
        strides.append(strides[-1] * d)
    total = strides[-1] * dims[-1] if len(dims) > 1 else row
    g = _gen(seed)
    data = torch.randint(0, 256, (total,), generator=g, dtype=torch.int64).to(torch.uint8)
    if dtype in (7, 9, 6):  # no NaN in the data, so that an out-of-bounds NaN fill is the only one
        dt = DTYPES[dtype][0]
        data = torch.randn(total // es, generator=g).to(dt).view(torch.uint8)
    return data, strides[:len(dims) - 1]


def _tma_copy_cases(prefix: str, specs, seed: int, vectors: str = "") -> dict[str, Case]:
    """A load case for each spec (name, dtype, dims, box, coords, swizzle, oob, estride, pad, interleave), and
    a store case for those without the NaN fill: random data from `seed` + i, a random image from `seed` + 50 + i."""
    out = {}
    for i, (name, dtype, dims, box, coords, swz, oob, est, pad, il) in enumerate(specs):
        data, strides = _tma_tensor(seed + i, dtype, dims, pad)
        p = tma_params(dtype, dims, strides, box, est, swz, oob, il)
        c = torch.tensor(list(coords) + [0] * (5 - len(coords)), dtype=torch.int32)
        image = None
        if oob == 0:
            image = torch.randint(0, 256, (tma_buffer(p),), generator=_gen(seed + 50 + i), dtype=torch.int64)
            image = image.to(torch.uint8)
        for op, args in [("load", [data, p, c]), ("store", [data, p, c, image])]:
            if op == "store" and image is None:
                continue
            case = Case("ptx_hopper.cu", f"tma_{op}_raw", args, vectors=vectors)
            if il:  # the H100 stops the kernel, or runs it and the simulator refuses (interleaved_outcome)
                faults, error = interleaved_outcome(p, c, op == "store")
                assert error or not faults, f"the simulator runs {name}, which stops the kernel on the H100"
                case.faults, case.sim_refuses = (error, "") if faults else ("", error)
                unknown = _interleaved_store(*args)[1] if op == "store" and not error else None
                if unknown is not None and unknown.any():
                    case.notes["h100_unknown"] = unknown
            else:
                faults = "not a multiple of 16" if coords[0] * DTYPES[dtype][1] % 16 else ""
                negative = "must not be negative" if op == "store" and min(coords) < 0 else ""  # (H100)
                case.faults = faults or negative
            out[f"tma_{op}_{prefix}{name}"] = case
    return out


def tma_cases() -> dict[str, Case]:
    out = {}
    specs = [  # name, dtype, dims, box, coords, swizzle, oob, estride, pad
        ("2d_bf16_inside", 9, [72, 40], [16, 8], [8, 4], 0, 0, None, 0),
        ("2d_bf16_edges", 9, [70, 40], [16, 8], [56, 36], 0, 0, None, 32),
        ("2d_bf16_negative", 9, [70, 40], [16, 8], [-8, -3], 0, 0, None, 32),
        ("2d_bf16_row_start_not_16_bytes", 9, [70, 40], [16, 8], [60, 36], 0, 0, None, 32),  # the GPU faults
        ("2d_bf16_negative_not_16_bytes", 9, [70, 40], [16, 8], [-5, -3], 0, 0, None, 32),  # the GPU faults
        ("2d_bf16_128B", 9, [200, 80], [64, 32], [64, 8], 3, 0, None, 0),
        ("2d_bf16_128B_edges", 9, [100, 50], [64, 32], [80, 40], 3, 0, None, 0),
        ("2d_bf16_128B_narrow_box", 9, [200, 80], [32, 16], [8, 8], 3, 0, None, 0),
        ("2d_bf16_64B", 9, [128, 64], [32, 16], [32, 16], 2, 0, None, 0),
        ("2d_bf16_32B", 9, [128, 64], [16, 16], [16, 0], 1, 0, None, 0),
        ("2d_f32_nan_fill", 7, [30, 20], [8, 8], [24, 16], 0, 1, None, 0),
        ("2d_f16_nan_fill", 6, [30, 20], [16, 8], [24, -4], 0, 1, None, 0),
        ("2d_bf16_nan_fill", 9, [30, 20], [16, 8], [24, -4], 0, 1, None, 0),
        ("2d_u8_128B", 0, [256, 40], [128, 8], [0, 36], 3, 0, None, 0),
        ("1d_f32", 7, [1000], [64], [968], 0, 0, None, 0),
        ("1d_f32_row_start_not_16_bytes", 7, [1000], [64], [970], 0, 0, None, 0),  # the GPU faults
        ("3d_bf16", 9, [40, 10, 6], [16, 4, 2], [32, 8, 5], 0, 0, None, 0),
        ("4d_f32", 7, [8, 5, 4, 3], [8, 2, 2, 2], [0, 4, 3, 2], 0, 0, None, 0),
        ("5d_bf16", 9, [16, 3, 3, 2, 2], [8, 2, 2, 2, 2], [8, 2, 1, 1, 1], 0, 0, None, 0),
        ("2d_f32_element_strides", 7, [64, 40], [16, 9], [4, 5], 0, 0, [1, 3], 0),
    ]
    out.update(_tma_copy_cases("", [spec + (0,) for spec in specs], 800))
    bad = [  # name, dtype, dims, strides, box, swizzle
        ("box_inner_not_16_bytes", 9, [64, 64], [128], [12, 8], 0),
        ("swizzle_128B_inner_256_bytes", 9, [256, 64], [512], [128, 8], 3),
        ("stride_not_multiple_of_16", 9, [60, 64], [120], [16, 8], 0),
        ("box_above_256", 7, [1024, 4], [4096], [4, 300], 0),
        ("valid", 9, [64, 64], [128], [64, 8], 3),
    ]
    for name, dtype, dims, strides, box, swz in bad:
        data = torch.zeros(max(4096, dims[1] * strides[0]), dtype=torch.uint8)
        out[f"tma_encode_{name}"] = Case("ptx_hopper.cu", "tma_encode_status", [data, tma_params(dtype, dims, strides, box, None, swz)])
    g = _gen(880)
    src = torch.randint(0, 256, (4096,), generator=g, dtype=torch.int64).to(torch.uint8)
    for off, size in [(0, 16), (64, 1024), (2048, 2048)]:
        out[f"bulk_{off}_{size}"] = Case("ptx_hopper.cu", "bulk_raw", [src, off, size])
    return out


INTERLEAVE_VECTORS = "ptx_tma_interleave"  # recorded apart, so that the older files stay as recorded


def tma_interleave_cases() -> dict[str, Case]:
    """Interleaved tensor maps (CU_TENSOR_MAP_INTERLEAVE_16B/32B): loads and stores of rank 3 to 5, ragged
    boxes with both fills, dim 0's element stride, the swizzles, and cuTensorMapEncodeTiled's rules for them.
    The cases were written for a model that walked such a box as a plain one; the H100 does not (see
    _interleaved_walk), and its answers to them are what the rule was read from. Eight of the loads overrun the
    test kernel's buffer there and stop the kernel, which the simulator reproduces (ptx_hopper.cu, smem_for); the
    ninth fault is a store's negative coordinate."""
    out = {}
    specs = [  # name, dtype, dims, box, coords, swizzle, oob, estride, interleave (1: 16B, 2: 32B)
        ("3d_f16_nc8hwc8", 6, [8, 10, 6], [8, 4, 3], [0, 4, 2], 0, 0, None, 1),
        ("4d_bf16_edges", 9, [8, 9, 7, 3], [8, 4, 4, 2], [0, 7, 5, 2], 0, 0, None, 1),
        ("4d_bf16_nan_fill", 9, [8, 9, 7, 3], [8, 4, 4, 2], [0, -2, 5, 1], 0, 1, None, 1),
        ("4d_f32_negative", 7, [4, 9, 7, 3], [4, 4, 4, 2], [0, -3, -1, 0], 0, 0, None, 1),
        ("4d_f32_32B", 7, [8, 6, 5, 2], [8, 4, 4, 2], [0, 3, 2, 0], 1, 0, None, 2),
        ("5d_bf16_32B_edges", 9, [16, 4, 3, 2, 2], [16, 2, 2, 2, 2], [0, 3, 2, 1, 1], 1, 0, None, 2),
        ("4d_f32_32B_nan_fill", 7, [8, 5, 4, 2], [8, 2, 4, 2], [0, 4, -2, 1], 1, 1, None, 2),
        ("3d_u8_element_stride_dim0", 0, [16, 12, 4], [32, 6, 2], [0, 1, 3], 0, 0, [2, 2, 1], 1),
        ("3d_f16_128B_wide_rows", 6, [64, 8, 4], [64, 8, 2], [0, 2, 1], 3, 0, None, 1),
        ("3d_bf16_64B_rows_32B_swizzle", 9, [32, 10, 4], [32, 4, 2], [0, 7, 3], 1, 0, None, 1),
        ("3d_f16_row_start_not_16_bytes", 6, [16, 8, 4], [8, 4, 2], [4, 0, 0], 0, 0, None, 1),  # slices: runs
    ]
    out.update(_tma_copy_cases("interleaved_", [spec[:8] + (0, spec[8]) for spec in specs], 900, INTERLEAVE_VECTORS))
    encode = [  # name, dtype, dims, strides, box, swizzle, interleave, offset, the H100 driver's answer
        ("interleave_16B_rank_2", 6, [8, 64], [16], [8, 8], 0, 1, 0, 1),
        ("interleave_unknown_mode_3", 6, [8, 6, 5], [16, 96], [8, 4, 4], 0, 3, 0, 1),
        ("interleave_32B_swizzle_none", 7, [8, 6, 5], [32, 192], [8, 4, 4], 0, 2, 0, 0),
        ("interleave_32B_swizzle_64B", 7, [8, 6, 5], [32, 192], [8, 4, 4], 2, 2, 0, 0),
        ("interleave_32B_address_16_past_32", 7, [8, 6, 5], [32, 192], [8, 4, 4], 1, 2, 16, 1),
        ("interleave_32B_stride_48", 6, [24, 6, 5], [48, 288], [16, 4, 4], 1, 2, 0, 1),
        ("interleave_16B_stride_24", 6, [12, 6, 5], [24, 144], [8, 4, 4], 0, 1, 0, 1),
        ("interleave_16B_rank_3_valid", 6, [8, 6, 5], [16, 96], [8, 4, 4], 0, 1, 0, 0),
        ("interleave_16B_address_16_past_32_valid", 6, [8, 6, 5], [16, 96], [8, 4, 4], 0, 1, 16, 0),
        # named before the H100 answered: its driver refuses an 8-byte box with the 16B interleave too
        ("interleave_16B_box_inner_8_bytes_valid", 6, [8, 6, 5], [16, 96], [4, 4, 4], 0, 1, 0, 1),
        ("interleave_16B_swizzle_32B_box_inner_64_bytes_valid", 6, [32, 6, 5], [64, 384], [32, 4, 4], 1, 1, 0, 0),
        ("interleave_32B_swizzle_32B_valid", 7, [8, 6, 5], [32, 192], [8, 4, 4], 1, 2, 0, 0),
        ("interleave_none_box_inner_8_bytes", 6, [8, 6, 5], [16, 96], [4, 4, 4], 0, 0, 0, 1),
    ]
    for name, dtype, dims, strides, box, swz, il, offset, status in encode:
        data = torch.zeros(8192, dtype=torch.uint8)
        p = tma_params(dtype, dims, strides, box, None, swz, 0, il)
        out[f"tma_encode_{name}"] = Case("ptx_hopper.cu", "tma_encode_status", [data, p, offset],
                                         notes={"status": status}, vectors=INTERLEAVE_VECTORS)
    return out


def vector_file(case: Case) -> str:
    """The stem of the file in tests/ptx_vectors/ that holds the case's recorded answer."""
    return case.vectors or Path(case.file).stem


def bulk_reference(src: torch.Tensor, offset: int, size: int) -> torch.Tensor:
    out = torch.zeros_like(src)
    out[offset:offset + size] = src[offset:offset + size]
    return out


def all_cases() -> dict[str, Case]:
    cases = {}
    for part in (mma_cases, matrix_cases, alu_cases, shfl_cases, misc_cases, wgmma_cases, tma_cases,
                 tma_interleave_cases):
        cases.update(part())
    return cases


def reference(name: str, case: Case):
    """What the PTX ISA says case `name` gives."""
    a = case.args
    if case.op == "mma_raw":
        return mma_reference(MMA_FORMS[a[3]], a[0], a[1], a[2])
    if case.op == "ldmatrix_raw":
        return ldmatrix_reference(*a)
    if case.op == "stmatrix_raw":
        return stmatrix_reference(*a)
    if case.op == "alu_raw":
        return alu_reference(a[3], a[0], a[1], a[2])
    if case.op == "shfl_raw":
        return shfl_reference(*a)
    if case.op == "specials_raw":
        return specials_reference()
    if case.op == "cp_async_raw":
        return cp_async_reference(*a[:3])
    if case.op == "wgmma_raw":
        return wgmma_reference(*a)
    if case.op == "tma_load_raw":
        return tma_load_reference(*a)
    if case.op == "tma_store_raw":
        return tma_store_reference(*a)
    if case.op == "tma_encode_status":  # CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE
        return case.notes.get("status", 0 if name.endswith("valid") else 1)
    if case.op == "bulk_raw":
        return bulk_reference(*a)
    raise KeyError(name)


# ---------------------------------------------------------------------------------------------
# the recorder (GPU)
def _to(x, dev):
    return x.to(dev) if isinstance(x, torch.Tensor) else x


def _cpu(x):
    if isinstance(x, (list, tuple)):
        return [_cpu(v) for v in x]
    return x.cpu() if isinstance(x, torch.Tensor) else x


def args_digest(args) -> str:
    """A digest of a case's arguments: a recorded answer counts only for the inputs it was made from."""
    import hashlib

    h = hashlib.sha256()
    for a in args:
        h.update(a.contiguous().view(torch.uint8).numpy().tobytes() if isinstance(a, torch.Tensor) else repr(a).encode())
    return h.hexdigest()[:16]


def _run_cases(names: list[str], backend: str, results: Path) -> None:
    """Run these cases in order in this process, saving {case: answer} to `results` after each. A kernel that
    faults leaves the CUDA context unusable, so the first case that raises ends the process (exit status 3)."""
    sys.path.insert(0, str(HERE.parent))
    from kernels import load

    cases = all_cases()
    dev = "cuda" if backend == "cuda" else "cpu"
    done: dict = {}
    for name in names:
        case = cases[name]
        try:
            got = getattr(load(KERNELS / case.file, backend), case.op)(*[_to(x, dev) for x in case.args])
            if backend == "cuda":
                torch.cuda.synchronize()
            done[name] = {"digest": args_digest(case.args), "out": _cpu(got)}
        except Exception as e:  # noqa: BLE001 (a case the GPU refuses is recorded as such)
            done[name] = {"digest": args_digest(case.args), "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
            print(f"{name}: {done[name]['error']}", flush=True)
            torch.save(done, results)
            sys.exit(3)
        torch.save(done, results)


def record(out_dir: Path, backend: str = "cuda", files: list[str] | None = None) -> None:
    """Run every case (or those of the vector files named in `files`) and save one file per vector file
    (see vector_file): {case: {"digest" of the args, "out" or "error"}}. The cases run in child processes;
    after a case that fails (a fault poisons the CUDA context of its process), the next child goes on with
    the case after it."""
    import subprocess
    import tempfile

    out_dir.mkdir(parents=True, exist_ok=True)
    cases = all_cases()
    names = [n for n, c in cases.items() if not files or vector_file(c) in files]
    answers: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "part.pt"
        while len(answers) < len(names):
            left = names[len(answers):]
            results.unlink(missing_ok=True)
            subprocess.run([sys.executable, __file__, "--child", backend, str(results), *left])
            part = torch.load(results) if results.exists() else {}
            if not part:  # the child died before its first answer
                part = {left[0]: {"digest": args_digest(cases[left[0]].args), "error": "the process ended"}}
            answers.update(part)
    by_file: dict[str, dict] = {}
    for name in names:
        by_file.setdefault(vector_file(cases[name]), {})[name] = answers[name]
    for stem, table in by_file.items():
        torch.save(table, out_dir / f"{stem}.pt")
        failed = sum("error" in v for v in table.values())
        print(f"{stem}: {len(table)} cases ({failed} failed) -> {out_dir / f'{stem}.pt'}")


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # record()'s worker: --child BACKEND RESULTS CASE...
        _run_cases(sys.argv[4:], sys.argv[2], Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description="Record the GPU's answers to the PTX test cases (build with "
                                     "TORCH_CUDA_ARCH_LIST=9.0a: the Hopper cases need sm_90a).")
    parser.add_argument("--out", required=True, help="the folder for the vector files (copy them to tests/ptx_vectors/)")
    parser.add_argument("--backend", choices=["cuda", "sim"], default="cuda",
                        help="where to run the cases (sim only to try the recorder without a GPU)")
    stems = sorted({vector_file(c) for c in all_cases().values()})
    parser.add_argument("--files", nargs="+", choices=stems, metavar="STEM",
                        help=f"record only these vector files (of {', '.join(stems)}); default: all")
    args = parser.parse_args()
    if args.backend == "cuda" and not torch.cuda.is_available():
        parser.error("needs a GPU (torch.cuda.is_available() is False)")
    record(Path(args.out), args.backend, args.files)


if __name__ == "__main__":
    main()
