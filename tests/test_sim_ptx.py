"""Inline PTX runs on the simulator: the asm statement parser, every instruction of the set against
the PTX ISA's definitions (tests/ptx_cases.py) and, where tests/ptx_vectors/ holds them, against the
answers of an H100; complete kernels on every backend; misuse reported with the learner's line.

The kernels are in tests/sim_kernels/ptx_*.cu (valid CUDA for nvcc; the Hopper ones for sm_90a).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import time
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.build import BuildError
from kernels.check import sim_order
from kernels.dev.compile_check import needs_line
from kernels.sim import knobs
from kernels.sim.instrumented import compiler_problem
from kernels.sim.racecheck import checked
from kernels.sim.translate import TranslateError, translate_source
from planting import plant
from ptx_cases import (INTERLEAVE_VECTORS, VECTORS, Case, all_cases, args_digest, reference, tma_buffer, tma_params,
                       vector_file)

# The simulator's reach beyond the lessons (public CUDA, inline PTX): `make test-toolkit` (kernels/dev/all_tests.py).
pytestmark = pytest.mark.toolkit

HERE = Path(__file__).parent / "sim_kernels"
OPS = HERE / "ptx_ops.cu"
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])
sim_only = pytest.mark.sim_only
CASES = all_cases()


def _line_of(marker: str, path: Path) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker} not in {path.name}")


def _wrap(body: str) -> str:
    return "__global__ void k(unsigned* o, float* f) {\n" + body + "\n}\n"


def _translate(body: str) -> str:
    return translate_source(_wrap(body), "t.cu")


# ---------------------------------------------------------------------------------------------
# the translator: reading asm statements (no build)
def test_asm_becomes_calls_of_the_simulator_and_keeps_the_line_count():
    body = ('unsigned lane;\n  asm volatile(\n    "mov.u32 %0, %%laneid;"\n    : "=r"(lane));\n  o[lane] = 1;')
    out = _translate(body)
    code = out.split('#line 1 "t.cu"\n')[1]
    assert "asm" not in code and "sr_laneid()" in code
    assert code.count("\n") == _wrap(body).count("\n") and code.split("\n")[-3] == "  o[lane] = 1;"
    assert "#include <cudasim_ptx.h>" in out


def test_a_special_register_written_with_one_percent_is_read_as_with_two():
    # published kernels write %laneid and %clusterid.x with one '%': nvcc passes a '%' before a letter on as written
    one = ('unsigned a, b, c;\n  asm volatile("mov.u32 %0, %laneid;\\n mov.u32 %1, %clusterid.x;\\n'
           ' mov.u32 %2, %cluster_ctarank;" : "=r"(a), "=r"(b), "=r"(c));\n  o[a] = b + c;')
    out = _translate(one)
    assert "sr_laneid()" in out and "sr_clusterid_x()" in out and "sr_cluster_ctarank()" in out
    assert out == _translate(one.replace("%l", "%%l").replace("%c", "%%c"))


@pytest.mark.parametrize("template", ["add.u32 %0, %0, %_x;", "add.u32 %0, %0, 1; %", "mov.u32 %0, % laneid;"])
def test_a_stray_percent_in_an_asm_with_operands_is_still_refused(template):
    with pytest.raises(TranslateError, match=r"t\.cu:2: '%.?' in an asm template: the simulator knows %0, %1"):
        _translate(f'  asm volatile("{template}" : "+r"(o[0]));')


def test_files_without_asm_do_not_include_the_ptx_header():
    assert "cudasim_ptx.h" not in translate_source("__global__ void k() {}\n", "t.cu")
    assert "cudasim_ptx.h" in translate_source("size_t a = __cvta_generic_to_shared(p);\n", "t.cu")


@pytest.mark.parametrize("code, ptx, checks", [
    ('asm volatile("" : "+r"(o[0]));', False,         # a value held in a register (helpers.cuh's keep_packed)
     ["::cudasim::asm_operand_inout<'r'>(o[0]);"]),
    ('asm volatile("" ::: "memory");', False, []),  # a compiler barrier
    ('asm volatile("" :: "l"(o), "n"(4));', False,
     ["::cudasim::asm_operand_in<'l'>(o);", "std::integral_constant<long long, static_cast<long long>(4)>::value"]),
    ('asm volatile("" : "=r"(o[0]));', True, []),   # an output with no instruction: poisoned, as a GPU leaves it
    ('asm volatile("" : "+r"(o[0]));\n  asm volatile("mov.u32 %0, 1;" : "=r"(o[1]));', True, []),
])
def test_an_asm_without_instructions_needs_no_ptx_header(code, ptx, checks):
    """An empty template with no output to poison becomes nvcc's checks of its operands and nothing else: the file
    (every lesson's, through helpers.cuh) compiles without cudasim_ptx.h, about two seconds of each build."""
    out = _translate("  " + code)
    assert ("#include <cudasim_ptx.h>" in out) == ptx
    code_part = out.split('#line 1 "t.cu"\n')[1]
    assert not re.search(r"\basm\b", code_part)
    for check in checks:
        assert check in code_part


@pytest.mark.parametrize("statement, message", [
    ('asm volatile("" : "+r"(d));', "type/size does not match"),  # a double in a 4-byte integer register
    ('asm volatile("" : "+r"(c));', "modifiable lvalue"),         # read and written: not a constant
    ('asm volatile("" :: "h"(u));', "type/size does not match"),  # a 4-byte integer in a 2-byte register
    ('asm volatile("" :: "n"(u));', "constant"),                  # an immediate must be a constant expression
])
def test_an_asm_without_instructions_still_gets_nvccs_operand_checks(tmp_path, statement, message):
    src = tmp_path / "empty_asm.cu"
    src.write_text("#include <cstdint>\n__global__ void k(double d, unsigned u) {\n  const unsigned c = 1;\n"
                   f"  {statement}\n}}\nvoid run() {{ k<<<1, 1>>>(1.0, 2u); }}\n")
    with pytest.raises(BuildError, match=message):
        load(src, "sim", quiet=True)


@pytest.mark.parametrize("code, message", [
    ('asm("brkpt;");', r"t\.cu:2: brkpt: the simulator does not run the PTX instruction 'brkpt'"),
    ('asm volatile("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0}, {%1}, {%2}, {%3};" :: "r"(0), "r"(1), "r"(2), "r"(3));',
     r"t\.cu:2: mma\.sync.*: the shape \.m8n8k4 is not run by the simulator"),
    ('asm("ld.shared.v4.f32 {%0, %1}, [%2];" : "=f"(f[0]), "=f"(f[1]) : "r"(0));',
     r"t\.cu:2: ld\.shared\.v4\.f32: the destination must be 4 register\(s\) in braces, got 2"),
    ('asm("add.u32 %0, %1, %2;" : "=r"(o[0]) : "r"(1), "q"(2));', r"t\.cu:2: the asm constraint \"q\""),
    ('asm("add.u32 %0, %1, %3;" : "=r"(o[0]) : "r"(1), "r"(2));', r"t\.cu:2: the asm template names operand %3"),
    ('asm(TEMPLATE : "=r"(o[0]));', r"t\.cu:2: the simulator reads an asm template made of string literals"),
    ('asm("{\\n .reg .pred p;\\n bra DONE;\\n}" ::);', r"t\.cu:2: bra: the label 'DONE' is not in this asm"),
    ('asm("setmaxnreg.inc.sync.aligned.u32 250;");', r"t\.cu:2: setmaxnreg.*multiple of 8 from 24 to 256, got 250"),
    ('asm("cp.async.cg.shared.global [%0], [%1], 8;" :: "r"(0), "l"(o));', r"cp\.async\.cg copies 16 bytes, got cp-size 8"),
    ('asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, 1, 1, 1;"'
     ' : "+f"(f[0]), "+f"(f[1]), "+f"(f[2]), "+f"(f[3]) : "r"(1), "r"(2), "r"(3), "r"(4), "l"(o));',
     r"t\.cu:2: wgmma.*e4m3\.e4m3 with A in registers is not run by the simulator"),
    ('asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, 1, 1, 1;"'
     ' : "+f"(f[0]), "+f"(f[1]), "+f"(f[2]), "+f"(f[3]) : "l"(o), "l"(o));',
     r"no such shape for \.e4m3: \.m64n8k16 \(m64nNk32"),
    ('asm volatile("atom.global.add.noftz.f16 %0, [%1], %2;" : "=h"(h) : "l"(o), "h"(h));',
     r"atom and red on one value \(no \.f16"),
    ('asm volatile("red.acquire.gpu.global.add.u32 [%0], 1;" :: "l"(o));', r"red has no \.acquire form"),
    ('asm volatile("atom.global.add.s64 %0, [%1], 1;" : "=l"(l) : "l"(o));',  # ptxas refuses it too
     r"runs this instruction on \.f32, \.f64, \.s32, \.u32, \.u64; found \.s64"),
    ('asm volatile("ld.acquire.global.u32 %0, [%1];" : "=r"(o[0]) : "l"(o));', r"ld\.acquire needs a scope"),
    ('asm volatile("ld.release.gpu.global.u32 %0, [%1];" : "=r"(o[0]) : "l"(o));', r"ld has no \.release form"),
    ('asm volatile("red.global.exch.b32 [%0], 1;" :: "l"(o));', r"red has no \.exch"),
    ('asm volatile("ld.acquire.gpu.global.v2.u32 {%0, %1}, [%2];" : "=r"(o[0]), "=r"(o[1]) : "l"(o));',
     r"\.acquire loads and stores on one 32- or 64-bit value"),
    ('asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.im2col_no_offs.bulk_group [%0, {%1, %1}], '
     '[%1];" :: "l"(o), "r"(0));', r"the \.im2col_no_offs mode is not run by the simulator \(it runs \.tile\)"),
    ('asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.min.noftz.bf16 [%0], [%1], 16;" :: "l"(o), "r"(0));',
     r"\.noftz is a form of \.add \(on \.f16 and \.bf16\), not of \.min"),
    ('asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.min.f32 [%0], [%1], 16;" :: "l"(o), "r"(0));',
     r"runs this instruction on \.bf16, \.f16, \.s32, \.s64, \.u32, \.u64; found \.f32"),
    ('asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f16 [%0], [%1], 16;" :: "l"(o), "r"(0));',
     r"runs this instruction on \.f32, \.f64, \.s32, \.u32, \.u64; found \.f16"),  # 16-bit adds are .add.noftz
])
def test_an_instruction_or_form_outside_the_set_is_refused_naming_the_line(code, message):
    with pytest.raises(TranslateError, match=message):
        _translate("  " + code)


def test_the_error_names_the_line_of_the_instruction_inside_a_multi_line_template():
    body = 'asm volatile(\n  "mov.u32 %0, 1;\\n"\n  "frobnicate.b32 %0, %0;\\n"\n  : "=r"(o[0]));'
    with pytest.raises(TranslateError, match=r"t\.cu:4: frobnicate\.b32: the simulator does not run"):
        _translate(body)


@pytest.mark.parametrize("code", [
    '#if defined(__CUDA_ARCH__)\nasm("brkpt;");\n#else\nint fallback;\n#endif',
    '#ifndef CUDASIM\nasm volatile("tex.2d.v4.f32.f32 {%0, %1, %2, %3}, [t, {%4, %5}];" : "=f"(a) : "f"(b));\n#endif',
])
def test_unsupported_asm_that_the_preprocessor_hides_from_the_simulator_is_left_alone(code):
    assert "asm" in translate_source(code, "t.cu")


def test_asm_in_comments_strings_and_names_is_not_touched():
    src = '// asm("mma.sync")\nconst char* s = "asm(";\nint asm_count(int); int y = asm_count(1);\n'
    assert translate_source(src, "t.cu").endswith(src)


def test_asm_in_a_macro_keeps_the_macro_continued():
    src = ('#define LOAD(x, a) \\\n  asm volatile("ld.shared.u32 %0, [%1];" \\\n               : "=r"(x) : "r"(a))\n'
           '__global__ void k(unsigned* o) { unsigned l; LOAD(l, 0u); o[l] = l; }\n')
    out = translate_source(src, "t.cu").split('#line 1 "t.cu"\n')[1]
    lines = out.split("\n")
    # the parameters renamed (the translation's own names cannot collide with them), the body still continued
    assert lines[0].startswith("#define LOAD(cudasim_arg_x, cudasim_arg_a) \\") and lines[1].rstrip().endswith("\\")
    assert "(cudasim_arg_a)" in out and "(cudasim_arg_x)" in out
    assert "__LINE__" in lines[1] and len(lines) == len(src.split("\n"))


def test_operand_forms_named_operands_vectors_and_predicates():
    out = _translate('  asm volatile("{ .reg .pred p; setp.ne.b32 p, %[x], 0; @!p mov.u32 %[y], 7; }" '
                     ': [y] "+r"(o[0]) : [x] "r"(o[1]));')
    assert "cmp_ne<uint32_t>" in out and "if (!::cudasim::ptx::pred(" in out


# ---------------------------------------------------------------------------------------------
# single instructions: the PTX ISA's answer, and the H100's where recorded
@pytest.fixture(scope="module")
def ops():
    return load(OPS, "sim")


@pytest.fixture(scope="module")
def hopper():
    return load(HERE / "ptx_hopper.cu", "sim")


_GPU: dict[str, dict] = {}


def _gpu_answer(stem: str, name: str):
    """The H100's recorded answer for a case, or None when tests/ptx_vectors/ does not hold it."""
    if stem not in _GPU:
        path = VECTORS / f"{stem}.pt"
        _GPU[stem] = torch.load(path, weights_only=False) if path.exists() else {}
    return _GPU[stem].get(name)


def _same(got, want, case, what: str):
    if isinstance(want, int):
        assert got == want, f"{what}: got {got}, want {want}"
        return
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    for g, w in zip(got, want):
        if case.exact or g.dtype != torch.int32:
            assert torch.equal(g, w), f"{what}: first differences at {_diffs(g, w)}"
        else:  # int32 holding float bits: compare as floats
            torch.testing.assert_close(g.view(torch.float32), w.view(torch.float32), rtol=case.rtol, atol=case.atol,
                                       equal_nan=True, msg=lambda m: f"{what}: {m}")


def _diffs(g: torch.Tensor, w: torch.Tensor) -> str:
    idx = (g.reshape(-1) != w.reshape(-1)).nonzero().flatten()[:5].tolist()
    return ", ".join(f"[{i}] got {g.reshape(-1)[i].item():#x} want {w.reshape(-1)[i].item():#x}" for i in idx)


@pytest.mark.parametrize("name", list(CASES))
def test_instruction_matches_the_ptx_isa_and_the_h100(request, name):
    case = CASES[name]
    ext = request.getfixturevalue("ops" if case.file == "ptx_ops.cu" else "hopper")
    recorded = _gpu_answer(vector_file(case), name)
    if recorded is not None:
        assert recorded["digest"] == args_digest(case.args), "the recorded answer is for other inputs: record again"
    if case.faults:  # the GPU stops the kernel: so must the simulator, with an error that says why
        with pytest.raises(RuntimeError, match=case.faults):
            getattr(ext, case.op)(*case.args)
        if recorded is not None:
            assert "error" in recorded, f"the H100 ran it: {recorded.get('out')}"
        return
    if case.sim_refuses:  # the GPU runs it, doing what the simulator will not (writing past the tensor, say):
        with pytest.raises(RuntimeError, match=case.sim_refuses):  # an error that says so, and the reference
            getattr(ext, case.op)(*case.args)                        # agrees with what the GPU did
        if recorded is not None:
            assert "error" not in recorded, recorded.get("error")
            _same(reference(name, case), recorded["out"], case, "the PTX ISA (the H100's rule) vs the H100")
        return
    got = getattr(ext, case.op)(*case.args)
    _same(got, reference(name, case), case, "simulator vs the PTX ISA")
    if recorded is not None:
        assert "error" not in recorded, recorded.get("error")
        # where the H100 is less exact than the PTX ISA's answer (an fp8 wgmma's sums), the case says by how much
        at_gpu = dataclasses.replace(case, atol=case.notes.get("gpu_atol", case.atol))
        want = recorded["out"]
        unknown = case.notes.get("h100_unknown")
        if unknown is not None:  # bytes a store took from shared memory the kernel never wrote: the H100's leftovers
            assert torch.equal(got[1][unknown], torch.full_like(got[1][unknown], 0xFF))  # the simulator's poison
            got, want = [got[0], got[1][~unknown]], [want[0], want[1][~unknown]]
        _same(got, want, at_gpu, "simulator vs the H100")


@pytest.mark.parametrize("stem", [INTERLEAVE_VECTORS])
def test_the_h100_vectors_of_newer_cases_are_recorded(stem):
    """Vector files added after the first recording hold the answers to exactly their cases' inputs."""
    path = VECTORS / f"{stem}.pt"
    if not path.exists():
        pytest.skip(f"the H100's vectors for {stem} are not recorded yet: on an H100, TORCH_CUDA_ARCH_LIST=9.0a "
                    f"python tests/ptx_cases.py --out tests/ptx_vectors --files {stem}")
    recorded = torch.load(path, weights_only=False)
    mine = {n: c for n, c in CASES.items() if vector_file(c) == stem}
    assert sorted(recorded) == sorted(mine), "the recording is for other cases: record again"
    stale = [n for n, c in mine.items() if recorded[n]["digest"] != args_digest(c.args)]
    assert not stale, f"recorded for other inputs: {stale[:3]}"


@sim_only
@pytest.mark.parametrize("name, message", [
    ("interleave_16B_rank_2", r"an interleaved layout .* needs a rank of 3 to 5, got 2"),
    ("interleave_unknown_mode_3", r"unknown interleave 3"),
    ("interleave_32B_address_16_past_32", r"globalAddress must be 32-byte aligned with CU_TENSOR_MAP_INTERLEAVE_32B"),
    ("interleave_32B_stride_48", r"globalStrides\[0\] must be a multiple of 32 bytes .*INTERLEAVE_32B, got 48"),
    ("interleave_16B_box_inner_8_bytes_valid", r"boxDim\[0\] \* the element size must be a multiple of 16 bytes, got 8"),
])
def test_a_refused_interleaved_map_says_why_on_stderr(hopper, capfd, name, message):
    case = CASES[f"tma_encode_{name}"]
    assert hopper.tma_encode_status(*case.args) == 1  # CUDA_ERROR_INVALID_VALUE
    err = capfd.readouterr().err
    assert re.search(r"cuTensorMapEncodeTiled refused the tensor map \(CUDA_ERROR_INVALID_VALUE\): " + message, err), err


@sim_only
def test_an_interleaved_32B_box_whose_acceptance_is_not_recorded_is_not_simulated(hopper):
    p = tma_params(7, [12, 6, 5], [64, 384], [4, 4, 4], None, 1, 0, 2)  # 16 bytes of f32 with the 32B interleave
    with pytest.raises(RuntimeError, match=r"INTERLEAVE_32B with boxDim\[0\] \* the element size = 16 bytes.*"
                                           r"not recorded\) is not simulated"):
        hopper.tma_encode_status(torch.zeros(4096, dtype=torch.uint8), p)


def _interleaved(dtype, dims, box, coords, swizzle=0, oob=0, estride=None, interleave=1, seed=0):
    """An interleaved map of a random tensor (rows of dims[0] elements, packed), its coordinates, and an image."""
    es = {0: 1, 6: 2, 7: 4, 9: 2}[dtype]
    strides = [dims[0] * es]
    for d in dims[1:-1]:
        strides.append(strides[-1] * d)
    data = torch.randint(0, 256, (strides[-1] * dims[-1],), generator=torch.Generator().manual_seed(seed),
                         dtype=torch.int64).to(torch.uint8)
    p = tma_params(dtype, dims, strides, box, estride, swizzle, oob, interleave)
    c = torch.tensor(list(coords) + [0] * (5 - len(coords)), dtype=torch.int32)
    image = torch.randint(0, 256, (tma_buffer(p),), generator=torch.Generator().manual_seed(seed + 1),
                          dtype=torch.int64).to(torch.uint8)
    return data, p, c, image


# Interleaved copies outside the recording whose box fits the test kernel's buffer (boxDim[rank - 2] times the
# element size is the slice): the simulator against the rule written out in ptx_cases.py.
_FITTING = {
    "rank4_f16_walks_dims_1_and_3": (6, [8, 9, 6, 5], [8, 3, 8, 2], [0, 5, 2, 3]),
    "rank4_f32_box_past_w_and_n": (7, [8, 7, 5, 4], [4, 4, 4, 3], [2, 5, 1, 3]),
    "rank3_f16_64B_swizzle": (6, [32, 12, 6], [32, 8, 3], [0, 1, 4], 2),
    "rank3_bf16_128B_swizzle_h_edge": (9, [64, 10, 5], [64, 8, 4], [0, 1, 3], 3),
    "rank4_f32_32B_interleave_no_swizzle": (7, [16, 6, 5, 3], [8, 2, 8, 2], [8, 2, 1, 1], 0, 0, None, 2),
    "rank3_f32_32B_interleave_128B_swizzle": (7, [32, 6, 4], [32, 8, 2], [0, 1, 1], 3, 0, None, 2),
    "rank3_f16_negative_h": (6, [16, 8, 6], [8, 8, 4], [8, 2, -2]),
}


@sim_only
@pytest.mark.parametrize("name", list(_FITTING))
def test_interleaved_copies_outside_the_recording_follow_the_h100s_rule(hopper, name):
    data, p, c, image = _interleaved(*_FITTING[name], seed=len(name))
    load = Case("ptx_hopper.cu", "tma_load_raw", [data, p, c])
    _same(hopper.tma_load_raw(data, p, c), reference(name, load), load, "simulator vs the rule")
    if min(c.tolist()) >= 0:  # (a store's coordinates must not be negative)
        store = Case("ptx_hopper.cu", "tma_store_raw", [data, p, c, image])
        _same(hopper.tma_store_raw(data, p, c, image), reference(name, store), store, "simulator vs the rule")


@sim_only
@pytest.mark.parametrize("spec, message", [
    ((6, [8, 9, 20, 5], [8, 2, 16, 2], [0, 1, 2, 1]), r"boxDim\[2\] = 16 \(dimension 2 is left unwalked"),
    ((6, [8, 9, 6, 5], [8, 4, 8, 2], [0, 1, 2, 1], 0, 0, [1, 2, 1, 1]), r"elementStrides\[1\] = 2 on a walked dimension"),
    ((6, [16, 9, 6], [8, 8, 2], [12, 1, 2]), r"slices 12 to 19 of dimension 0, not all inside its globalDim\[0\] = 16"),
    ((6, [16, 9, 6], [8, 8, 2], [-4, 1, 2]), r"slices -4 to 3 of dimension 0"),
    ((7, [4, 9, 6], [4, 8, 2], [0, 1, 2], 3), r"lines of 64 bytes .* under the 128-byte swizzle, not a multiple"),
    ((7, [4, 9, 7, 3], [4, 4, 4, 2], [0, -3, 1, 0], 0, 1), r"NaN out-of-bounds fill, whose box has lines outside"),
])
def test_an_interleaved_copy_the_recording_does_not_determine_is_not_simulated(hopper, spec, message):
    data, p, c, _ = _interleaved(*spec)
    with pytest.raises(RuntimeError, match=message + r".*not recorded"):
        hopper.tma_load_raw(data, p, c)


def test_cp_async_groups_in_a_ring_give_the_column_sums(ops):
    for stages in (2, 3, 4):
        x = torch.randn(7, 256)
        torch.testing.assert_close(ops.cp_async_ring(x, stages), x.sum(0), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# complete kernels, on every backend
@pytest.fixture(scope="module", params=BACKENDS)
def mma_matmul(request):
    if request.param == "cuda" and needs_line(HERE / "ptx_mma_matmul.cu"):
        pytest.skip(needs_line(HERE / "ptx_mma_matmul.cu"))  # cp.async and bf16 mma.sync: compute capability 8.0
    return request.param, load(HERE / "ptx_mma_matmul.cu", request.param)


@pytest.mark.parametrize("mnk", [(256, 256, 256), (128, 128, 32), (1, 8, 8), (77, 40, 200), (300, 136, 72)],
                         ids=lambda s: "x".join(map(str, s)))
def test_mma_sync_ldmatrix_cp_async_matmul_matches_torch(mma_matmul, mnk):
    backend, ext = mma_matmul
    m, n, k = mnk
    dev = torch.device("cuda" if backend == "cuda" else "cpu")
    a = torch.randn(m, k, device=dev).bfloat16()
    b = torch.randn(k, n, device=dev).bfloat16()
    want = a.double() @ b.double()
    torch.testing.assert_close(ext.mma_matmul(a, b), want.float(), rtol=1e-4, atol=1e-4 * k ** 0.5)


def test_mma_sync_matmul_of_small_integers_is_exact(mma_matmul):
    backend, ext = mma_matmul
    dev = torch.device("cuda" if backend == "cuda" else "cpu")
    a = torch.randint(-3, 4, (130, 96), device=dev).bfloat16()
    b = torch.randint(-3, 4, (96, 72), device=dev).bfloat16()
    assert torch.equal(ext.mma_matmul(a, b), (a.float() @ b.float()))


@sim_only
def test_mma_sync_matmul_survives_every_thread_and_block_order(monkeypatch):
    ext = load(HERE / "ptx_mma_matmul.cu", "sim")
    a, b = torch.randn(200, 64).bfloat16(), torch.randn(64, 144).bfloat16()
    want = (a.double() @ b.double()).float()
    for order in ("reverse", "random"):
        monkeypatch.setenv("CUDASIM_ORDER", order)
        monkeypatch.setenv("CUDASIM_SHUFFLE_BLOCKS", "1")
        torch.testing.assert_close(ext.mma_matmul(a, b), want, rtol=1e-4, atol=1e-3)


@contextlib.contextmanager
def _arch_list(value: str):
    """Build for `value` (TORCH_CUDA_ARCH_LIST) inside the block, and restore what was there."""
    before = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = before


def _load_hopper(path: Path, backend: str):
    """Load a file that uses sm_90a's instructions: on cuda it needs an H100 and an sm_90a build."""
    if backend == "sim":
        return load(path, "sim")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma and setmaxnreg need an sm_90 GPU (H100, H200)")
    with _arch_list("9.0a"):
        return load(path, "cuda")


@pytest.fixture(scope="module", params=BACKENDS)
def wgmma_matmul(request):
    return request.param, _load_hopper(HERE / "ptx_wgmma_matmul.cu", request.param)


@pytest.fixture(scope="module", params=BACKENDS)
def hopper_ops(request):
    return request.param, _load_hopper(HERE / "ptx_hopper.cu", request.param)


@pytest.mark.parametrize("b_kmajor", [False, True], ids=["b_kn", "b_nk"])
@pytest.mark.parametrize("mnk", [(256, 256, 256), (128, 128, 64), (100, 72, 200), (300, 136, 520), (8, 8, 8)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tma_mbarrier_wgmma_matmul_matches_torch(wgmma_matmul, mnk, b_kmajor):
    backend, ext = wgmma_matmul
    m, n, k = mnk
    dev = torch.device("cuda" if backend == "cuda" else "cpu")
    a = torch.randn(m, k, device=dev).bfloat16()
    b = torch.randn(k, n, device=dev).bfloat16()
    got = ext.wgmma_matmul(a, b.t().contiguous() if b_kmajor else b, b_kmajor)
    torch.testing.assert_close(got, (a.double() @ b.double()).float(), rtol=1e-4, atol=1e-4 * k ** 0.5)


@pytest.mark.parametrize("b_kmajor", [False, True], ids=["b_kn", "b_nk"])
def test_wgmma_matmul_of_small_integers_is_exact(wgmma_matmul, b_kmajor):
    backend, ext = wgmma_matmul
    dev = torch.device("cuda" if backend == "cuda" else "cpu")
    a = torch.randint(-3, 4, (130, 512), device=dev).bfloat16()
    b = torch.randint(-3, 4, (512, 200), device=dev).bfloat16()
    assert torch.equal(ext.wgmma_matmul(a, b.t().contiguous() if b_kmajor else b, b_kmajor), a.float() @ b.float())


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("rows", [1, 5, 8])
def test_mbarrier_ring_of_bulk_copies_gives_the_column_sums(hopper_ops, stages, rows):
    backend, ext = hopper_ops
    x = torch.randn(rows, 256, device="cuda" if backend == "cuda" else "cpu")
    torch.testing.assert_close(ext.mbarrier_ring(x, stages), x.sum(0), rtol=1e-5, atol=1e-5)


@sim_only
def test_wgmma_matmul_survives_every_thread_and_block_order(monkeypatch):
    ext = load(HERE / "ptx_wgmma_matmul.cu", "sim")
    a, b = torch.randint(-3, 4, (200, 320)).bfloat16(), torch.randint(-3, 4, (320, 136)).bfloat16()
    for order in ("reverse", "random"):
        monkeypatch.setenv("CUDASIM_ORDER", order)
        monkeypatch.setenv("CUDASIM_SHUFFLE_BLOCKS", "1")
        assert torch.equal(ext.wgmma_matmul(a, b, False), a.float() @ b.float())


@sim_only
def test_wgmma_matmul_released_once_per_warpgroup_passes_the_race_check_in_every_thread_order():
    """Each consumer warpgroup hands a stage back with one arrival (thread 0 of the warpgroup, after every warp's
    wgmma.wait_group, as CUTLASS does): the warpgroup's wgmma group is complete at the first wait that covers it, so
    its reads of the stage come before the producer's next copy into it, whichever warp waited first."""
    if compiler_problem():
        pytest.skip(compiler_problem())
    ext = load(HERE / "ptx_wgmma_matmul.cu", "sim")
    # 8 tiles of K through 4 stages: every stage is refilled once
    a, b = torch.randint(-3, 4, (128, 512)).bfloat16(), torch.randint(-3, 4, (128, 512)).bfloat16()
    for order, seed in (("forward", 0), ("reverse", 0), ("random", 1)):
        with knobs.set(order=order, seed=seed):
            assert torch.equal(checked(ext.wgmma_matmul, a, b, True), a.float() @ b.float().t()), order


# ---------------------------------------------------------------------------------------------
# misuse: what a GPU leaves undefined is an error naming the line (or NaN where data never came)
MISUSE = HERE / "ptx_misuse.cu"
MISUSE_CASES = {
    1: ("LDMATRIX-MISALIGNED", r"ldmatrix\.sync\.aligned\.m8n8\.x1\.shared\.b16 at ptx_misuse\.cu:{line}: the row address 0x[0-9a-f]+ is not 16-byte aligned"),
    2: ("LDMATRIX-GENERIC", r"at ptx_misuse\.cu:{line}: the row address 0x[0-9a-f]+ is a generic address of shared memory"),
    3: ("MMA-HALF-WARP", r"mma\.sync.* at ptx_misuse\.cu:{line} is a warp-wide call, but lane 16 .* has exited \(returned at ptx_misuse\.cu:\d+\)"),
    4: ("CP-ASYNC-SRC-SIZE", r"cp\.async\.ca\.shared\.global at ptx_misuse\.cu:{line}: src-size \(12\) must be at most cp-size \(8\)"),
    6: ("MBAR-NO-INIT", r"at ptx_misuse\.cu:{line}: no mbarrier is initialised at shared address"),
    7: ("WAIT-LOOP", r"try_wait\.parity.* at ptx_common\.cuh:{line}: deadlock: this wait for the phase of parity 0 to complete "
                     r"can never end: .* 1 of 1 arrivals still to come"),
    8: ("WAIT-LOOP", r"at ptx_common\.cuh:{line}: deadlock: .*transaction count of 512 byte\(s\) \(expect_tx at "
                     r"ptx_misuse\.cu:\d+ announced 1024 bytes this phase, copies delivered 512\)"),
    9: ("BULK-COPY", r"cp\.async\.bulk.* at ptx_misuse\.cu:{line}: the copies that complete on this mbarrier brought 512 bytes, "
                     r"more than the 256 bytes that expect_tx announced at ptx_misuse\.cu:\d+"),
    10: ("ARRIVE-TWICE", r"at ptx_misuse\.cu:{line}: an arrival on an mbarrier whose phase has all its arrivals but has not completed"),
    11: ("MBAR-OVERWRITTEN", r"at ptx_misuse\.cu:{line}: the mbarrier at shared address 0x[0-9a-f]+ \(initialised at "
                             r"ptx_misuse\.cu:\d+\) was overwritten by an ordinary store"),
    12: ("WGMMA-ISSUE", r"wgmma\.mma_async.* at ptx_misuse\.cu:{line}: the matrix descriptor .* outside the block's shared memory"),
    13: ("WGMMA-ISSUE", r"at ptx_misuse\.cu:{line}: wgmma\.mma_async without a wgmma\.fence"),
    14: ("WGMMA-WAIT", r"wgmma\.wait_group.* at ptx_misuse\.cu:{line}: an accumulator register of a wgmma\.mma_async was written before"),
    16: ("WGMMA-ISSUE", r"at ptx_misuse\.cu:{line}: wgmma runs on a warpgroup of 4 warps \(128 threads\).*the block has 64 threads"),
    17: ("TMA-MISUSE", r"cp\.async\.bulk\.tensor.* at ptx_misuse\.cu:{line}: the destination 0x[0-9a-f]+ is not 128-byte aligned"),
    18: ("TMA-MISUSE", r"at ptx_misuse\.cu:{line}: the tensor map operand does not point to a CUtensorMap made by cuTensorMapEncodeTiled"),
    19: ("WGMMA-ISSUE", r"at ptx_misuse\.cu:{line}: the block ended with this wgmma\.mma_async still in flight.*block \(0,0,0\)"),
    20: ("CVTA-GLOBAL", r"__cvta_generic_to_shared at ptx_misuse\.cu:{line}: the pointer 0x[0-9a-f]+ is not shared memory"),
    21: ("WGMMA-WAIT", r"at ptx_misuse\.cu:{line}: deadlock: this wait completes wgmma group 0 of the warpgroup, but warp 1 has "
                       r"committed only 0 group\(s\)"),
    22: ("SCOPE-WAIT", r"wgmma\.wait_group.* at ptx_misuse\.cu:{line}: the variable a wgmma accumulates into "
                       r"went out of scope before this wgmma\.wait_group"),
    23: ("BULK-WAIT-READ", r"cp\.async\.bulk\.wait_group\.read at ptx_misuse\.cu:{line}: shared memory that the "
                           r"bulk store cp\.async\.bulk\.tensor\.2d\S* at ptx_misuse\.cu:\d+ was still reading was "
                           r"overwritten before this wait retired it"),
    24: ("CP-ASYNC-OVER-STORE", r"cp\.async\.ca\.shared\.global at ptx_misuse\.cu:{line}: this cp\.async writes shared "
                                r"memory .* that the bulk store cp\.async\.bulk\.global\.shared::cta\.bulk_group at "
                                r"ptx_misuse\.cu:\d+ \(in its thread's bulk async-group 0\) is still reading"),
    25: ("STORE-NEVER-WAITED", r"cp\.async\.bulk\.global\S* at ptx_misuse\.cu:{line}: the block ended with this bulk "
                               r"store still reading shared memory.*block \(0,0,0\)"),
}


@pytest.fixture(scope="module")
def misuse():
    return load(MISUSE, "sim")


@sim_only
@pytest.mark.parametrize("what", list(MISUSE_CASES))
def test_misuse_is_an_error_naming_the_line(misuse, what):
    marker, pattern = MISUSE_CASES[what]
    where = HERE / "ptx_common.cuh" if marker == "WAIT-LOOP" else MISUSE
    line = rf"{_line_of(marker, where)}(?: \(called from [^)]*\))?"  # helpers name their callers
    with pytest.raises(RuntimeError, match=pattern.format(line=line)):
        misuse.misuse(torch.randn(1024), what)


@sim_only
@pytest.mark.parametrize("what", [5, 15, 26], ids=["cp_async_read_before_wait", "wgmma_accumulator_read_before_wait",
                                                  "bulk_store_destination_read_before_wait"])
def test_data_read_before_it_arrived_is_nan(misuse, what):
    out = misuse.misuse(torch.randn(1024), what)
    assert out[:32].isnan().all()


# ---------------------------------------------------------------------------------------------
# the Hopper lesson's planted bugs, made from ptx_wgmma_matmul.cu: each is an error or a wrong answer
WGMMA_MATMUL = HERE / "ptx_wgmma_matmul.cu"
RELEASE = ('      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // the stage is read: release it\n'
           '      if (threadIdx.x % 128 == 0) mbar_arrive(&empty[s]);\n')
RELEASE_EARLY = ('      if (threadIdx.x % 128 == 0) mbar_arrive(&empty[s]);\n'
                 '      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n')
PLANTED_WGMMA = {
    "release_before_the_wgmma_completes": (RELEASE, RELEASE_EARLY,
        r"cp\.async\.bulk\.tensor.* at ptx_wgmma_matmul\w*\.cu:\d+ \(called from [^)]*\): this copy writes shared "
        r"memory .* that the "
        r"wgmma\.mma_async issued at ptx_wgmma_matmul\w*\.cu:\d+ still reads"),
    "wrong_parity": ("mbar_wait(&full[s], (kt / STAGES) % 2);", "mbar_wait(&full[s], (kt / STAGES + 1) % 2);",
                     r"deadlock: this wait for the phase of parity 0 .* 256 other thread\(s\) wait at "
                     r"ptx_common\.cuh:\d+ for the phase of parity 1 of the barrier"),
    "no_expect_tx": ("mbar_expect_bytes(&full[s], STAGE_BYTES);", "mbar_arrive(&full[s]);",
                     r"the copies that complete on this mbarrier brought 65536 bytes, more than the 0 bytes that expect_tx "
                     r"announced"),
    "no_fence": ('      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n', "",
                 r"wgmma\.mma_async without a wgmma\.fence"),
}


def _planted_matmul(old: str, new: str, name: str):
    """ptx_wgmma_matmul.cu with one change, built for sim (its shared header copied beside it)."""
    path = plant(WGMMA_MATMUL, old, new, name)
    shutil.copyfile(HERE / "ptx_common.cuh", path.parent / "ptx_common.cuh")
    return load(path, "sim")


@sim_only
@pytest.mark.parametrize("bug", list(PLANTED_WGMMA))
def test_a_planted_pipeline_bug_in_the_hopper_matmul_is_an_error(bug):
    old, new, message = PLANTED_WGMMA[bug]
    ext = _planted_matmul(old, new, f"ptx_wgmma_matmul_{bug}.cu")
    a, b = torch.randint(-3, 4, (128, 512)).bfloat16(), torch.randint(-3, 4, (512, 128)).bfloat16()
    with pytest.raises(RuntimeError, match=message):
        ext.wgmma_matmul(a, b, False)


@sim_only
def test_a_descriptor_with_the_wrong_swizzle_gives_a_wrong_product():
    # nothing is undefined here: the tensor core reads the tile in another layout, on a GPU as here
    ext = _planted_matmul("(1ull << 62);", "(0ull << 62);", "ptx_wgmma_matmul_no_swizzle.cu")
    a, b = torch.randint(-3, 4, (128, 128)).bfloat16(), torch.randint(-3, 4, (128, 128)).bfloat16()
    got, want = ext.wgmma_matmul(a, b, True), a.float() @ b.float()
    assert not got.isnan().any() and (got != want).float().mean() > 0.5


@sim_only
def test_the_race_check_names_the_store_that_overwrote_a_bulk_stores_source(misuse):
    # a plain build finds the bytes changed at the wait (case 23 above); the instrumented one catches the store itself
    if compiler_problem():
        pytest.skip(compiler_problem())
    with pytest.raises(RuntimeError, match=rf"shared memory that a bulk store at ptx_misuse\.cu:"
                                           rf"{_line_of('TMA-STORE', MISUSE)} is still reading was overwritten at "
                                           rf"ptx_misuse\.cu:{_line_of('STAGE-OVERWRITTEN', MISUSE)} before "
                                           rf"cp\.async\.bulk\.wait_group\.read retired it"):
        checked(misuse.misuse, torch.randn(1024), 23)


@sim_only
def test_an_error_in_a_helper_names_the_line_that_called_it(misuse):
    with pytest.raises(RuntimeError, match=rf"at ptx_common\.cuh:{_line_of('WAIT-LOOP', HERE / 'ptx_common.cuh')} "
                                           rf"\(called from ptx_misuse\.cu:{_line_of('nobody arrives', MISUSE)}\)"):
        misuse.misuse(torch.randn(1024), 7)


@pytest.mark.parametrize("bulk", [False, True], ids=["tma_store", "bulk_store"])
@pytest.mark.parametrize("rows", [64, 40, 5])
def test_stores_through_two_staging_tiles_write_every_row(hopper_ops, rows, bulk):
    backend, ext = hopper_ops
    x = torch.randn(rows, 64, device="cuda" if backend == "cuda" else "cpu")
    assert torch.equal(ext.store_ring(x, bulk), 2 * x)


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_bulk_stores_of_two_threads_in_flight_together_both_land(hopper_ops, order):
    # the second warp's wait finds the first warp's store (issued first in forward order) pending before its own
    backend, ext = hopper_ops
    x = torch.randn(64, 64, device="cuda" if backend == "cuda" else "cpu")
    with sim_order(order) if backend == "sim" else contextlib.nullcontext():
        assert torch.equal(ext.two_issuers(x), x)


STORE_RING_WAIT = 'asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");  // STORE-RING-WAIT'


@sim_only
@pytest.mark.parametrize("bulk", [False, True], ids=["tma_store", "bulk_store"])
def test_a_staging_tile_refilled_while_its_store_may_still_read_it_is_an_error(bulk):
    # wait_group.read 2 lets the newest two groups stay in flight: the store two tiles back, which read this tile
    path = plant(HERE / "ptx_hopper.cu", STORE_RING_WAIT, STORE_RING_WAIT.replace("read 1", "read 2"),
                 "ptx_hopper_store_ring_wait_too_short.cu")
    shutil.copyfile(HERE / "ptx_common.cuh", path.parent / "ptx_common.cuh")
    ext = load(path, "sim")
    wait = _line_of("STORE-RING-WAIT", HERE / "ptx_hopper.cu")
    with pytest.raises(RuntimeError, match=rf"cp\.async\.bulk\.wait_group\.read at ptx_hopper\w*\.cu:{wait}: shared "
                                           rf"memory that the bulk store .* was still reading was overwritten"):
        ext.store_ring(torch.randn(64, 64), bulk)


@pytest.mark.parametrize("row0, col0", [(0, 0), (40, 16), (90, 100)])
def test_libcudacxx_barrier_and_tma_helpers_load_a_tile(hopper_ops, row0, col0):
    backend, ext = hopper_ops
    x = torch.randn(100, 140, device="cuda" if backend == "cuda" else "cpu")
    tile, address = ext.barrier_tma_tile(x, row0, col0)
    want = torch.zeros(32, 64, device=x.device)
    part = x[row0:row0 + 32, col0:col0 + 64]
    want[:part.shape[0], :part.shape[1]] = part
    assert torch.equal(tile, want)
    assert address.item() % 1024 == 0  # __shared__ alignas(1024): aligned in the shared window


@pytest.mark.parametrize("mods, want", [(".x4.m8n8", "ldmatrix<4, false"), (".x1.trans.m8n8", "ldmatrix<1, true"),
                                        (".m8n8.trans.x2", "ldmatrix<2, true")])
def test_ldmatrix_takes_the_shape_count_and_trans_in_any_order_as_ptxas_does(mods, want):
    # ptxas takes each of these (checked with nvcc 13); LeetCUDA's matmuls write .x1.trans.m8n8
    regs = ", ".join(f"%{i}" for i in range(int(want[9])))
    outs = ", ".join(f'"=r"(o[{i}])' for i in range(int(want[9])))
    out = _translate(f'  asm volatile("ldmatrix.sync.aligned{mods}.shared.b16 {{{regs}}}, [%{int(want[9])}];" '
                     f': {outs} : "r"(0u));')
    assert want in out


# A header's macros for instructions a file never uses (LeetCUDA's CP_ASYNC_BULK_WAIT_ALL, written with no PTX
# instruction of that name behind it): nvcc never sees an unexpanded macro, so the simulator's error waits for a use.
BAD_MACRO = ('#define WAIT_ALL() asm volatile("cp.async.bulk.wait_all;\\n" ::)\n'
             '#define COPY(dst, src)                                  \\\n'
             '  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\\n" ::"r"(dst), \\\n'
             '               "l"(src))\n')


def test_an_instruction_the_simulator_refuses_inside_an_unused_macro_does_not_stop_the_build(tmp_path):
    src = tmp_path / "unused_macro.cu"
    src.write_text('#include "helpers.cuh"\n' + BAD_MACRO + "__global__ void k(float* p) { p[threadIdx.x] = 1.0f; }\n")
    load(src, "sim", quiet=True)  # builds: WAIT_ALL is never expanded


def test_operands_split_over_a_macros_continued_lines_are_read():
    out = translate_source(BAD_MACRO, "t.cu")
    copy = out[out.index("#define COPY"):]
    assert "static_assert" not in copy and "cp_async" in copy.replace(".", "_")
    body = out[out.index('#line 1 "t.cu"\n') + len('#line 1 "t.cu"\n'):]
    assert body.count("\n") == BAD_MACRO.count("\n")  # the lines keep their numbers


def test_a_macro_parameter_named_like_the_simulators_own_helpers_builds(tmp_path):
    # LeetCUDA's LDMATRIX_X4(R0, R1, R2, R3, addr): the translation of the asm inside calls ::cudasim::ptx::addr,
    # which the preprocessor would replace with the macro's argument if the parameter kept its name
    src = tmp_path / "param_addr.cu"
    src.write_text('#include "helpers.cuh"\n'
                   '#define LDMATRIX_X1(R, addr) \\\n'
                   '  asm volatile("ldmatrix.sync.aligned.x1.m8n8.shared.b16 {%0}, [%1];\\n" : "=r"(R) : "r"(addr))\n'
                   "__global__ void k(unsigned* o) {\n"
                   "  __shared__ unsigned short s[64];\n"
                   "  unsigned acc = static_cast<unsigned>(__cvta_generic_to_shared(s + threadIdx.x % 8 * 8));\n"
                   "  LDMATRIX_X1(o[threadIdx.x], acc);\n"
                   "}\n")
    load(src, "sim", quiet=True)


def test_that_instruction_fails_the_build_where_the_macro_is_used_naming_the_instruction_and_the_macros_line(tmp_path):
    src = tmp_path / "used_macro.cu"
    src.write_text('#include "helpers.cuh"\n' + BAD_MACRO + "__global__ void k(float* p) { WAIT_ALL(); }\n")
    with pytest.raises(BuildError, match=r"cudasim: .*used_macro\.cu:2: cp\.async\.bulk\.wait_all"):
        load(src, "sim", quiet=True)


@pytest.mark.parametrize("mods", [".x4", ".m8n8.x4.x2", ".m8n8.x1.trans.trans"])
def test_ldmatrix_without_its_shape_or_with_two_counts_is_refused(mods):
    with pytest.raises(Exception, match=r"needs \.m8n8, one of \.x1 \.x2 \.x4, and at most one \.trans"):
        _translate(f'  asm volatile("ldmatrix.sync.aligned{mods}.shared.b16 {{%0}}, [%1];" : "=r"(o[0]) : "r"(0u));')


@sim_only
@pytest.mark.parametrize("file", ["ptx_mma_matmul.cu", "ptx_wgmma_matmul.cu"], ids=["mma_sync", "wgmma"])
def test_a_256_cubed_bf16_matmul_takes_under_a_second_of_cpu(file):
    ext = load(HERE / file, "sim")
    a, b = torch.randn(256, 256).bfloat16(), torch.randn(256, 256).bfloat16()
    run = (lambda: ext.mma_matmul(a, b)) if file == "ptx_mma_matmul.cu" else (lambda: ext.wgmma_matmul(a, b, False))
    run()
    start = time.process_time()  # CPU time: what the simulator spends, however busy the machine is
    run()
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize("noinc", [True, False], ids=["noinc", "with_arrive"])
def test_cp_async_copies_completing_on_an_mbarrier_arrive_before_the_wait_ends(hopper_ops, noinc):
    backend, ext = hopper_ops
    src = torch.randint(1, 256, (1024,), dtype=torch.uint8, device="cuda" if backend == "cuda" else "cpu")
    assert torch.equal(ext.cp_async_mbarrier(src, noinc), src)


# ---------------------------------------------------------------------------------------------
# libcu++'s <cuda/ptx>: the same instructions through cuda::ptx:: functions (tests/sim_kernels/ptx_cccl.cu)
CCCL = HERE / "ptx_cccl.cu"


@pytest.fixture(scope="module", params=BACKENDS)
def cccl(request):
    return request.param, _load_hopper(CCCL, request.param)


def _tile(x: torch.Tensor, row0: int, col0: int) -> torch.Tensor:
    """The 32 x 64 tile of x at (row0, col0), zeros outside x (what a TMA load of it brings)."""
    t = torch.zeros(32, 64, device=x.device)
    part = x[row0:row0 + 32, col0:col0 + 64]
    t[:part.shape[0], :part.shape[1]] = part
    return t


@pytest.mark.parametrize("row0, col0", [(0, 0), (40, 16), (90, 100)])
def test_cuda_ptx_mbarrier_tma_load_and_bulk_stores_match_torch(cccl, row0, col0):
    backend, ext = cccl
    x = torch.randn(100, 140, device="cuda" if backend == "cuda" else "cpu")
    y, b = ext.cccl_tiles(x, row0, col0, False)
    a_tile, b_tile = _tile(x, row0, col0), _tile(x, row0 + 32, col0)
    want = torch.zeros_like(x)
    part = want[row0:row0 + 32, col0:col0 + 64]
    part.copy_((2 * a_tile + b_tile)[:part.shape[0], :part.shape[1]])
    assert torch.equal(y, want)
    assert torch.equal(b, b_tile)


@pytest.mark.parametrize("row0, col0", [(0, 0), (90, 100)])
def test_cuda_ptx_forms_and_asm_forms_give_the_same_answer(cccl, row0, col0):
    backend, ext = cccl
    x = torch.randn(100, 140, device="cuda" if backend == "cuda" else "cpu")
    got, want = ext.cccl_tiles(x, row0, col0, False), ext.cccl_tiles(x, row0, col0, True)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


CCCL_MISUSE = {
    1: ("CCCL-WRONG-PARITY", r"cuda::ptx::mbarrier_try_wait_parity at ptx_cccl\.cu:{line}: deadlock: this wait for the phase "
                             r"of parity 1 to complete can never end: .* 1 of 1 arrivals still to come"),
    2: ("CCCL-NO-EXPECT", r"cuda::ptx::cp_async_bulk_tensor at ptx_cccl\.cu:{line}: the copies that complete on this "
                          r"mbarrier brought 8192 bytes, more than the 0 bytes that expect_tx announced"),
    3: ("CCCL-TOO-MANY-BYTES", r"cuda::ptx::mbarrier_try_wait_parity at ptx_cccl\.cu:{line}: deadlock: .*transaction count "
                               r"of 8192 byte\(s\) \(expect_tx at ptx_cccl\.cu:\d+ announced 16384 bytes"),
    4: ("CCCL-NO-INIT", r"cuda::ptx::mbarrier_arrive at ptx_cccl\.cu:{line}: no mbarrier is initialised"),
}


@sim_only
@pytest.mark.parametrize("what", list(CCCL_MISUSE))
def test_cuda_ptx_misuse_is_an_error_naming_the_line(what):
    marker, pattern = CCCL_MISUSE[what]
    ext = load(CCCL, "sim")
    line = rf"{_line_of(marker, CCCL)}(?: \(called from [^)]*\))?"
    with pytest.raises(RuntimeError, match=pattern.format(line=line)):
        ext.cccl_misuse(torch.randn(64, 64), what)


BEYOND = [  # a call outside the subset, and what the build says of it at the call's line
    ("cuda::ptx::getctarank(x)", r"cuda::ptx::getctarank is not supported by the simulator yet"),
    ("cuda::ptx::tensormap_replace_global_address(cuda::ptx::space_global, x, x)",
     r"cuda::ptx::tensormap_replace_global_address is not supported by the simulator yet"),
    ("cuda::ptx::mbarrier_arrive(cuda::ptx::sem_release, cuda::ptx::scope_gpu, cuda::ptx::space_shared, &bar)",
     r"this form of cuda::ptx::mbarrier_arrive is not supported by the simulator yet"),
    ("cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_shared, x, x, 16u, &bar)",
     r"cuda::ptx::cp_async_bulk from shared memory to a cluster's shared memory needs thread-block clusters"),
    ("cuda::ptx::cp_reduce_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_shared, cuda::ptx::op_add, "
     "(uint32_t*)x, (const uint32_t*)x, 16u, &bar)",
     r"cuda::ptx::cp_reduce_async_bulk into a cluster's shared memory needs thread-block clusters"),
    ("cuda::ptx::cp_reduce_async_bulk(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_min, x, x, 16u)",
     r"this form of cuda::ptx::cp_reduce_async_bulk is not supported"),  # min of float: libcu++ has none either
]


@sim_only
def test_cuda_ptx_outside_the_subset_is_a_compile_error_naming_it(tmp_path):
    src = tmp_path / "beyond.cu"  # one build: the compiler reports every call
    src.write_text('#include "helpers.cuh"\n#include <cuda/ptx>\n__global__ void k(float* x) {\n'
                   '  __shared__ uint64_t bar;\n' + "".join(f"  {call};\n" for call, _ in BEYOND) + "}\n")
    with pytest.raises(BuildError) as e:
        load(src, "sim")
    for line, (_, message) in enumerate(BEYOND, 5):
        # clang++ says it on the call's line, g++ on the header's line after "beyond.cu:N:M: required from here"
        assert re.search(rf"beyond\.cu:{line}:\d+:[^\n]*(\n[^\n]*){{0,3}}?{message}", str(e.value)), (line, message)


def test_cuda_ptx_copy_completes_on_a_cuda_barrier_through_its_native_handle(cccl):
    backend, ext = cccl
    x = torch.randn(20, 40, device="cuda" if backend == "cuda" else "cpu")
    assert torch.equal(ext.cccl_barrier(x), _tile(x, 0, 0))


def test_cuda_ptx_elect_sync_elects_one_lane_of_its_mask(cccl):
    backend, ext = cccl
    try:
        got = ext.cccl_elect(torch.zeros(1, device="cuda" if backend == "cuda" else "cpu")).cpu().view(4, 32)
    except RuntimeError as e:
        if "has no cuda::ptx::elect_sync" in str(e) and backend == "cuda":
            pytest.skip(str(e))
        raise
    assert got.sum(1).tolist() == [1, 1, 1, 1]  # one lane a warp, for each mask
    assert got[2:, 8:16].sum(1).tolist() == [1, 1]  # inside the mask of lanes 8-15


# cuda::ptx::cp_reduce_async_bulk: each block reduces its row into one destination (what libcu++ has of each operation)
CCCL_REDUCTIONS = [(torch.float32, "add"), (torch.float64, "add"), (torch.float16, "add"), (torch.bfloat16, "add"),
                   *((dt, op) for dt in (torch.int32, torch.int64) for op in ("add", "min", "max", "and", "or", "xor")),
                   *((dt, op) for dt in (torch.float16, torch.bfloat16) for op in ("min", "max")),
                   (torch.int32, "inc"), (torch.int32, "dec")]


# What a reduction of each op folds into an element (inc and dec: counters below their bound, no wrapping)
FOLDS = {"add": torch.add, "min": torch.minimum, "max": torch.maximum, "and": torch.bitwise_and, "or": torch.bitwise_or,
         "xor": torch.bitwise_xor, "inc": lambda a, _: a + 1, "dec": lambda a, _: a - 1}


def _reduction_inputs(dtype, op, x_shape, y_shape, dev):
    """x (one slice a block) and y0 for a reduction of op: inc and dec count from 10..89 with every bound 100."""
    if op in ("inc", "dec"):
        return torch.full(x_shape, 100, dtype=dtype, device=dev), torch.randint(10, 90, y_shape, dtype=dtype, device=dev)
    if dtype.is_floating_point:
        return torch.randn(x_shape, dtype=dtype, device=dev), torch.randn(y_shape, dtype=dtype, device=dev)
    return tuple(torch.randint(-1000, 1000, shape, dtype=dtype, device=dev) for shape in (x_shape, y_shape))


def _assert_reduced(got, want, dtype, op):
    if op == "add" and dtype in (torch.float16, torch.bfloat16):  # each block's add rounds, in any order of the blocks
        torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=0.02)
    elif op == "add" and dtype.is_floating_point:
        torch.testing.assert_close(got, want)
    else:
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype, op", CCCL_REDUCTIONS, ids=lambda v: str(v).split(".")[-1])
def test_cuda_ptx_bulk_reductions_combine_every_block_with_what_global_memory_holds(cccl, dtype, op):
    backend, ext = cccl
    n = 1024 // dtype.itemsize
    x, y0 = _reduction_inputs(dtype, op, (5, n), (n,), "cuda" if backend == "cuda" else "cpu")
    got = ext.cccl_reduce(x, y0, op)
    want = y0.clone()
    for row in x:  # in block order (only the 16-bit adds depend on it)
        want = FOLDS[op](want, row)
    _assert_reduced(got, want, dtype, op)


# cp.reduce.async.bulk.tensor and cuda::ptx::cp_reduce_async_bulk_tensor: each block reduces a 16 x 32 box through a
# tensor map into the same place of y (clipped at y's edges: the elements outside are not touched)
TENSOR_REDUCTIONS = [(torch.float32, "add"), *((dt, op) for dt in (torch.float16, torch.bfloat16) for op in ("add", "min", "max")),
                     *((torch.int32, op) for op in ("add", "min", "max", "and", "or", "xor", "inc", "dec"))]


@pytest.mark.parametrize("use_asm", [False, True], ids=["cuda_ptx", "asm"])
@pytest.mark.parametrize("dtype, op", TENSOR_REDUCTIONS, ids=lambda v: str(v).split(".")[-1])
def test_tensor_reductions_combine_every_block_inside_the_tensor_only(cccl, dtype, op, use_asm):
    backend, ext = cccl
    (rows, cols), (row0, col0) = (40, 72), (30, 48)  # the box sticks out by 6 rows and 8 columns
    x, y0 = _reduction_inputs(dtype, op, (4, 16, 32), (rows, cols), "cuda" if backend == "cuda" else "cpu")
    got = ext.cccl_tensor_reduce(x, y0, row0, col0, op, use_asm)
    want = y0.clone()
    part = want[row0:row0 + 16, col0:col0 + 32]
    for box in x:
        part.copy_(FOLDS[op](part, box[:part.shape[0], :part.shape[1]]))
    _assert_reduced(got, want, dtype, op)


@sim_only
def test_a_tensor_reduction_of_an_operation_its_type_lacks_is_an_error_naming_both():
    ext = load(CCCL, "sim")
    with pytest.raises(RuntimeError, match=r"cuda::ptx::cp_reduce_async_bulk_tensor at ptx_cccl\.cu:\d+: a tensor "
                                           r"reduction does not run this operation on the tensor map's type"):
        ext.cccl_tensor_reduce(torch.zeros(1, 16, 32, dtype=torch.float32), torch.zeros(16, 32), 0, 0, "min", False)


# cp.reduce.async.bulk: every block reduces its row into one destination
@pytest.mark.parametrize("dtype, op", [(torch.float32, "add"), (torch.float64, "add"), (torch.int32, "add"),
                                       (torch.int32, "min"), (torch.int32, "max"), (torch.int64, "add"),
                                       (torch.int64, "min"), (torch.int64, "max"), (torch.float16, "add"),
                                       (torch.bfloat16, "add"), (torch.float16, "min"), (torch.float16, "max"),
                                       (torch.bfloat16, "min"), (torch.bfloat16, "max")],
                         ids=lambda v: str(v).split(".")[-1])
@pytest.mark.parametrize("wait_writes", [False, True], ids=["wait_read", "wait"])
def test_bulk_reductions_of_many_blocks_combine_with_what_global_memory_holds(hopper_ops, dtype, op, wait_writes):
    backend, ext = hopper_ops
    dev = "cuda" if backend == "cuda" else "cpu"
    n = 1280 // dtype.itemsize  # 1280 bytes: halves of 640 and 640
    if dtype.is_floating_point:
        x, y0 = torch.randn(7, n, dtype=dtype, device=dev), torch.randn(n, dtype=dtype, device=dev)
    else:
        x, y0 = (torch.randint(-1000, 1000, shape, dtype=dtype, device=dev) for shape in ((7, n), (n,)))
    got = ext.bulk_reduce(x, y0, op, False, wait_writes)
    if op == "add":
        want = y0 + x.sum(0)
    else:
        want = torch.minimum(y0, x.min(0).values) if op == "min" else torch.maximum(y0, x.max(0).values)
    if op == "add" and dtype in (torch.float16, torch.bfloat16):  # each block's add rounds, in any order of the blocks
        want = y0.float()
        for row in x:
            want = (want + row.float()).to(dtype).float()
        torch.testing.assert_close(got.float(), want, atol=0.05, rtol=0.02)
    elif dtype.is_floating_point:
        torch.testing.assert_close(got, want)  # the blocks add in any order
    else:
        assert torch.equal(got, want)


def test_a_bulk_reduction_keeps_subnormals_where_a_float_atomic_add_in_global_memory_flushes_them(hopper_ops):
    """Measured on an H200: cp.reduce.async.bulk .add.f32 (UBLKRED .ADD.F32.RN) keeps subnormals (atomicAdd's test
    in tests/test_sim.py has the other side)."""
    backend, ext = hopper_ops
    dev = "cuda" if backend == "cuda" else "cpu"
    x = torch.full((7, 320), 1e-40)
    y0 = torch.zeros(320)
    y0[::2] = -1e-40
    got = ext.bulk_reduce(x.to(dev), y0.to(dev), "add", False, True).cpu()
    want = y0 + x.sum(0)  # on the CPU, exact: multiples of float32's smallest subnormal
    assert torch.equal(got, want) and bool((want != 0).all())


@sim_only
def test_bulk_reductions_are_atomics_to_the_race_check_and_a_plain_store_beside_them_is_a_race():
    ext = _load_hopper(HERE / "ptx_hopper.cu", "sim")
    x, y0 = torch.randn(4, 64), torch.zeros(64)
    torch.testing.assert_close(checked(ext.bulk_reduce, x, y0, "add", False, True), x.sum(0))
    with pytest.raises(RuntimeError, match=r"(?s)data race on global memory.*made an atomic on"):
        checked(ext.bulk_reduce, x, y0, "add", True, False)

