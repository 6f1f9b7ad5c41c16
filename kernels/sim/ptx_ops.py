"""The PTX instructions the simulator runs: for each, how it is read and the C++ call it becomes.

`EMITTERS` maps an instruction's first name (`mma`, `ldmatrix`, `cp`, ...) to a function that reads
its modifiers and operands (kernels/sim/ptx.py parses them) and returns one C++ statement calling
include/cudasim_ptx/. A form the simulator does not run returns None or fails naming the modifier;
ptx.py turns None into the error that names the instruction.
"""
from __future__ import annotations

import re

from .ptx import Emit, Imm, Instr, Mem, Pair, Reg, Vec

P = "::cudasim::ptx::"

CTYPE = {"u8": "uint8_t", "s8": "int8_t", "b8": "uint8_t", "u16": "uint16_t", "s16": "int16_t", "b16": "uint16_t",
         "u32": "uint32_t", "s32": "int32_t", "b32": "uint32_t", "f32": "float", "u64": "uint64_t",
         "s64": "int64_t", "b64": "uint64_t", "f64": "double", "pred": "bool"}
INT_TYPES = {"u16", "s16", "b16", "u32", "s32", "b32", "u64", "s64", "b64"}
FLOAT_TYPES = {"f32", "f64"}
SPACES = {"shared": "Shared", "shared::cta": "Shared", "shared::cluster": "SharedCluster", "global": "Global",
          "local": "Local", "const": "Const", "param": "Param"}


class Mods:
    """An instruction's modifiers, read left to right."""

    def __init__(self, ins: Instr, em: Emit, skip: int = 1):
        self.rest = list(ins.parts[skip:])
        self.ins, self.em = ins, em

    def take(self, *options: str) -> str | None:
        if self.rest and self.rest[0] in options:
            return self.rest.pop(0)
        return None

    def take_all(self, options: set[str]) -> list[str]:
        got = []
        while self.rest and self.rest[0] in options:
            got.append(self.rest.pop(0))
        return got

    def need(self, *options: str) -> str:
        got = self.take(*options)
        if got is None:
            found = f".{self.rest[0]}" if self.rest else "nothing"
            self.em.fail(f"expected {' or '.join('.' + o for o in options)} here, found {found}")
        return got

    def type(self, allowed) -> str:
        if not self.rest or self.rest[0] not in allowed:
            found = f".{self.rest[0]}" if self.rest else "no type"
            self.em.fail(f"the simulator runs this instruction on {', '.join('.' + t for t in sorted(allowed))}; "
                         f"found {found}")
        return self.rest.pop(0)

    def done(self):
        if self.rest:
            self.em.fail(f"the modifier .{self.rest[0]} is not one the simulator knows for {self.ins.parts[0]}")


def nops(ins: Instr, em: Emit, *counts: int):
    if len(ins.operands) not in counts:
        em.fail(f"takes {' or '.join(map(str, counts))} operands, got {len(ins.operands)}")


# cache, ordering and eviction qualifiers that change nothing a single CTA can observe in order
_CACHE = {"ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "weak", "volatile", "relaxed", "acquire", "release",
          "cta", "gpu", "sys", "cluster", "L1::evict_normal", "L1::evict_unchanged", "L1::evict_first",
          "L1::evict_last", "L1::no_allocate", "L2::evict_normal", "L2::evict_first", "L2::evict_last",
          "L2::cache_hint", "L2::64B", "L2::128B", "L2::256B", "mmio"}


# ---------------------------------------------------------------------------------------------
# data movement

def e_mov(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    t = m.type({"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64", "pred", "b128"})
    m.done()
    nops(ins, em, 2)
    d, a = ins.operands
    if t == "b128":
        em.fail("128-bit registers are not run by the simulator")
    if isinstance(d, Vec) or isinstance(a, Vec):  # pack or unpack: mov.b32 r, {lo, hi} / mov.b64 {lo, hi}, r
        bits = int(t[1:]) if t[0] in "bus" else None
        if bits not in (32, 64) and not (bits == 16 and isinstance(a, Vec)):
            em.fail("packs and unpacks registers only as .b16, .b32 or .b64")
        if isinstance(a, Vec):
            parts = [em.val(x) for x in a.items]
            if len(parts) not in (2, 4):
                em.fail("packs 2 or 4 registers")
            return f"{P}put<uint{bits}_t>({em.reg(d)}, {P}pack<uint{bits}_t>({', '.join(parts)}));"
        outs = [em.reg(x) for x in d.items]
        if len(outs) not in (2, 4):
            em.fail("unpacks into 2 or 4 registers")
        return f"{P}unpack<uint{bits}_t>({em.val(a)}, {', '.join(outs)});"
    if isinstance(a, Reg) and a.text == "%is_explicit_cluster" and t != "pred":
        em.fail("%is_explicit_cluster is a predicate: mov.pred p, %is_explicit_cluster (then selp for a number)")
    c = CTYPE[t]
    return f"{P}put<{c}>({em.reg(d)}, {P}as<{c}>({em.val(a)}));"


def e_cvta(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    to = m.take("to") is not None
    space = m.need("shared", "shared::cta", "shared::cluster", "global", "local", "const", "param")
    t = m.type({"u32", "u64"})
    m.done()
    nops(ins, em, 2)
    if space in ("local", "const", "param"):
        em.fail(f"the .{space} state space is not run by the simulator")
    fn = ("to_" if to else "from_") + ("shared" if space.startswith("shared") else "global")
    return f"{P}put<{CTYPE[t]}>({em.reg(ins.operands[0])}, {P}cvta_{fn}<{CTYPE[t]}>({em.site()}, {em.val(ins.operands[1])}));"


def _space(m: Mods, default: str = "Generic") -> str:
    s = m.take(*SPACES)
    return SPACES[s] if s else default


SEMS = {"relaxed": "Relaxed", "acquire": "Acquire", "release": "Release", "acq_rel": "AcqRel"}
SCOPES = {"cta": "Cta", "cluster": "Cluster", "gpu": "Gpu", "sys": "Sys"}


def _order(mods: list[str], default_scope: str = "gpu") -> tuple[str | None, str]:
    """The memory order and scope among an instruction's modifiers: (the semantics or None, the scope)."""
    sem = next((x for x in mods if x in SEMS), None)
    return sem, next((x for x in mods if x in SCOPES), default_scope)


def e_ld(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    mods = m.take_all(_CACHE)
    space = _space(m)
    mods += m.take_all(_CACHE)
    vec = m.take("v2", "v4", "v8")
    t = m.type({"b8", "u8", "s8", "b16", "u16", "s16", "b32", "u32", "s32", "f32", "b64", "u64", "s64", "f64"})
    m.done()
    nops(ins, em, 2, 3)
    if space in ("Local", "Const", "Param"):
        em.fail("the simulator runs ld on .shared, .global and generic addresses")
    n = int(vec[1:]) if vec else 1
    d = ins.operands[0] if ins.opcode.split(".")[0] == "ld" else ins.operands[1]
    outs = em.vec(d, n, "destination" if ins.parts[0] == "ld" else "source")
    addr = em.addr(ins.operands[1] if ins.parts[0] == "ld" else ins.operands[0])
    signed = "true" if t[0] == "s" else "false"
    size = {"8": 1, "16": 2, "32": 4, "64": 8}[t[1:] if t[0] != "f" else t[1:]]
    sem, scope = _order(mods, default_scope="")
    load = ins.parts[0] == "ld"
    if sem is not None and not scope:
        em.fail(f"{ins.parts[0]}.{sem} needs a scope (.cta, .cluster, .gpu or .sys), as ptxas requires")
    if sem in ("acq_rel", "release" if load else "acquire"):
        em.fail(f"{ins.parts[0]} has no .{sem} form (ld takes .relaxed or .acquire, st .relaxed or .release)")
    if sem is None and "volatile" in mods:  # PTX reads .volatile as .relaxed.sys
        sem, scope = "relaxed", "sys"
    if sem is not None:  # a strong access: an atomic here
        if n != 1 or size not in (4, 8):
            em.fail(f"the simulator runs .{sem} loads and stores on one 32- or 64-bit value")
        order = f"{P}Sem::{SEMS[sem]}, {P}Scope::{SCOPES[scope]}"
        if load:
            return f"{P}ld_strong<{P}Space::{space}, {size}, {signed}>({em.site()}, {addr}, {order}, {em.reg(outs[0])});"
        return f"{P}st_strong<{P}Space::{space}, {size}>({em.site()}, {addr}, {order}, {em.val(outs[0])});"
    if ins.parts[0] == "ld":
        regs = ", ".join(em.reg(x) for x in outs)
        return f"{P}ld<{P}Space::{space}, {size}, {signed}>({em.site()}, {addr}, {regs});"
    vals = ", ".join(em.val(x) for x in outs)
    return f"{P}st<{P}Space::{space}, {size}>({em.site()}, {addr}, {vals});"


def e_st(ins: Instr, em: Emit) -> str:
    ins.operands = ins.operands[:2]
    return e_ld(ins, em)


ATOM_TYPES = {  # per operation: the PTX types and the C++ type of CUDA's atomic function that runs it
    "add": {"u32": "unsigned", "s32": "int", "u64": "unsigned long long", "f32": "float", "f64": "double"},  # no .s64
    "min": {"u32": "unsigned", "s32": "int", "u64": "unsigned long long", "s64": "long long"},
    "and": {"b32": "unsigned", "b64": "unsigned long long"},
    "exch": {"b32": "unsigned", "b64": "unsigned long long"},
    "cas": {"b16": "unsigned short", "b32": "unsigned", "b64": "unsigned long long"},
    "inc": {"u32": "unsigned"},
}
ATOM_TYPES |= {"max": ATOM_TYPES["min"], "or": ATOM_TYPES["and"], "xor": ATOM_TYPES["and"], "dec": ATOM_TYPES["inc"]}


def e_atom(ins: Instr, em: Emit) -> str:
    # atom{.sem}{.scope}{.space}.op{.L2::cache_hint}.type d, [a], b{, c}; red{.sem}{.scope}{.space}.op.type [a], b
    red = ins.parts[0] == "red"
    m = Mods(ins, em)
    spaces = ("global", "shared", "shared::cta", "shared::cluster")
    mods = m.take_all({*SEMS, *SCOPES, *spaces})  # in any order, as ptxas takes them (atom.global.release.sys.cas)
    sem, scope = _order(mods)
    sem = sem or "relaxed"
    space = next((x for x in mods if x in spaces), None)
    op = m.need(*ATOM_TYPES)
    hint = m.take("L2::cache_hint") is not None
    if m.take("noftz", "v2", "v4", "v8"):
        em.fail("the simulator runs atom and red on one value (no .f16, .bf16 or vector forms)")
    t = m.type(set(ATOM_TYPES[op]))
    m.done()
    if red and sem in ("acquire", "acq_rel"):
        em.fail(f"red has no .{sem} form (it returns nothing to acquire): use atom")
    if red and op in ("exch", "cas"):
        em.fail(f"red has no .{op} (ptxas refuses it): use atom")
    values = (2 if op == "cas" else 1) + hint
    nops(ins, em, values + (1 if red else 2))
    ops = ins.operands if red else ins.operands[1:]
    dest = "cudasim_nodest" if red else em.reg(ins.operands[0])
    b = em.val(ops[1])
    c = em.val(ops[2]) if op == "cas" else "0"
    call = (f"{P}atom<{P}Space::{SPACES[space] if space else 'Generic'}, {P}AtomOp::{op.capitalize()}, "
            f"{ATOM_TYPES[op][t]}>({em.site()}, {em.addr(ops[0])}, {P}Sem::{SEMS[sem]}, {P}Scope::{SCOPES[scope]}, "
            f"{dest}, {b}, {c});")
    return f"{{ {P}NoDest cudasim_nodest; {call} }}" if red else call


def e_prefetch(ins: Instr, em: Emit) -> str:
    # prefetch{.space}.level [a], prefetch.tensormap [a], prefetchu.L1 [a]: a hint, nothing to simulate
    nops(ins, em, 1)
    em.addr(ins.operands[0])
    return ";"


def e_createpolicy(ins: Instr, em: Emit) -> str:
    # an L2 eviction policy for .L2::cache_hint: the simulator has no cache, any value serves
    return f"{P}put<uint64_t>({em.reg(ins.operands[0])}, uint64_t{{0x1000000000000000ull}});"


# ---------------------------------------------------------------------------------------------
# integer and float arithmetic

def _binary(name: str, types: set[str], float_mods: bool = True):
    def emit(ins: Instr, em: Emit) -> str:
        m = Mods(ins, em)
        mode = m.take("lo", "hi", "wide") if name in ("mul", "mad") else None
        rnd = m.take("rn", "rz", "rm", "rp", "approx", "full")
        ftz = m.take("ftz") is not None
        sat = m.take("sat") is not None
        m.take("NaN")
        t = m.type(types)
        m.done()
        if rnd not in (None, "rn", "approx", "full"):
            em.fail(f"the rounding .{rnd} is not run by the simulator (only .rn)")
        if t in INT_TYPES and name in ("mul", "mad") and mode is None:
            em.fail("needs .lo, .hi or .wide for integers")
        n = {"mad": 4, "fma": 4, "neg": 2, "abs": 2, "not": 2, "popc": 2, "clz": 2, "brev": 2, "rcp": 2, "sqrt": 2,
             "rsqrt": 2, "ex2": 2, "lg2": 2, "tanh": 2, "sin": 2, "cos": 2}.get(name, 3)
        nops(ins, em, n)
        c = CTYPE[t]
        args = ", ".join(f"{P}as<{c}>({em.val(x)})" for x in ins.operands[1:])
        fn = name + ("_" + mode if mode else "")
        flags = f"{'true' if ftz else 'false'}, {'true' if sat else 'false'}"
        out = c if mode != "wide" else CTYPE[t[0] + str(int(t[1:]) * 2)]
        if name in ("popc", "clz"):
            out = "uint32_t"
        return f"{P}put<{out}>({em.reg(ins.operands[0])}, {P}alu_{fn}<{c}>({flags}, {args}));"
    return emit


_INT = {"u16", "s16", "u32", "s32", "u64", "s64"}
_BITS = {"b16", "b32", "b64", "pred"}


def e_setp(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    cmp = m.need("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu",
                 "geu", "num", "nan")
    boolop = m.take("and", "or", "xor")
    m.take("ftz")
    t = m.type(_INT | {"b16", "b32", "b64", "f32", "f64"})
    m.done()
    nops(ins, em, 4 if boolop else 3)
    d = ins.operands[0]
    p, q = (d.first, d.second) if isinstance(d, Pair) else (d, None)
    c = CTYPE[t]
    v = f"{P}cmp_{cmp}<{c}>({P}as<{c}>({em.val(ins.operands[1])}), {P}as<{c}>({em.val(ins.operands[2])}))"
    if boolop:
        v2 = f"{P}pred({em.val(ins.operands[3])})"
        op = {"and": "&&", "or": "||", "xor": "!="}[boolop]
        code = f"{{ bool cudasim_c = {v}; {P}put<bool>({em.reg(p)}, (cudasim_c {op} {v2}));"
        if q is not None:
            code += f" {P}put<bool>({em.reg(q)}, (!cudasim_c {op} {v2}));"
        return code + " }"
    code = f"{{ bool cudasim_c = {v}; {P}put<bool>({em.reg(p)}, cudasim_c);"
    if q is not None:
        code += f" {P}put<bool>({em.reg(q)}, !cudasim_c);"
    return code + " }"


def e_selp(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    t = m.type(_INT | {"b16", "b32", "b64", "f32", "f64"})
    m.done()
    nops(ins, em, 4)
    c = CTYPE[t]
    d, a, b, p = ins.operands
    return f"{P}put<{c}>({em.reg(d)}, {P}pred({em.val(p)}) ? {P}as<{c}>({em.val(a)}) : {P}as<{c}>({em.val(b)}));"


def e_shf(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    direction = m.need("l", "r")
    mode = m.need("wrap", "clamp")
    m.type({"b32"})
    m.done()
    nops(ins, em, 4)
    d, a, b, c = ins.operands
    return (f"{P}put<uint32_t>({em.reg(d)}, {P}shf<{'true' if direction == 'l' else 'false'}, "
            f"{'true' if mode == 'wrap' else 'false'}>({P}as<uint32_t>({em.val(a)}), {P}as<uint32_t>({em.val(b)}), "
            f"{P}as<uint32_t>({em.val(c)})));")


def e_prmt(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.type({"b32"})
    mode = m.take("f4e", "b4e", "rc8", "ecl", "ecr", "rc16")
    m.done()
    nops(ins, em, 4)
    d, a, b, c = ins.operands
    return (f"{P}put<uint32_t>({em.reg(d)}, {P}prmt({P}PrmtMode::{mode or 'standard'}, {P}as<uint32_t>({em.val(a)}), "
            f"{P}as<uint32_t>({em.val(b)}), {P}as<uint32_t>({em.val(c)})));")


def e_lop3(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.type({"b32"})
    m.done()
    nops(ins, em, 5)
    d, a, b, c, lut = ins.operands
    em.imm(lut, "lookup table (immLut)")
    return (f"{P}put<uint32_t>({em.reg(d)}, {P}lop3({P}as<uint32_t>({em.val(a)}), {P}as<uint32_t>({em.val(b)}), "
            f"{P}as<uint32_t>({em.val(c)}), {P}as<uint32_t>({em.val(lut)})));")


def e_bfe(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    t = m.type({"u32", "s32", "u64", "s64"})
    m.done()
    nops(ins, em, 4)
    d, a, b, c = ins.operands
    ct = CTYPE[t]
    return (f"{P}put<{ct}>({em.reg(d)}, {P}bfe<{ct}>({P}as<{ct}>({em.val(a)}), {P}as<uint32_t>({em.val(b)}), "
            f"{P}as<uint32_t>({em.val(c)})));")


def e_bfi(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    t = m.type({"b32", "b64"})
    m.done()
    nops(ins, em, 5)
    d, f, b, c, n = ins.operands
    ct = CTYPE[t]
    return (f"{P}put<{ct}>({em.reg(d)}, {P}bfi<{ct}>({P}as<{ct}>({em.val(f)}), {P}as<{ct}>({em.val(b)}), "
            f"{P}as<uint32_t>({em.val(c)}), {P}as<uint32_t>({em.val(n)})));")


def e_cvt(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    rnd = m.take("rn", "rz", "rm", "rp", "rna", "rni", "rzi", "rmi", "rpi", "rs")
    ftz = m.take("ftz") is not None
    relu = m.take("relu") is not None
    sat = m.take("sat", "satfinite")
    dt = m.type({"u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64", "f16", "bf16", "f32", "f64", "tf32",
                 "f16x2", "bf16x2"})
    st = m.type({"u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64", "f16", "bf16", "f32", "f64"})
    m.done()
    if dt in ("f16x2", "bf16x2"):
        nops(ins, em, 3)
        if st != "f32" or rnd not in ("rn", "rz"):
            em.fail("the simulator runs cvt.rn(.relu)(.satfinite).{f16x2,bf16x2}.f32 (and .rz)")
        d, a, b = ins.operands
        return (f"{P}put<uint32_t>({em.reg(d)}, {P}cvt_x2<{'true' if dt == 'bf16x2' else 'false'}>("
                f"{P}Rnd::{rnd}, {'true' if relu else 'false'}, {'true' if sat else 'false'}, "
                f"{P}as<float>({em.val(a)}), {P}as<float>({em.val(b)})));")
    nops(ins, em, 2)
    d, a = ins.operands
    if dt == "tf32":
        if st != "f32" or rnd not in ("rna", "rn", "rz"):
            em.fail("the simulator runs cvt.rna.tf32.f32 (and .rn, .rz) for tf32")
        return f"{P}put<uint32_t>({em.reg(d)}, {P}cvt_tf32({P}Rnd::{rnd}, {P}as<float>({em.val(a)})));"
    halves = {"f16": "uint16_t", "bf16": "uint16_t"}
    src, dst = halves.get(st) or CTYPE[st], halves.get(dt) or CTYPE[dt]
    floats = {"f16", "bf16", "f32", "f64"}
    if st in floats and dt not in floats and rnd not in ("rni", "rzi", "rmi", "rpi"):
        em.fail("a conversion from a float to an integer needs .rni, .rzi, .rmi or .rpi")
    narrowing = dt in ("f16", "bf16") or (dt == "f32" and st == "f64") or (dt in floats and st not in floats)
    if dt in floats and rnd not in (None, "rn") and narrowing:
        em.fail(f"the rounding .{rnd} is not run by the simulator for this conversion (only .rn)")
    return (f"{P}put_wide<{dst}>({em.reg(d)}, {P}cvt<{P}Ty::{dt}, {P}Ty::{st}>({P}Rnd::{rnd or 'none'}, "
            f"{'true' if ftz else 'false'}, {'true' if relu else 'false'}, {'true' if sat else 'false'}, "
            f"{P}as_narrow<{src}>({em.val(a)})));")


# ---------------------------------------------------------------------------------------------
# warp-wide and block-wide

def e_shfl(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.need("sync")
    mode = m.need("up", "down", "bfly", "idx")
    m.type({"b32"})
    m.done()
    nops(ins, em, 5)
    d, a, b, c, mask = ins.operands
    dst, p = (d.first, d.second) if isinstance(d, Pair) else (d, None)
    pred = f"&{em.reg(p)}" if p is not None else "nullptr"
    return (f"{{ uint32_t cudasim_v = {P}shfl_sync({em.site()}, {P}Shfl::{mode}, {P}as<uint32_t>({em.val(a)}), "
            f"{P}as<uint32_t>({em.val(b)}), {P}as<uint32_t>({em.val(c)}), {P}as<uint32_t>({em.val(mask)}), {pred}); "
            f"{P}put<uint32_t>({em.reg(dst)}, cudasim_v); }}")


def e_vote(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.need("sync")
    mode = m.need("all", "any", "uni", "ballot")
    t = m.type({"pred", "b32"})
    m.done()
    nops(ins, em, 3)
    d, a, mask = ins.operands
    if (mode == "ballot") != (t == "b32"):
        em.fail("vote.sync.ballot takes .b32, the others .pred")
    out = "uint32_t" if t == "b32" else "bool"
    value = f"{P}vote_sync({em.site()}, {P}Vote::{mode}, {P}pred({em.val(a)}), {P}as<uint32_t>({em.val(mask)}))"
    return f"{P}put<{out}>({em.reg(d)}, static_cast<{out}>({value}));"


def e_elect(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.need("sync")
    m.done()
    nops(ins, em, 2)
    d, mask = ins.operands
    if not isinstance(d, Pair):
        em.fail("elect.sync writes a pair d|p (use _ for the one you do not need)")
    return (f"{{ bool cudasim_p; uint32_t cudasim_l = {P}elect_sync({em.site()}, {P}as<uint32_t>({em.val(mask)}), "
            f"cudasim_p); {P}put<uint32_t>({em.reg(d.first)}, cudasim_l); {P}put<bool>({em.reg(d.second)}, cudasim_p); }}")


def e_activemask(ins: Instr, em: Emit) -> str:
    Mods(ins, em).need("b32")
    nops(ins, em, 1)
    return f"{P}put<uint32_t>({em.reg(ins.operands[0])}, {P}activemask({em.site()}));"


def e_redux(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.need("sync")
    op = m.need("add", "min", "max", "and", "or", "xor")
    t = m.type({"u32", "s32", "b32"})
    m.done()
    nops(ins, em, 3)
    d, a, mask = ins.operands
    return (f"{P}put<uint32_t>({em.reg(d)}, {P}redux_sync({em.site()}, {P}Redux::{op}_, "
            f"{'true' if t == 's32' else 'false'}, {P}as<uint32_t>({em.val(a)}), {P}as<uint32_t>({em.val(mask)})));")


def e_bar(ins: Instr, em: Emit) -> str:
    # bar.sync a{, b}; barrier.sync{.aligned} a{, b}; bar.arrive a, b; bar.warp.sync mask
    m = Mods(ins, em)
    if m.take("warp"):
        m.need("sync")
        m.done()
        nops(ins, em, 1)
        return f"{P}bar_warp_sync({em.site()}, {P}as<uint32_t>({em.val(ins.operands[0])}));"
    if ins.parts[0] == "barrier" and m.take("cluster"):
        # barrier.cluster.arrive{.release, .relaxed}{.aligned}, barrier.cluster.wait{.acquire}{.aligned}
        kind = m.need("arrive", "wait")
        m.take("release", "relaxed") if kind == "arrive" else m.take("acquire")
        m.take("aligned")
        m.done()
        nops(ins, em, 0)
        return f"{P}cluster_{kind}({em.site()});"
    kind = m.need("sync", "arrive", "red")
    m.take("aligned")
    if kind == "red":
        em.fail("bar.red is not run by the simulator")
    m.done()
    nops(ins, em, 1, 2)
    count = f"{P}as<uint32_t>({em.val(ins.operands[1])})" if len(ins.operands) == 2 else "0u"
    if kind == "arrive" and len(ins.operands) != 2:
        em.fail("bar.arrive needs the thread count")
    return (f"{P}named_barrier({em.site()}, {'true' if kind == 'arrive' else 'false'}, "
            f"{P}as<uint32_t>({em.val(ins.operands[0])}), {count}, {'true' if len(ins.operands) == 2 else 'false'});")


def e_mapa(ins: Instr, em: Emit) -> str:
    # mapa{.shared::cluster}.u32/.u64 d, a, rank: a's byte in the cluster's block of that rank
    m = Mods(ins, em)
    shared = m.take("shared::cluster") is not None
    t = m.type({"u32", "u64"})
    m.done()
    nops(ins, em, 3)
    d, a, r = ins.operands
    return (f"{P}put<{CTYPE[t]}>({em.reg(d)}, {P}mapa<{CTYPE[t]}>({em.site()}, {'false' if shared else 'true'}, "
            f"{em.val(a)}, {em.val(r)}));")


def e_fence(ins: Instr, em: Emit) -> str:
    # fences order memory between threads and proxies; the simulator's threads see each other's
    # stores at once and its asynchronous copies land at their waits, so a fence changes nothing
    m = Mods(ins, em)
    if m.take("proxy"):
        kind = m.need("async", "alias", "tensormap::generic")
        if kind == "async":
            m.take("shared::cta", "shared::cluster", "global")
        elif kind == "tensormap::generic":
            m.need("release", "acquire")
            m.need("cta", "cluster", "gpu", "sys")
            if len(ins.operands) == 2:
                em.addr(ins.operands[0])
                return ";"
    elif m.take("mbarrier_init"):
        m.need("release")
        m.need("cluster")
    else:
        m.take("sc", "acq_rel")
        if m.need("cta", "cluster", "gpu", "sys") == "sys":  # the race check's model of peer memory reads it
            m.done()
            nops(ins, em, 0)
            return "::__threadfence_system();"
    m.done()
    nops(ins, em, 0)
    return ";"


def e_membar(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    scope = m.need("cta", "gl", "sys")
    m.done()
    nops(ins, em, 0)
    return "::__threadfence_system();" if scope == "sys" else ";"


def e_nanosleep(ins: Instr, em: Emit) -> str:
    Mods(ins, em).need("u32")
    nops(ins, em, 1)
    return f"{P}nanosleep({P}as<uint32_t>({em.val(ins.operands[0])}));"


def e_setmaxnreg(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.need("inc", "dec")
    m.need("sync")
    m.need("aligned")
    m.need("u32")
    m.done()
    nops(ins, em, 1)
    n = em.imm(ins.operands[0], "register count")
    return f"{P}setmaxnreg({em.site()}, {P}as<uint32_t>({em.val(ins.operands[0])}));" if n is None else \
        _setmaxnreg_const(n, em)


def _setmaxnreg_const(n: int, em: Emit) -> str:
    if not (24 <= n <= 256 and n % 8 == 0):
        em.fail(f"the register count must be a multiple of 8 from 24 to 256, got {n}")
    return f"{P}setmaxnreg({em.site()}, {n}u);"


def e_griddepcontrol(ins: Instr, em: Emit) -> str:
    # programmatic dependent launch: kernels run one after the other here, so both forms are no-ops
    m = Mods(ins, em)
    m.need("wait", "launch_dependents")
    m.done()
    nops(ins, em, 0)
    return ";"


def e_trap(ins: Instr, em: Emit) -> str:
    nops(ins, em, 0)
    return f"{P}trap({em.site()});"


# ---------------------------------------------------------------------------------------------
# tensor cores: mma.sync, ldmatrix, stmatrix

# (shape, a/b type) -> (A registers, B registers)
_MMA_REGS = {("m16n8k16", "f16"): (4, 2), ("m16n8k16", "bf16"): (4, 2), ("m16n8k8", "f16"): (2, 1),
             ("m16n8k8", "bf16"): (2, 1), ("m16n8k8", "tf32"): (4, 2), ("m16n8k4", "tf32"): (2, 1),
             ("m16n8k32", "s8"): (4, 2), ("m16n8k32", "u8"): (4, 2), ("m16n8k16", "s8"): (2, 1),
             ("m16n8k16", "u8"): (2, 1), ("m16n8k32", "e4m3"): (4, 2), ("m16n8k32", "e5m2"): (4, 2)}


def e_mma(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    m.need("sync")
    m.need("aligned")
    shape = m.need("m16n8k16", "m16n8k8", "m16n8k4", "m16n8k32", "m8n8k4", "m8n8k16", "m16n8k64", "m8n8k128",
                   "m16n8k128", "m16n8k256")
    if shape not in ("m16n8k16", "m16n8k8", "m16n8k4", "m16n8k32"):
        em.fail(f"the shape .{shape} is not run by the simulator (it runs m16n8k4, m16n8k8, m16n8k16, m16n8k32)")
    m.need("row")
    m.need("col")
    satf = m.take("satfinite") is not None
    dt = m.type({"f32", "f16", "s32"})
    at = m.type({"f16", "bf16", "tf32", "s8", "u8", "e4m3", "e5m2"})
    bt = m.type({"f16", "bf16", "tf32", "s8", "u8", "e4m3", "e5m2"})
    ct = m.type({"f32", "f16", "s32"})
    m.done()
    key = (shape, at)
    ints = at in ("s8", "u8")
    ok = key in _MMA_REGS and (bt == at or (ints and bt in ("s8", "u8")) or (at in ("e4m3", "e5m2") and bt in ("e4m3", "e5m2")))
    if ok:
        if ints:
            ok = dt == ct == "s32"
        elif at == "f16":
            ok = dt == ct and dt in ("f16", "f32")  # ptxas: D has C's type
        else:
            ok = dt == ct == "f32" or (at in ("e4m3", "e5m2") and dt in ("f16", "f32") and ct == dt)
    if not ok or (satf and not ints):
        em.fail(f"no such mma form: .{shape} .{dt}.{at}.{bt}.{ct}{' with .satfinite' if satf else ''}")
    na, nb = _MMA_REGS[key]
    nd = 2 if dt == "f16" else 4
    nc = 2 if ct == "f16" else 4
    nops(ins, em, 4)
    d = em.vec(ins.operands[0], nd, "D operand")
    a = em.vec(ins.operands[1], na, "A operand")
    b = em.vec(ins.operands[2], nb, "B operand")
    c = em.vec(ins.operands[3], nc, "C operand")
    ra = ", ".join(f"{P}as<uint32_t>({em.val(x)})" for x in a)
    rb = ", ".join(f"{P}as<uint32_t>({em.val(x)})" for x in b)
    rc = ", ".join(f"{P}as<uint32_t>({em.val(x)})" for x in c)
    outs = " ".join(f"{P}put<uint32_t>({em.reg(x)}, cudasim_d[{i}]);" for i, x in enumerate(d))
    k = int(shape.split("k")[1])
    return (f"{{ const uint32_t cudasim_ra[{na}] = {{{ra}}}; const uint32_t cudasim_rb[{nb}] = {{{rb}}}; "
            f"const uint32_t cudasim_rc[{nc}] = {{{rc}}}; uint32_t cudasim_d[{nd}]; "
            f"{P}mma_sync<{k}, {P}Ty::{dt}, {P}Ty::{at}, {P}Ty::{bt}, {P}Ty::{ct}, {'true' if satf else 'false'}>("
            f"{em.site()}, cudasim_ra, cudasim_rb, cudasim_rc, cudasim_d); {outs} }}")


def _matrix_mods(ins: Instr, em: Emit) -> tuple[int, bool, str]:
    m = Mods(ins, em)
    m.need("sync")
    m.need("aligned")
    # ptxas takes the shape, the count and .trans in any order (.m8n8.x4.trans as the ISA writes it, .x1.trans.m8n8)
    got = m.take_all({"m8n8", "x1", "x2", "x4", "trans"})
    nums = [g for g in got if g[0] == "x"]
    if got.count("m8n8") != 1 or len(nums) != 1 or got.count("trans") > 1:
        em.fail("needs .m8n8, one of .x1 .x2 .x4, and at most one .trans, after .sync.aligned; found "
                + ("".join("." + g for g in got) or "none of them"))
    num, trans = int(nums[0][1:]), "trans" in got
    space = _space(m)
    m.need("b16")
    m.done()
    if space not in ("Shared", "Generic"):
        em.fail("works on shared memory (.shared or a generic address of shared memory)")
    return num, trans, space


def e_ldmatrix(ins: Instr, em: Emit) -> str:
    num, trans, space = _matrix_mods(ins, em)
    nops(ins, em, 2)
    d = em.vec(ins.operands[0], num, "destination")
    outs = " ".join(f"{P}put<uint32_t>({em.reg(x)}, cudasim_d[{i}]);" for i, x in enumerate(d))
    return (f"{{ uint32_t cudasim_d[{num}]; {P}ldmatrix<{num}, {'true' if trans else 'false'}, {P}Space::{space}>("
            f"{em.site()}, {em.addr(ins.operands[1])}, cudasim_d); {outs} }}")


def e_stmatrix(ins: Instr, em: Emit) -> str:
    num, trans, space = _matrix_mods(ins, em)
    nops(ins, em, 2)
    s = em.vec(ins.operands[1], num, "source")
    vals = ", ".join(f"{P}as<uint32_t>({em.val(x)})" for x in s)
    return (f"{{ const uint32_t cudasim_s[{num}] = {{{vals}}}; {P}stmatrix<{num}, {'true' if trans else 'false'}, "
            f"{P}Space::{space}>({em.site()}, {em.addr(ins.operands[0])}, cudasim_s); }}")


# ---------------------------------------------------------------------------------------------
# asynchronous copies: cp.async (sm_80), cp.async.bulk and cp.async.bulk.tensor (sm_90)

def e_cp(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    if m.take("reduce"):
        return _bulk_reduce(ins, em, m)
    m.need("async")
    if m.take("bulk"):
        return _bulk(ins, em, m)
    if m.take("commit_group"):
        m.done()
        nops(ins, em, 0)
        return f"{P}cp_async_commit({em.site()});"
    if m.take("wait_group"):
        m.done()
        nops(ins, em, 1)
        return f"{P}cp_async_wait({em.site()}, {P}as<uint32_t>({em.val(ins.operands[0])}));"
    if m.take("wait_all"):
        m.done()
        nops(ins, em, 0)
        return f"{P}cp_async_wait_all({em.site()});"
    if m.take("mbarrier"):
        m.need("arrive")
        noinc = m.take("noinc") is not None
        space = _space(m)
        m.need("b64")
        m.done()
        nops(ins, em, 1)
        return f"{P}cp_async_mbarrier_arrive({em.site()}, {P}Space::{space}, {em.addr(ins.operands[0])}, {'true' if noinc else 'false'});"
    level = m.need("ca", "cg")
    m.need("shared", "shared::cta")
    m.need("global")
    m.take_all({"L2::cache_hint", "L2::64B", "L2::128B", "L2::256B", "L1::no_allocate"})
    m.done()
    nops(ins, em, 3, 4, 5)
    dst, src, size = ins.operands[:3]
    n = em.imm(size, "copy size (cp-size)")
    if n is not None and n not in (4, 8, 16):
        em.fail(f"cp-size must be 4, 8 or 16, got {n}")
    if level == "cg" and n is not None and n != 16:
        em.fail(f"cp.async.cg copies 16 bytes, got cp-size {n}")
    src_size = "-1ll"
    ignore = "false"
    if len(ins.operands) >= 4:
        x = ins.operands[3]
        if isinstance(x, Reg) and x.kind == "name" and em.lookup(x)[1] == ".pred":
            ignore = f"{P}pred({em.val(x)})"
        else:
            src_size = f"static_cast<long long>({P}as<uint32_t>({em.val(x)}))"
    return (f"{P}cp_async({em.site()}, {'true' if level == 'cg' else 'false'}, {em.addr(dst)}, {em.addr(src)}, "
            f"{P}as<uint32_t>({em.val(size)}), {src_size}, {ignore});")


def _bulk(ins: Instr, em: Emit, m: Mods) -> str:
    if m.take("commit_group"):
        m.done()
        nops(ins, em, 0)
        return f"{P}bulk_commit({em.site()});"
    if m.take("wait_group"):
        read = m.take("read") is not None
        m.done()
        nops(ins, em, 1)
        return f"{P}bulk_wait({em.site()}, {P}as<uint32_t>({em.val(ins.operands[0])}), {'true' if read else 'false'});"
    if m.take("prefetch"):
        return ";"
    tensor = m.take("tensor")
    dims = 0
    if tensor:
        d = m.need("1d", "2d", "3d", "4d", "5d")
        dims = int(d[0])
    dst = m.need("shared::cluster", "shared::cta", "global")
    src = m.need("global", "shared::cta")
    if tensor:
        mode = m.take("tile", "im2col", "im2col::w", "im2col::w::128", "tile::gather4", "tile::scatter4")
        if mode not in (None, "tile"):
            em.fail(f"the .{mode} mode is not run by the simulator (it runs .tile)")
    load = dst != "global"
    if load:
        if src != "global":
            em.fail("copies from shared memory to another block's shared memory need clusters, which the "
                    "simulator does not run")
        m.need("mbarrier::complete_tx::bytes")
        multicast = m.take("multicast::cluster") is not None
        m.take("cta_group::1")
    else:
        if src != "shared::cta":
            em.fail("a bulk copy to global memory reads .shared::cta")
        m.need("bulk_group")
    m.take_all({"L2::cache_hint", "cp_mask"})
    m.done()
    site = em.site()
    if load and multicast:  # the operand after the barrier is ctaMask, the blocks of the cluster that receive it
        k = 3 if tensor else 4
        nops(ins, em, k + 1, k + 2)
        mask = f"{P}as<uint16_t>({em.val(ins.operands[k])})"
        if tensor:
            dst_m, t, bar = ins.operands[:3]
            tm, coords = _tensor_operand(t, dims, em)
            return (f"{{ const int32_t cudasim_c[{dims}] = {{{coords}}}; {P}tma_load_multicast({site}, {dims}, "
                    f"{em.addr(dst_m)}, {tm}, cudasim_c, {em.addr(bar)}, {mask}); }}")
        d, s_, size, bar = ins.operands[:4]
        return (f"{P}bulk_load_multicast({site}, {em.addr(d)}, {em.addr(s_)}, {P}as<uint32_t>({em.val(size)}), "
                f"{em.addr(bar)}, {mask});")
    if tensor:
        if load:
            nops(ins, em, 3, 4)
            dst_m, t, bar = ins.operands[:3]
            tm, coords = _tensor_operand(t, dims, em)
            return (f"{{ const int32_t cudasim_c[{dims}] = {{{coords}}}; {P}tma_load({site}, {dims}, {em.addr(dst_m)}, "
                    f"{tm}, cudasim_c, {em.addr(bar)}); }}")
        nops(ins, em, 2, 3)
        t, src_m = ins.operands[:2]
        tm, coords = _tensor_operand(t, dims, em)
        return f"{{ const int32_t cudasim_c[{dims}] = {{{coords}}}; {P}tma_store({site}, {dims}, {tm}, cudasim_c, {em.addr(src_m)}); }}"
    if load:
        nops(ins, em, 4, 5)
        d, s, size, bar = ins.operands[:4]
        return (f"{P}bulk_load({site}, {em.addr(d)}, {em.addr(s)}, {P}as<uint32_t>({em.val(size)}), {em.addr(bar)});")
    nops(ins, em, 3, 4)
    d, s, size = ins.operands[:3]
    return f"{P}bulk_store({site}, {em.addr(d)}, {em.addr(s)}, {P}as<uint32_t>({em.val(size)}));"


# a bulk reduction's operations and the 32- and 64-bit types it runs them on: atom's but the exchanges
REDUCE_TYPES = {op: types for op, types in ATOM_TYPES.items() if op not in ("exch", "cas")}


def _bulk_reduce(ins: Instr, em: Emit, m: Mods) -> str:
    # cp.reduce.async.bulk.global.shared::cta.bulk_group{.L2::cache_hint}.op.type [dst], [src], size{, policy}
    m.need("async")
    m.need("bulk")
    if m.take("tensor"):
        return _tensor_reduce(ins, em, m)
    if m.need("global", "shared::cluster") != "global":
        em.fail("a bulk reduction into another block's shared memory needs clusters' mbarriers, which the simulator "
                "does not run for reductions: it runs cp.reduce.async.bulk.global.shared::cta.bulk_group")
    m.need("shared::cta")
    m.need("bulk_group")
    hint = m.take("L2::cache_hint") is not None
    op = m.need(*REDUCE_TYPES)
    noftz = m.take("noftz") is not None
    if noftz and op != "add":
        em.fail(f".noftz is a form of .add (on .f16 and .bf16), not of .{op}")
    # 16-bit floats: .add.noftz, .min and .max (.add without .noftz is not a form of them)
    halves = {"add": {"f16", "bf16"} if noftz else set(), "min": {"f16", "bf16"}, "max": {"f16", "bf16"}}.get(op, set())
    t = m.type(halves if noftz else set(REDUCE_TYPES[op]) | halves)
    m.done()
    nops(ins, em, 3 + hint)
    d, s, size = ins.operands[:3]
    where = f"({em.site()}, {em.addr(d)}, {em.addr(s)}, {P}as<uint32_t>({em.val(size)}));"
    if t in ("f16", "bf16"):
        return f"{P}bulk_reduce_halves<{P}AtomOp::{op.capitalize()}, {'true' if t == 'bf16' else 'false'}>" + where
    return f"{P}bulk_reduce<{P}AtomOp::{op.capitalize()}, {REDUCE_TYPES[op][t]}>" + where


def _tensor_reduce(ins: Instr, em: Emit, m: Mods) -> str:
    # cp.reduce.async.bulk.tensor.Nd.global.shared::cta.op{.tile}.bulk_group{.L2::cache_hint} [map, {c}], [src]{, policy}
    # (the element type is the tensor map's: the simulator checks the pair when it runs)
    dims = int(m.need("1d", "2d", "3d", "4d", "5d")[0])
    m.need("global")
    m.need("shared::cta")
    op = m.need("add", "min", "max", "inc", "dec", "and", "or", "xor")
    mode = m.take("tile", "im2col_no_offs")
    if mode not in (None, "tile"):
        em.fail(f"the .{mode} mode is not run by the simulator (it runs .tile)")
    m.need("bulk_group")
    hint = m.take("L2::cache_hint") is not None
    m.done()
    nops(ins, em, 2 + hint)
    t, src = ins.operands[:2]
    tm, coords = _tensor_operand(t, dims, em)
    return (f"{{ const int32_t cudasim_c[{dims}] = {{{coords}}}; {P}tma_reduce({em.site()}, {dims}, {tm}, cudasim_c, "
            f"{em.addr(src)}, {P}AtomOp::{op.capitalize()}); }}")


def _tensor_operand(t, dims: int, em: Emit) -> tuple[str, str]:
    if not isinstance(t, Mem) or t.coords is None or t.offset:
        em.fail("the tensor operand is [tensorMap, {c0, c1, ...}]")
    if len(t.coords) != dims:
        em.fail(f"a {dims}d copy takes {dims} coordinates, got {len(t.coords)}")
    coords = ", ".join(f"static_cast<int32_t>({P}as<uint32_t>({em.val(c)}))" for c in t.coords)
    return f"{P}addr({em.val(t.base)}, 0ll)", coords


# ---------------------------------------------------------------------------------------------
# mbarrier

def e_mbarrier(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    op = m.need("init", "inval", "arrive", "arrive_drop", "expect_tx", "complete_tx", "test_wait", "try_wait",
                "pending_count")
    if op == "pending_count":
        em.fail("mbarrier.pending_count is not run by the simulator")
    variant = None
    if op in ("arrive", "arrive_drop"):
        variant = m.take("expect_tx", "noComplete")
    parity = op in ("test_wait", "try_wait") and m.take("parity") is not None
    m.take("release", "acquire", "relaxed")
    m.take("cta", "cluster")
    space = _space(m)
    m.need("b64")
    m.done()
    site = em.site()
    if space == "SharedCluster" and op not in ("arrive", "expect_tx", "complete_tx"):
        space = "Shared"
    if op == "init":
        nops(ins, em, 2)
        return f"{P}mbar_init({site}, {P}Space::{space}, {em.addr(ins.operands[0])}, {P}as<uint32_t>({em.val(ins.operands[1])}));"
    if op == "inval":
        nops(ins, em, 1)
        return f"{P}mbar_inval({site}, {P}Space::{space}, {em.addr(ins.operands[0])});"
    if op in ("expect_tx", "complete_tx"):
        nops(ins, em, 2)
        return (f"{P}mbar_{op}({site}, {P}Space::{space}, {em.addr(ins.operands[0])}, "
                f"{P}as<uint32_t>({em.val(ins.operands[1])}));")
    if op in ("arrive", "arrive_drop"):
        nops(ins, em, 2, 3)
        state = ins.operands[0]
        count = f"{P}as<uint32_t>({em.val(ins.operands[2])})" if len(ins.operands) == 3 else "1u"
        tx = "0u"
        if variant == "expect_tx":
            if len(ins.operands) != 3:
                em.fail("mbarrier.arrive.expect_tx takes state, [addr], txCount")
            tx, count = count, "1u"
        elif variant == "noComplete" and len(ins.operands) != 3:
            em.fail("mbarrier.arrive.noComplete takes a count")
        out = em.reg(state)
        return (f"{P}put<uint64_t>({out}, {P}mbar_arrive({site}, {P}Space::{space}, {em.addr(ins.operands[1])}, "
                f"{count}, {tx}, {'true' if op == 'arrive_drop' else 'false'}, {'true' if variant == 'noComplete' else 'false'}));")
    nops(ins, em, 3, 4)
    done, a, st = ins.operands[:3]
    arg = f"{P}as<uint32_t>({em.val(st)})" if parity else f"{P}as<uint64_t>({em.val(st)})"
    return (f"{P}put<bool>({em.reg(done)}, {P}mbar_wait({site}, {P}Space::{space}, {em.addr(a)}, {'true' if parity else 'false'}, "
            f"static_cast<uint64_t>({arg}), {'true' if op == 'try_wait' else 'false'}));")


# ---------------------------------------------------------------------------------------------
# wgmma

def e_wgmma(ins: Instr, em: Emit) -> str:
    m = Mods(ins, em)
    op = m.need("fence", "commit_group", "wait_group", "mma_async")
    if op != "mma_async":
        m.need("sync")
        m.need("aligned")
        m.done()
        if op == "wait_group":
            nops(ins, em, 1)
            em.imm(ins.operands[0], "group count")
            return f"{P}wgmma_wait({em.site()}, {P}as<uint32_t>({em.val(ins.operands[0])}));"
        nops(ins, em, 0)
        return f"{P}wgmma_{'fence' if op == 'fence' else 'commit'}({em.site()});"
    if m.take("sp"):
        em.fail("sparse wgmma (.sp) is not run by the simulator")
    m.need("sync")
    m.need("aligned")
    shape = m.rest.pop(0) if m.rest else ""
    sm = re.fullmatch(r"m64n(\d+)k(\d+)", shape)
    if not sm:
        em.fail(f"expected a shape m64nNkK, found .{shape}")
    n, k = int(sm.group(1)), int(sm.group(2))
    dt = m.type({"f32", "f16", "s32"})
    at = m.type({"f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8"})
    bt = m.type({"f16", "bf16", "tf32", "e4m3", "e5m2", "s8", "u8"})
    satf = m.take("satfinite") is not None
    m.done()
    want_k = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}[at]
    fp8 = at in ("e4m3", "e5m2")
    if not ((at in ("f16", "bf16") and bt == at) or (fp8 and bt in ("e4m3", "e5m2"))):
        em.fail(f"the simulator runs wgmma on .f16 and .bf16 inputs (A and B of one type) and on the 8-bit floats "
                f".e4m3 and .e5m2; got .{at}.{bt}")
    if k != want_k or not (8 <= n <= 256 and n % 8 == 0):
        em.fail(f"no such shape for .{at}: .{shape} (m64nNk{want_k} with N a multiple of 8 from 8 to 256)")
    if (at == "bf16" and dt != "f32") or satf:
        em.fail(f"no such wgmma form: .{dt}.{at}.{bt}{'.satfinite' if satf else ''}")
    a_regs = isinstance(ins.operands[1], Vec) if len(ins.operands) > 1 else False
    if fp8 and a_regs:
        em.fail(f"wgmma .{at}.{bt} with A in registers is not run by the simulator: pass A by a matrix descriptor")
    # the 8-bit forms have no transpose immediates (both operands are K-major)
    nops(ins, em, 6 if fp8 else 7 if a_regs else 8)
    nd = n // 2 if dt == "f32" else n // 4
    d = em.vec(ins.operands[0], nd, "accumulator (D)")
    accs = []
    for x in d:
        if not (isinstance(x, Reg) and x.kind == "op" and em.stmt.operands[x.index].mode):
            em.fail("the accumulators (D) must be asm output operands such as \"+f\"(d[0]) on the simulator: "
                    "their values arrive at wgmma.wait_group, in the variables they name")
        accs.append(f"{P}acc(cudasim_a{x.index}, cudasim_o{x.index})")
    if a_regs:
        a = em.vec(ins.operands[1], 4, "A fragment")
        a_expr = "{" + ", ".join(f"{P}as<uint32_t>({em.val(x)})" for x in a) + "}"
        bdesc, scale_d, sa, sb, tb = ins.operands[2:7]
        ta = Imm("0")
        adesc = "0ull"
    else:
        a_expr = "{0u, 0u, 0u, 0u}"
        if fp8:
            adesc_op, bdesc, scale_d, sa, sb = ins.operands[1:6]
            ta = tb = Imm("0")
        else:
            adesc_op, bdesc, scale_d, sa, sb, ta, tb = ins.operands[1:8]
        adesc = f"{P}as<uint64_t>({em.val(adesc_op)})"
    imms = []
    for x, what, allowed in ((sa, "imm-scale-a", (1, -1)), (sb, "imm-scale-b", (1, -1)), (ta, "imm-trans-a", (0, 1)),
                             (tb, "imm-trans-b", (0, 1))):
        v = em.imm(x, what)
        if v is not None and v not in allowed:
            em.fail(f"{what} must be {' or '.join(map(str, allowed))}, got {v}")
        imms.append(f"static_cast<int>({P}as<int32_t>({em.val(x)}))")
    if isinstance(scale_d, Reg) and scale_d.kind == "name" and em.lookup(scale_d)[1] == ".pred":
        sd = f"{P}pred({em.val(scale_d)})"
    else:
        em.imm(scale_d, "scale-d (a predicate or an immediate)")
        sd = f"({P}as<int32_t>({em.val(scale_d)}) != 0)"
    return (f"{{ {P}Acc cudasim_acc[{nd}] = {{{', '.join(accs)}}}; const uint32_t cudasim_ra[4] = {a_expr}; "
            f"{P}wgmma_mma({em.site()}, {n}, {P}Ty::{dt}, {P}Ty::{at}, {P}Ty::{bt}, {'true' if a_regs else 'false'}, "
            f"cudasim_acc, "
            f"cudasim_ra, {adesc}, {P}as<uint64_t>({em.val(bdesc)}), {sd}, {', '.join(imms)}); }}")


EMITTERS = {
    "mov": e_mov, "cvta": e_cvta, "ld": e_ld, "st": e_st, "atom": e_atom, "red": e_atom, "prefetch": e_prefetch,
    "prefetchu": e_prefetch,
    "createpolicy": e_createpolicy,
    "add": _binary("add", _INT | FLOAT_TYPES), "sub": _binary("sub", _INT | FLOAT_TYPES),
    "mul": _binary("mul", _INT | FLOAT_TYPES), "mad": _binary("mad", _INT | FLOAT_TYPES),
    "fma": _binary("fma", FLOAT_TYPES), "div": _binary("div", _INT | FLOAT_TYPES), "rem": _binary("rem", _INT),
    "min": _binary("min", _INT | FLOAT_TYPES), "max": _binary("max", _INT | FLOAT_TYPES),
    "neg": _binary("neg", {"s16", "s32", "s64"} | FLOAT_TYPES), "abs": _binary("abs", {"s16", "s32", "s64"} | FLOAT_TYPES),
    "and": _binary("and", _BITS), "or": _binary("or", _BITS), "xor": _binary("xor", _BITS),
    "not": _binary("not", _BITS), "shl": _binary("shl", {"b16", "b32", "b64"}),
    "shr": _binary("shr", {"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"}),
    "popc": _binary("popc", {"b32", "b64"}), "clz": _binary("clz", {"b32", "b64"}),
    "brev": _binary("brev", {"b32", "b64"}), "rcp": _binary("rcp", FLOAT_TYPES),
    "sqrt": _binary("sqrt", FLOAT_TYPES), "rsqrt": _binary("rsqrt", FLOAT_TYPES), "ex2": _binary("ex2", {"f32"}),
    "lg2": _binary("lg2", {"f32"}), "tanh": _binary("tanh", {"f32"}), "sin": _binary("sin", {"f32"}),
    "cos": _binary("cos", {"f32"}),
    "setp": e_setp, "selp": e_selp, "shf": e_shf, "prmt": e_prmt, "lop3": e_lop3, "bfe": e_bfe, "bfi": e_bfi,
    "cvt": e_cvt,
    "shfl": e_shfl, "vote": e_vote, "elect": e_elect, "activemask": e_activemask, "redux": e_redux,
    "bar": e_bar, "barrier": e_bar, "fence": e_fence, "membar": e_membar, "nanosleep": e_nanosleep,
    "setmaxnreg": e_setmaxnreg, "griddepcontrol": e_griddepcontrol, "trap": e_trap,
    "mma": e_mma, "ldmatrix": e_ldmatrix, "stmatrix": e_stmatrix,
    "cp": e_cp, "mbarrier": e_mbarrier, "wgmma": e_wgmma, "mapa": e_mapa,
}
