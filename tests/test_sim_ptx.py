"""Inline PTX runs on the simulator: the asm statement parser, every instruction of the set against
the PTX ISA's definitions (tests/ptx_cases.py) and, where tests/ptx_vectors/ holds them, against the
answers of an H100; complete kernels on every backend; misuse reported with the learner's line.

The kernels are in tests/sim_kernels/ptx_*.cu (valid CUDA for nvcc; the Hopper ones for sm_90a).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.sim.translate import TranslateError, translate_source
from ptx_cases import VECTORS, all_cases, reference

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


def test_files_without_asm_do_not_include_the_ptx_header():
    assert "cudasim_ptx.h" not in translate_source("__global__ void k() {}\n", "t.cu")
    assert "cudasim_ptx.h" in translate_source("size_t a = __cvta_generic_to_shared(p);\n", "t.cu")


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
    assert lines[0].startswith("#define LOAD(x, a) \\") and lines[1].rstrip().endswith("\\")
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


def _gpu_answer(file: str, name: str):
    """The H100's recorded answer for a case, or None when tests/ptx_vectors/ does not hold it."""
    stem = Path(file).stem
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
    got = getattr(ext, case.op)(*case.args)
    _same(got, reference(name, case), case, "simulator vs the PTX ISA")
    recorded = _gpu_answer(case.file, name)
    if recorded is not None:
        assert "error" not in recorded, recorded.get("error")
        _same(got, recorded["out"], case, "simulator vs the H100")


def test_cp_async_groups_in_a_ring_give_the_column_sums(ops):
    for stages in (2, 3, 4):
        x = torch.randn(7, 256)
        torch.testing.assert_close(ops.cp_async_ring(x, stages), x.sum(0), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# complete kernels, on every backend
@pytest.fixture(scope="module", params=BACKENDS)
def mma_matmul(request):
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
