"""Lesson 14, beyond one GPU: the all-reduce kernels over symmetric memory in several ranks, their bad inputs, the
exercise's self-check (its teeth: the stub and planted barrier bugs), and data-parallel training of lesson 10's model
(DDP, DDP with the lesson's kernel as its communication hook, FSDP2) against one process on the same batches.

The ranks run on the GPUs when the machine has two (NCCL), else on the simulator (gloo, shared memory between the
processes); kernels.lessons.lesson14.ranks_backend decides."""
from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.backend import resolve
from kernels.check import Diagnosis
from kernels.exercises import check_exercise, find, fitting_hint
from kernels.lessons import lesson14
from kernels.lessons import lesson14_data_parallel as dp
from kernels.lessons import lesson14_overlap as ov
from kernels.paths import reference_file
from kernels.ranks import RankError, run_ranks
from planting import assert_diagnosis, checked_in_notebook, plant, self_check, toolkit_beyond

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "14_multi_gpu" / "all_reduce.cu"
STUB = ROOT / "lessons" / "14_multi_gpu" / "all_reduce.cu"
REFERENCE = reference_file("14")


def backend() -> str:
    return lesson14.ranks_backend(None)


# ---------------------------------------------------------------------------------------------------------------
# The reference variants: every size (empty, one element, ragged packs, more than one pass of the grid) and both
# dtypes, on every rank, with the input copied in by the kernel or already in the symmetric buffer.

@pytest.mark.parametrize("op", ["all_reduce1", "all_reduce2"])
@pytest.mark.parametrize("inplace", [False, True], ids=["copied", "in_place"])
def test_every_variant_sums_every_ranks_input_on_ragged_sizes(op, inplace):
    report = lesson14.check_all_reduce(REFERENCE, op=op, inplace=inplace)
    assert report.passed, str(report)


@pytest.mark.parametrize("op", ["all_reduce1", "all_reduce2"])
def test_a_grid_capped_at_two_blocks_loops_over_every_pack_and_every_unrolled_slot(op):
    # a signal pad of 2 blocks' flags caps the grid at 2 blocks of 512 threads: 70001 floats are 17500 packs, more
    # than UNROLL x 1024 a pass, so the unrolled slots and several passes all run
    report = lesson14.check_all_reduce(REFERENCE, op=op, pad_bytes=2 * 4 * lesson14.WORLD)
    assert report.passed, str(report)


@pytest.mark.parametrize("op", ["all_reduce2", pytest.param("all_reduce1", marks=pytest.mark.toolkit)])
def test_three_ranks_hold_the_same_bits_and_the_two_shot_splits_into_three_chunks(op):
    report = lesson14.check_all_reduce(REFERENCE, op=op, world=3)
    assert report.passed, str(report)


def _bad_inputs(rank: int, world: int, path: str, be: str) -> list[str]:
    """The refusals of all_reduce1 in one rank: each bad call's message (no kernel starts, so no peer waits)."""
    from kernels.distributed import SymmetricBuffer

    ext = load(path, be, quiet=True)
    device = torch.device("cuda", rank) if be == "cuda" else torch.device("cpu")
    said = []
    with SymmetricBuffer(4096, backend=be) as buf:
        x = torch.randn(64, device=device)
        bad = [
            (x.double(), x.double()),                         # dtype
            (x, torch.empty(65, device=device)),              # shape
            (x, torch.empty(64, device=device).bfloat16()),   # dtype of out
            (x[1:], torch.empty(63, device=device)),          # not 16-byte aligned
            (torch.randn(2048, device=device), torch.empty(2048, device=device)),  # larger than the buffer
            (x, buf.view(torch.float32, 64)),                 # out inside the symmetric buffer
            (buf.view(torch.float32, 128)[4:68], torch.empty(64, device=device)),  # x partly over the buffer
        ]
        if be == "cuda":
            bad.append((x.cpu(), torch.empty(64, device=device)))  # on the CPU (the simulator has no other device)
        for a, out in bad:
            try:
                ext.all_reduce1(a, out, *buf.args())
                said.append("accepted")
            except (RuntimeError, NotImplementedError) as e:
                said.append(str(e).splitlines()[0])
        args = list(buf.args())
        for k, v in ((3, world), (3, -1), (4, 2)):           # rank out of range; a pad too small for any block
            wrong = list(args)
            wrong[k] = v
            try:
                ext.all_reduce1(x, torch.empty_like(x), *wrong)
                said.append("accepted")
            except RuntimeError as e:
                said.append(str(e).splitlines()[0])
    return said


def test_bad_inputs_are_refused_saying_what_was_expected():
    be = backend()
    said = run_ranks(_bad_inputs, 1, args=(str(REFERENCE), be), backend="nccl" if be == "cuda" else "gloo")[0]
    expected = ["x must be float32 or bfloat16", "x and out must have the same shape", "x and out must have the same dtype",
                "must be 16-byte aligned", "does not fit in the symmetric buffer", "out must not lie in the symmetric buffer",
                "x must start at the symmetric buffer's first byte", *(["x must be a CUDA tensor"] if be == "cuda" else []), "rank must be in [0, 1)", "rank must be in [0, 1)",
                "holds no block's"]
    assert len(said) == len(expected)
    for got, want in zip(said, expected):
        assert want in got, f"expected {want!r} in {got!r}"


# ---------------------------------------------------------------------------------------------------------------
# The exercise.

@checked_in_notebook
def test_the_all_reduce_solution_passes_its_self_check():
    assert check_exercise("14", "all_reduce", solution=True).passed


def test_the_stub_fails_its_self_check_with_unwritten_outputs_and_the_first_hint_fits():
    report = check_exercise("14", "all_reduce", path=STUB)
    assert_diagnosis(report, "NaN poison")
    assert fitting_hint(find("14", "all_reduce")[0], report) == 2  # the sum loop's hint


# Each a barrier bug a learner makes: (old, new) in the solution. The race check follows the ranks' accesses through
# the signals, so each is a race wherever the timing would hide it on a GPU.
PLANTED = {
    "no_release_fence": ("    __threadfence_system();  // release", "    // (no fence before the signal)"),
    "no_acquire_fence": ("    __threadfence_system();  // acquire", "    // (no fence after the wait)"),
    "gpu_scope_fence": ("    __threadfence_system();  // release", "    __threadfence();  // release"),
    "no_first_barrier": ("  for (int64_t i = first; i < n; i += stride) mine[i] = x[i];\n  barrier_ranks(pads, rank, world);",
                         "  for (int64_t i = first; i < n; i += stride) mine[i] = x[i];"),
    "no_end_barrier": ("  // No rank may write its buffer again (its next call) while a peer still reads it.\n"
                       "  barrier_ranks(pads, rank, world);", "  // (no barrier at the end)"),
    "no_block_barrier_after_the_wait": ("  __syncthreads();  // the whole block has seen every signal", ""),
}


@pytest.mark.parametrize("bug", toolkit_beyond(PLANTED, keep=("no_release_fence", "no_end_barrier")))
def test_the_self_check_reports_a_planted_barrier_bug_as_a_race_between_ranks(bug):
    if backend() != "sim":
        pytest.skip("the race check between ranks is the simulator's")
    old, new = PLANTED[bug]
    report = self_check("14", "all_reduce", plant(SOLUTION, old, new, f"lesson14_{bug}.cu"), races=True)
    assert_diagnosis(report, "data race on peer memory")
    assert any(c.diagnosis is Diagnosis.RACE for c in report.cases if not c.passed)
    if bug == "gpu_scope_fence":
        assert "__threadfence()" in "\n".join(c.detail for c in report.cases)


def test_a_sum_that_starts_from_its_own_rank_differs_between_ranks_in_three_ranks():
    bug = plant(SOLUTION, "for (int r = 0; r < world; ++r) acc += to_float(buffers[r][i]);",
                "for (int k = 0; k < world; ++k) acc += to_float(buffers[(rank + k) % world][i]);",
                "lesson14_own_rank_first.cu")
    load(bug, "sim", quiet=True)
    report = lesson14.check_all_reduce(bug, backend="sim", world=3, races=False)
    assert_diagnosis(report, "must hold the same bits")


# ---------------------------------------------------------------------------------------------------------------
# Data parallel: the ranks together reproduce one process's loss curve.

STEPS, GLOBAL_BATCH = 4, 8


@pytest.fixture(scope="module")
def alone():
    return dp.train_alone("custom", dp.SMALL, GLOBAL_BATCH, STEPS)


@pytest.mark.parametrize("route", [r if r != "fsdp" else pytest.param(r, marks=pytest.mark.toolkit) for r in dp.ROUTES])
def test_data_parallel_training_with_the_custom_kernels_follows_one_process_on_the_whole_batch(alone, route):
    if resolve(None) == "cuda":
        pytest.skip("the simulator's curve (the GPU's is measured by the benchmark)")
    gpt = dp.gpt_module()
    gpt.custom_kernels(backend="sim")  # built once here for both ranks
    load("14", "sim", quiet=True)
    curves = run_ranks(dp.train_rank, 2, args=(route, "custom", dp.SMALL, GLOBAL_BATCH, STEPS))
    assert curves[0] == curves[1]  # every rank computed the same global mean
    assert torch.allclose(torch.tensor(curves[0]), torch.tensor(alone), rtol=1e-5, atol=1e-5), (curves[0], alone)
    assert curves[0][-1] < curves[0][0]  # and it learns


def test_a_global_batch_that_does_not_split_evenly_is_refused():
    with pytest.raises(RankError, match="must split evenly over 2 ranks"):
        run_ranks(dp.train_rank, 2, args=("ddp", "eager", dp.SMALL, 7, 1))


def test_the_benchmark_needs_two_gpus_and_says_so(capsys, tmp_path):
    from kernels.benchmarks import lesson14 as bench14

    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has two GPUs: the benchmark runs (make bench LESSON=14)")
    assert bench14.run(tmp_path) == []
    assert "needs 2 GPUs" in capsys.readouterr().out


def test_the_benchmarks_bus_bandwidth_and_scaling_follow_their_definitions():
    from kernels.benchmarks import lesson14 as bench14

    rows = bench14.all_reduce_rows({1 << 20: {"eager": 20.0, "torch.compile": 25.0, "all_reduce1": 10.0}}, {1 << 20: 5.0})
    one = next(r for r in rows if r.variant == "all_reduce1")
    assert one.gbps == pytest.approx((1 << 20) / 10.0 / 1e3)  # 2 ranks: bus bytes = the data, GB/s from microseconds
    assert one.vs_eager == 2.0 and one.vs_compile == 2.5 and one.of_copy == pytest.approx(0.5)
    steps = bench14.train_rows({"1 GPU, eager": 100.0, "DDP (NCCL), eager": 105.0})
    ddp = next(r for r in steps if r.variant == "DDP (NCCL), eager")
    assert ddp.vs_eager == pytest.approx(2 * 100.0 / 105.0)


def test_the_torchrun_script_trains_on_two_ranks_and_follows_one_process():
    import subprocess
    import sys

    script = ROOT / "lessons" / "14_multi_gpu" / "train.py"
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(script), "--route", "ddp", "--kernels", "eager", "--steps", "3", "--alone"],
                         cwd=script.parent, capture_output=True, text=True, timeout=300)
    # torchrun's own traceback ends stderr; what a rank said before it dies (an abort's message) comes first
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[:3000] + "\n...\n" + run.stderr[-1000:]
    lines = run.stdout.splitlines()
    curves = [line.split(":", 1)[1].split() for line in lines
              if line.startswith(("ddp, eager kernels, 2 ranks:", "one process, the whole batch:"))]
    assert len(curves) == 2 and len(curves[0]) == 3, run.stdout
    # printed to 4 decimals: the two sums differ in their order, so a loss a hair from a rounding boundary (5.27354 on
    # one machine) may print one last digit apart; a wrong average or a missed all-reduce moves it by far more
    ranks, one = (torch.tensor([float(v) for v in c]) for c in curves)
    assert torch.allclose(ranks, one, rtol=0, atol=1.5e-4), run.stdout
    refused = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "run it with torchrun" in refused.stderr


# ---------------------------------------------------------------------------------------------------------------
# Overlap: the profiler's trace of a step, read into spans (the traces themselves are taken on two GPUs).

def _kernel(name, ts, dur, corr, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "tid": stream,
            "args": {"correlation": corr, "stream": stream}}


def _launch(corr, thread):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 1, "tid": thread,
            "args": {"correlation": corr}}


def _step_trace():
    """A step in miniature: two forward kernels, the backward's two (autograd's thread 2) with a bucket's
    all-reduce between them, the last bucket's all-reduce after them, the optimizer's kernel (main thread 1)."""
    return [_launch(1, 1), _launch(2, 1), _launch(3, 2), _launch(4, 2), _launch(5, 2), _launch(6, 2), _launch(7, 1),
            _kernel("ampere_bf16_gemm", 100, 10, 1), _kernel("vectorized_elementwise_kernel<4>", 111, 9, 2),
            _kernel("gemm_backward", 120, 20, 3), _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", 130, 5, 4, 9),
            _kernel("gemm_backward", 140, 20, 5), _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", 160, 10, 6, 9),
            _kernel("multi_tensor_apply_kernel", 170, 5, 7),
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 90, "dur": 5, "tid": 1, "args": {}}]


def test_a_steps_trace_splits_into_forward_backward_after_and_all_reduce_by_the_launching_thread():
    spans = ov.spans_from_trace(_step_trace())
    assert [(s.phase, s.start_us, s.end_us) for s in spans] == [
        (ov.FORWARD, 0, 20), (ov.BACKWARD, 20, 60), (ov.COMM, 30, 35), (ov.COMM, 60, 70), (ov.OPTIMIZER, 70, 75)]
    assert spans[2].name == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    s = ov.summary(spans)
    assert s == {"step": 0.075, "backward": 0.040, "all-reduce": 0.015, "all-reduce calls": 2, "exposed": 0.010}
    # DDP's copy of the averaged bucket back into the gradients: a backward kernel after the last all-reduce, which
    # waits for it; the all-reduce ran with nothing beside it all the same
    assert ov.exposed_us(spans + [ov.Span(ov.BACKWARD, 70, 72)]) == 10.0
    assert ov.exposed_us(spans + [ov.Span(ov.BACKWARD, 62, 66)]) == 6.0  # partly covered
    assert ov.exposed_us(spans + [ov.Span(ov.COMM, 64, 70)]) == 10.0  # two at once count once
    mine = ov.spans_from_trace([_launch(1, 1), _launch(2, 2), _kernel("gemm", 0, 10, 1),
                                _kernel("void all_reduce_kernel2<__nv_bfloat16>(...)", 5, 3, 2)])
    assert [s.phase for s in mine] == [ov.FORWARD, ov.COMM] and mine[1].name == "all_reduce_kernel2"
    with pytest.raises(ValueError, match="no GPU work"):
        ov.spans_from_trace([e for e in _step_trace() if e["cat"] != "kernel"])
    with pytest.raises(ValueError, match="no backward kernels"):
        ov.summary(spans[:1])


def test_each_route_comes_from_the_rank_that_waited_least_and_the_spans_survive_their_csv(tmp_path):
    spans = ov.spans_from_trace(_step_trace())
    waited = [s._replace(start_us=s.start_us - 40) if s.phase == ov.COMM else s for s in spans]
    picked = ov.least_waiting([{ov.BUCKETS: waited}, {ov.BUCKETS: spans}], "NVLink")
    assert picked == {f"NVLink: {ov.BUCKETS} (rank 1)": spans}
    ov.write_csv(picked, tmp_path / "o.csv", "a GPU")
    back, device = ov.read_csv(tmp_path / "o.csv")
    assert device == "a GPU" and back == picked
    ov.plot(back, tmp_path / "o.png", show=False, device=device)
    assert (tmp_path / "o.png").stat().st_size > 0


def test_the_recorded_overlap_trace_loads_and_says_what_each_route_leaves_exposed(capsys):
    spans = ov.show_recorded(show=False)
    out = capsys.readouterr().out
    assert set(spans) and all(ov.BACKWARD in {s.phase for s in ss} for ss in spans.values())
    assert out.count("exposed (no compute beside it)") == len(spans)


def test_the_compiled_autograd_route_is_refused_outside_its_context_and_the_readme_table_skips_the_trace():
    from kernels.benchmarks import RECORDED, results_table

    with pytest.raises(RuntimeError, match="built inside lesson14_data_parallel.compiled_autograd"):
        dp.wrap("ddp-compiled", torch.nn.Linear(2, 2), torch.device("cpu"), 25.0)
    assert "| 14 | data parallel, 2 GPUs |" in results_table(RECORDED)  # lesson14_overlap.csv beside it is no table
