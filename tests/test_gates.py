"""Compute-capability gates (kernels/gates.py): on a GPU below what a variant or an exercise needs, the op runs on
the simulator instead, the exercise is built and checked there, the benchmarks and Nsight Compute leave it out, each
after one line that says so; and the compile check builds every file for every target but the files a target's
gates leave out. The GPU here is a stand-in: kernels.backend.gpu_capability (and gpu_available) patched."""
import dataclasses

import pytest
import torch

from kernels import backend, gates, lessons
from kernels.build import load
from kernels.dev import compile_check
from kernels.exercises import check_exercise
from kernels.lessons import lesson09, lesson12
from kernels.sim import knobs
from kernels.paths import reference_file
from kernels.tools import nsight
from test_lessons import defined_ops, gate_mismatches

pytestmark = pytest.mark.toolkit  # make test-toolkit runs these, not make test-all

T4, A100, H100 = (7, 5), (8, 0), (9, 0)
WMMA_STUB, WMMA_SOLUTION = lessons.exercise_files(lessons.lesson09.EXERCISES[1])


@pytest.fixture
def gpu(monkeypatch):
    """A stand-in GPU: gpu(capability) makes the cuda backend's GPU one of that compute capability; each gate's
    line is said afresh."""
    monkeypatch.setattr(gates, "_said", set())

    def of(capability):
        monkeypatch.setattr(backend, "gpu_capability", lambda: capability)
        monkeypatch.setattr(backend, "gpu_available", lambda: True)
    return of


@pytest.fixture(scope="module")
def sim09():
    return load(reference_file("09"), "sim", quiet=True)


def test_a_gate_says_what_the_gpu_lacks_and_holds_only_below_its_capability_and_in_its_dtypes(gpu):
    gpu(T4)
    assert gates.shortfall("matmul11", lesson09.TF32_TENSOR_CORES) == \
        "`matmul11` needs compute capability 8.0 for TF32 tensor cores (this GPU has 7.5)"
    assert gates.shortfall("matmul9", lesson09.BF16_TENSOR_CORES, torch.bfloat16) == \
        "`matmul9` in bfloat16 needs compute capability 8.0 for bf16 tensor cores (this GPU has 7.5)"
    assert gates.shortfall("matmul9", lesson09.BF16_TENSOR_CORES, torch.float16) is None  # fp16 tensor cores: 7.0
    assert gates.shortfall("matmul8", None) is None
    gpu(A100)
    assert gates.shortfall("matmul11", lesson09.TF32_TENSOR_CORES) is None
    gpu(None)  # no GPU: nothing to fall short of
    assert gates.shortfall("matmul11", lesson09.TF32_TENSOR_CORES) is None


def test_an_sm_90a_gate_holds_on_hopper_alone_and_its_launcher_past_hopper_says_the_toolkits_line(gpu):
    """An sm_90a binary runs on 9.x GPUs only: a 10.x or 12.x GPU lacks the Hopper variants as an 8.x one does, so the
    toolkit runs them on the simulator there (not a refusal from the GPU's build), and the launchers say the same."""
    hopper = lesson12.HOPPER
    assert [hopper.met_by(c) for c in (A100, (8, 9), H100, (10, 0), (12, 0))] == [False, False, True, False, False]
    gpu((10, 0))
    line = "`attention4` needs compute capability 9.x for TMA, mbarrier transactions and wgmma (this GPU has 10.0)"
    assert gates.shortfall("attention4", hopper, torch.bfloat16) == line
    gpu(A100)
    assert gates.shortfall("attention4", hopper, torch.bfloat16) == \
        "`attention4` needs compute capability 9.0 for TMA, mbarrier transactions and wgmma (this GPU has 8.0)"
    ext = load(reference_file("12"), "sim", quiet=True)
    q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
    with knobs.set(capability=(10, 0)):  # the simulated device reports 10.0
        with pytest.raises(RuntimeError) as refused:
            ext.attention4(q, q, q, False, 0.125, torch.empty_like(q), torch.empty(1, 2, 16))
        assert line in str(refused.value)
        assert ext.attention_variant(q, q, q) == "attention3"  # the functional op takes the mma.sync kernel there


def test_a_gate_at_or_below_the_floor_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match=r"above 7\.5"):
        gates.Needs((7, 5), "nothing a T4 lacks")


def test_on_a_t4_a_gated_op_runs_on_the_simulator_after_one_line_and_the_rest_on_the_gpu(gpu, sim09, capsys):
    gpu(T4)
    ran_on_gpu = []

    def gpu_op(*args):
        ran_on_gpu.append(args[0].dtype)

    op = gates.GatedOp(gpu_op, "matmul9", lesson09.BF16_TENSOR_CORES, lambda: sim09)
    a, b = torch.randn(33, 20).bfloat16(), torch.randn(20, 17).bfloat16()
    c = torch.full((33, 17), float("nan"), dtype=torch.bfloat16)
    op(a, b, c)
    op(a, b, c)
    torch.testing.assert_close(c, lesson09.matmul_ref(a, b), rtol=2e-2, atol=2e-2)
    assert ran_on_gpu == []
    assert capsys.readouterr().out == ("`matmul9` in bfloat16 needs compute capability 8.0 for bf16 tensor cores "
                                       "(this GPU has 7.5): it runs on the simulator instead\n")  # once
    op(a.half(), b.half(), c.half())
    assert ran_on_gpu == [torch.float16] and capsys.readouterr().out == ""
    gpu(A100)
    op(a, b, c)
    assert ran_on_gpu == [torch.float16, torch.bfloat16]


def test_a_reference_file_loaded_for_a_t4_gates_the_ops_its_lesson_declares_and_no_other(gpu, sim09):
    gpu(T4)
    ext = gates.guarded(reference_file("09"), lambda be: sim09)  # the simulator's build standing in for the GPU's
    gated = {name for name in sim09.ops() if isinstance(getattr(ext, name), gates.GatedOp)}
    assert gated == {"matmul9", "matmul10", "matmul11", "matmul12", "matmul"}
    assert getattr(ext, "matmul8") == getattr(sim09, "matmul8")
    a, b = torch.randn(40, 24), torch.randn(24, 8)
    torch.testing.assert_close(ext.matmul(a, b), lesson09.matmul_ref(a, b), rtol=1e-4, atol=1e-3)
    gpu(A100)
    assert gates.guarded(reference_file("09"), lambda be: sim09) is sim09


def test_on_a_t4_an_exercise_that_needs_more_is_built_and_checked_on_the_simulator(gpu, capsys):
    gpu(T4)
    line = ("`matmul_wmma` needs compute capability 8.0 for bf16 tensor cores (this GPU has 7.5): "
            "it runs on the simulator instead\n")
    ext = load(WMMA_SOLUTION, "cuda", quiet=True)  # on the stand-in GPU
    assert capsys.readouterr().out == line
    a, b = torch.randn(20, 16).bfloat16(), torch.randn(16, 24).bfloat16()
    c = torch.empty(20, 24)
    ext.matmul_wmma(a, b, c)
    torch.testing.assert_close(c, (a.double() @ b.double()).float(), rtol=1e-5, atol=1e-5)
    gates._said.clear()
    report = check_exercise("09", "matmul_wmma", solution=True, backend="cuda", show_hints=0)
    assert report.passed and capsys.readouterr().out.startswith(line)


def test_the_exercises_that_keep_to_a_t4_are_checked_on_its_gpu(gpu):
    gpu(T4)
    from kernels.exercises import on_this_gpu

    gated = {ex.name for exs in lessons.modules().values() for ex in getattr(exs, "EXERCISES", [])
             if on_this_gpu(ex, "cuda") == "sim"}
    assert gated == {"matmul_wmma", "ws_matmul"}  # lesson 13's exercise needs 9.0 (TMA, wgmma)


def test_the_benchmarks_and_nsight_leave_out_what_a_t4_lacks_saying_why(gpu, capsys):
    gpu(T4)
    needs = lessons.op_gates(reference_file("09")).get
    assert gates.runnable(["matmul8", "matmul9", "matmul11"], needs, torch.bfloat16) == ["matmul8"]
    assert gates.runnable(["matmul9", "matmul12"], needs, torch.float16) == ["matmul9"]
    out = capsys.readouterr().out.splitlines()
    assert out == ["`matmul9` in bfloat16 needs compute capability 8.0 for bf16 tensor cores (this GPU has 7.5): "
                   "left out (timings on the simulator say nothing about a GPU)",
                   "`matmul11` needs compute capability 8.0 for TF32 tensor cores (this GPU has 7.5): "
                   "left out (timings on the simulator say nothing about a GPU)",
                   "`matmul12` needs compute capability 8.0 for 74 KB of shared memory per block (this GPU has "
                   "7.5): left out (timings on the simulator say nothing about a GPU)"]
    assert nsight.check_request("09", "matmul11").startswith("`matmul11` needs compute capability 8.0")
    assert nsight.check_request("09", "matmul8") is None
    gpu(H100)
    assert nsight.check_request("09", "matmul11") is None


def test_every_gate_names_an_op_of_its_file_in_a_dtype_it_takes_and_a_target_the_compile_check_builds():
    for lesson, mod in lessons.modules().items():
        defined = defined_ops(lesson) if getattr(mod, "VARIANTS", None) or getattr(mod, "OP_NEEDS", None) else set()
        for v in getattr(mod, "VARIANTS", []):
            if v.needs:
                assert set(v.needs.dtypes) <= set(v.dtypes or (torch.float32,)), v.name
                assert v.needs.capability in gates.TARGETS, v.name
        for name, needs in getattr(mod, "OP_NEEDS", {}).items():
            assert name in defined and name not in {v.name for v in mod.VARIANTS} and needs.capability in gates.TARGETS
    for ex in lessons.gated_exercises():
        assert all(p.is_file() for p in lessons.exercise_files(ex)) and ex.needs.capability in gates.TARGETS


def test_the_compile_check_leaves_out_at_each_target_the_files_its_gates_keep_from_it():
    names = {t: {p.relative_to(compile_check.ROOT).as_posix() for p in compile_check.gated_files(t)}
             for t in gates.TARGETS}
    hopper = {f"tests/sim_kernels/{f}.cu" for f in ("barrier_trace", "clusters", "ptx_cccl", "ptx_hopper", "ptx_misuse",
                                                     "ptx_wgmma_matmul", "ptx_ops")}
    ampere = {"tests/sim_kernels/ptx_mma_matmul.cu", "tests/sim_kernels/wmma.cu"}
    exercise = {"lessons/09_matmul/matmul_wmma.cu", "solutions/09_matmul/matmul_wmma.cu"}
    hopper_exercise = {"lessons/13_hopper_matmul/ws_matmul.cu", "solutions/13_hopper_matmul/ws_matmul.cu"}
    hopper |= hopper_exercise
    assert names == {T4: exercise | ampere | hopper, A100: hopper, (8, 9): hopper, H100: set()}
    assert compile_check.gated_files(T4)[WMMA_STUB.resolve()] == \
        "`matmul_wmma` needs compute capability 8.0 for bf16 tensor cores"


def test_at_9_0_the_files_with_a_branch_for_sm_90a_are_also_built_for_it_in_groups_of_their_own():
    every = compile_check.files()
    hopper = {p.name for p in every if compile_check.needs_sm90a(p)}
    assert {"ptx_hopper.cu", "ptx_wgmma_matmul.cu", "ptx_misuse.cu"} <= hopper
    for group, archs in compile_check.target_groups(every, H100, 2):
        assert archs == (("90", "90a") if any(p.name in hopper for p in group) else ("90",))
        assert all((p.name in hopper) == (archs == ("90", "90a")) for p in group)
    assert {archs for _, archs in compile_check.target_groups(every, T4, 2)} == {("75",)}


def test_targets_are_read_as_compute_capabilities_or_all(monkeypatch):
    seen = []
    monkeypatch.setattr(compile_check, "why_not", lambda: None)
    monkeypatch.setattr(compile_check, "check_with_nvcc",
                        lambda paths, jobs, targets=(): seen.append(list(targets)) or compile_check.Outcome())
    assert compile_check.main(["--targets", "all"]) == 0
    assert compile_check.main(["--targets", "7.5", "90"]) == 0
    assert seen == [list(gates.TARGETS), [T4, H100]]
    with pytest.raises(SystemExit):
        compile_check.main(["--targets", "seven"])


def test_a_gate_missing_from_a_declaration_or_a_launcher_is_a_mismatch(monkeypatch, sim09):
    declared = list(lesson09.VARIANTS)
    assert gate_mismatches("09", sim09) == []
    ungated = [dataclasses.replace(v, needs=None) if v.name == "matmul11" else v for v in declared]
    monkeypatch.setattr(lesson09, "VARIANTS", ungated)
    assert gate_mismatches("09", sim09) == ["matmul11 in torch.float32: the launcher refused: `matmul11` needs compute "
                                          "capability 8.0 for TF32 tensor cores (this GPU has 7.5); the lesson "
                                          "declares no gate"]
    overgated = [dataclasses.replace(v, needs=gates.Needs((8, 0), "fp32 FMAs")) if v.name == "matmul8" else v
                 for v in declared]
    monkeypatch.setattr(lesson09, "VARIANTS", overgated)
    assert [m.split(":")[0] for m in gate_mismatches("09", sim09)] == ["matmul8 in torch.float32"]


def test_a_test_file_marked_with_what_it_needs_is_left_out_below_it_and_a_malformed_mark_is_an_error(tmp_path):
    marked = tmp_path / "tma.cu"
    marked.write_text("// tma.cu: a test kernel\n// needs compute capability: 9.0 for TMA and mbarrier transactions\n")
    assert compile_check.file_needs(marked) == gates.Needs(H100, "TMA and mbarrier transactions")
    assert compile_check.needs_line(marked, A100) == \
        "`tma.cu` needs compute capability 9.0 for TMA and mbarrier transactions (this GPU has 8.0)"
    assert compile_check.needs_line(marked, H100) is None
    plain = tmp_path / "plain.cu"
    plain.write_text("// plain.cu\n")
    assert compile_check.file_needs(plain) is None
    bad = tmp_path / "bad.cu"
    bad.write_text("// needs compute capability: 9.0\n")
    with pytest.raises(ValueError, match="expected // needs compute capability: 9.0 for <what>"):
        compile_check.file_needs(bad)


def test_the_architectures_a_target_names_are_the_only_ones_built_whatever_the_gpus_or_the_environment(monkeypatch):
    from kernels import build

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    flags = build.compile_flags("cuda", archs=("90", "90a"))
    assert [f for f in flags if "arch" in f] == ["-gencode=arch=compute_90,code=sm_90",
                                                 "-gencode=arch=compute_90a,code=sm_90a"]
    with pytest.raises(ValueError, match="expected an architecture such as 75 or 90a"):
        build.compile_flags("cuda", archs=("7.5",))
