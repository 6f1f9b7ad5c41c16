"""Lesson 10: the GPT model with the lessons' kernels swapped in. The custom-op model trains like the eager one
(loss curve and gradients), compiles as one graph, its op passes opcheck, bad input is refused with what was
expected, and the exercise's self-check fails on the stub and on planted bugs and passes the solution.

Sizes are tiny (d_model 32, 2 heads, 16 tokens, 2 blocks) so that the simulator runs each in seconds.
"""
import sys
from pathlib import Path

import pytest
import torch

from kernels.exercises import check_exercise, find, fitting_hint
from kernels.lessons.lesson10 import register_glue
from planting import assert_diagnosis, checked_in_notebook, toolkit_beyond

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "10_model"
SOLUTION = ROOT / "solutions" / "10_model"
sys.path.insert(0, str(LESSON))
import gpt  # noqa: E402  (lessons/10_model/gpt.py, as the notebook imports it)
import step_profile as sp  # noqa: E402

CFG = gpt.Config(d_model=32, n_head=2, n_layer=2, seq_len=16)
STEPS, BATCH = 8, 2
# float32 on the simulator: the kernels sum in another order than PyTorch's, a few ulps per op, so a loss
# of about 5 agrees to about 1e-6 after 8 AdamW steps; the gradients of one step to 1e-5 relative.
LOSS_TOLERANCE = 1e-4
GRAD_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def kernels(backend):
    return gpt.custom_kernels(backend=backend)


@pytest.fixture()
def models(kernels, dev):
    torch.manual_seed(0)
    eager = gpt.GPT(CFG).to(dev)
    return eager, gpt.twin(eager, kernels)


def _grads(model, x, y):
    model.zero_grad(set_to_none=True)
    gpt.loss_of(model, x, y).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def test_custom_model_has_the_eager_models_gradients_for_every_parameter(models):
    eager, custom = models
    x, y = next(gpt.batches(gpt.text_bytes(next(eager.parameters()).device), BATCH, CFG.seq_len, 1))
    want, got = _grads(eager, x, y), _grads(custom, x, y)
    assert want.keys() == got.keys() and len(got) == 5 + 12 * CFG.n_layer  # embeddings, final layernorm, head; 12 a block
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=GRAD_TOLERANCE, atol=GRAD_TOLERANCE,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_custom_model_trains_with_the_eager_models_loss_curve(models):
    eager, custom = models
    want, got = gpt.train(eager, STEPS, BATCH), gpt.train(custom, STEPS, BATCH)
    # a curve worth comparing: batches of two 16-byte windows are noisy, so the last three steps on average
    assert sum(want[-3:]) / 3 < want[0] - 0.3, f"the eager model did not learn: {want}"
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=0, atol=LOSS_TOLERANCE)


def test_custom_model_compiles_as_one_graph_without_breaks(models, dev):
    _, custom = models
    x = torch.randint(0, gpt.VOCAB, (BATCH, CFG.seq_len), device=dev)
    explained = torch._dynamo.explain(custom)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
    ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert any("causal_softmax" in o for o in ops) and any("layernorm" in o for o in ops) \
        and any("bias_gelu" in o for o in ops), f"the custom ops are not in the graph: {sorted(ops)}"


def test_sdpa_model_has_the_eager_models_loss_and_gradients(models):
    eager, _ = models
    sdpa = gpt.twin(eager, gpt.SDPA)
    x, y = next(gpt.batches(gpt.text_bytes(next(eager.parameters()).device), BATCH, CFG.seq_len, 1))
    want, got = _grads(eager, x, y), _grads(sdpa, x, y)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=GRAD_TOLERANCE, atol=GRAD_TOLERANCE,
                                   msg=lambda m, name=name: f"{name}: {m}")
    losses = [gpt.train(m, 3, BATCH) for m in (eager, sdpa)]
    torch.testing.assert_close(torch.tensor(losses[1]), torch.tensor(losses[0]), rtol=0, atol=LOSS_TOLERANCE)


def test_eager_and_sdpa_models_compile_as_one_graph_with_the_profiler_ranges(models, dev):
    # the custom model's ranges are compiled by the two tests above and below
    eager, _ = models
    x = torch.randint(0, gpt.VOCAB, (BATCH, CFG.seq_len), device=dev)
    for model in (eager, gpt.twin(eager, gpt.SDPA)):
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons


def test_compiled_custom_model_trains_like_the_eager_one(models):
    # aot_eager: dynamo and AOT autograd trace the ops through their fake kernels and derivatives, as the
    # default backend does; the generated code (inductor's C++ on a CPU takes a minute) is not what is tested
    eager, custom = models
    torch._dynamo.reset()
    compiled = torch.compile(custom, fullgraph=True, backend="aot_eager")
    want, got = gpt.train(eager, 3, BATCH), gpt.train(custom, 3, BATCH, step_fn=compiled)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=0, atol=LOSS_TOLERANCE)


def test_causal_softmax_op_passes_opcheck(dev, backend):
    op = register_glue(backend=backend)
    scores = torch.randn(2 * 3 * 5, 5, device=dev, requires_grad=True)
    torch.library.opcheck(op, (scores, 0.5, 5))  # raises on a failed test


def test_bad_inputs_raise_with_what_was_expected(models, dev, backend):
    _, custom = models
    with pytest.raises(ValueError, match="sequences must have 1 to seq_len"):
        custom(torch.zeros(1, CFG.seq_len + 1, dtype=torch.long, device=dev))
    with pytest.raises(ValueError, match="int64 byte ids"):
        custom(torch.zeros(1, 4, device=dev))
    with pytest.raises(ValueError, match="multiple of n_head"):
        gpt.Config(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="n_layer must be a positive int"):
        gpt.Config(n_layer=0)
    op = register_glue(backend=backend)
    with pytest.raises(RuntimeError, match="q_len must be positive and divide the rows"):
        op(torch.randn(10, 4, device=dev), 1.0, 4)
    with pytest.raises(FileNotFoundError, match="attention_softmax.py"):
        register_glue(LESSON / "no_such_glue.py", backend)


def test_self_check_fails_on_the_stub_naming_the_unwritten_parts(capsys):
    report = check_exercise("10", path=LESSON / "attention_softmax.py")
    assert_diagnosis(report, "raised NotImplementedError")
    assert "attention_softmax.py is not finished: the fake kernel of causal_softmax is not written yet" in report.hints
    assert "attention_softmax.py is not finished: the backward of causal_softmax is not written yet" in report.hints


@checked_in_notebook
def test_self_check_passes_on_the_solution(capsys):
    assert check_exercise("10", solution=True).passed


# Bugs planted in a copy of the solution's glue: the replacements (old, new), the diagnoses the self-check
# must give, and the number of the hint that fits the failure (None: not asserted, where the failures span
# the parts of several hints).
FAKE = "        return torch.empty_like(scores)\n\n"
SCALED = "(dx if ctx.scale == 1.0 else dx * ctx.scale)"
PLANTED_BUGS = {
    "fake kernel of the wrong shape": ([(FAKE, "        return torch.empty_like(scores)[:, :1]\n\n")],
                                       ("the fake kernel's result has another shape than the op's",
                                        "returns shape (16, 1) and the op shape (16, 8)"), 1),
    # both pass a float32 check on the CPU (the simulator's device), and fail a bfloat16 model under torch.compile
    "fake kernel without a dtype or device": ([(FAKE, "        return torch.empty(scores.shape)\n\n")],
                                              ("the fake kernel's result has another dtype than the op's",
                                               "for bfloat16 scores", "returns dtype float32"), 1),
    "fake kernel always float32": ([(FAKE, "        return torch.empty_like(scores, dtype=torch.float32)\n\n")],
                                   ("the fake kernel's result has another dtype than the op's",
                                    "for bfloat16 scores", "returns dtype float32"), 1),
    # right gradients, but the output and its graph hold each other until a garbage collection
    "output kept as an attribute of ctx": ([("ctx.save_for_backward(output)", "ctx.y = output"),
                                            ("(y,) = ctx.saved_tensors", "y = ctx.y")],
                                           ("the op's output is kept alive after the graph is freed",
                                            "save tensors with ctx.save_for_backward, not as ctx attributes"), 2),
    # the model calls the op with scale 1, where neither can show
    "scale left out of the gradient": ([(SCALED, "dx")],
                                       ("elements differ", "in grad of scores",
                                        "the gradient at scale 0.5 is 2 times autograd's: the backward leaves the "
                                        "scale out"), 3),
    "scale applied twice": ([(SCALED, "dx * ctx.scale * ctx.scale")],
                            ("the gradient at scale 0.5 is 0.5 times autograd's: the backward multiplies by the "
                             "scale twice",), 3),
    "scores saved instead of the output": ([("ctx.save_for_backward(output)", "ctx.save_for_backward(inputs[0])")],
                                           ("elements differ", "in grad of scores",
                                            "the gradient at scale 0.5 differs from autograd's, and not by a factor "
                                            "of the scale"), None),
    "strided gradient passed to the kernel": ([("ops.softmax_backward(y, grad.contiguous())",
                                                "ops.softmax_backward(y, grad)")], ("must be contiguous",), None),
}


@pytest.mark.parametrize("bug", toolkit_beyond(sorted(PLANTED_BUGS), keep=("fake kernel always float32",
                                                                             "output kept as an attribute of ctx",
                                                                             "scale left out of the gradient")))
def test_self_check_names_a_planted_bug_and_the_hint_that_fits_it(bug, tmp_path, capsys):
    replacements, diagnoses, hint = PLANTED_BUGS[bug]
    source = (SOLUTION / "attention_softmax.py").read_text()
    for old, new in replacements:
        assert source.count(old) == 1, f"the solution no longer contains {old!r} once: update the planted bug"
        source = source.replace(old, new)
    planted = tmp_path / "attention_softmax.py"
    planted.write_text(source + f"# planted bug: {bug}\n")
    report = check_exercise("10", path=planted)
    assert_diagnosis(report, *diagnoses)
    assert hint is None or fitting_hint(find("10", "attention_softmax")[0], report) == hint


def test_the_compiled_step_runs_for_more_glues_than_dynamos_recompile_limit(tmp_path, dev, backend):
    # a learner edits the glue many times in one session, and each edit is an op of its own
    from kernels.lessons.lesson10 import _compiled_step

    source = (SOLUTION / "attention_softmax.py").read_text()
    for i in range(torch._dynamo.config.cache_size_limit + 1):  # recompile_limit, by its older name
        glue = tmp_path / str(i) / "attention_softmax.py"
        glue.parent.mkdir()
        glue.write_text(source + f"# edit {i}\n")
        _compiled_step(register_glue(glue, backend), dev)  # raises FailOnRecompileLimitHit past the limit


def test_benchmark_pieces_run_and_its_parity_check_catches_a_wrong_model(monkeypatch, dev, backend, capsys,
                                                                          tmp_path):
    # the GPU benchmark's own functions, at the tests' tiny size in float32 on this backend
    from kernels.benchmarks import lesson10 as bench10

    for name, value in (("CONFIG", dict(d_model=32, n_head=2, n_layer=1, seq_len=16)), ("BATCH", 2),
                        ("DTYPE", torch.float32), ("DEVICE", str(dev)), ("BACKEND", backend)):
        monkeypatch.setattr(bench10, name, value)
    eager, custom = bench10.models()
    assert bench10.parity(eager, custom)
    assert bench10.parity(eager, bench10.sdpa_model(eager), "SDPA")
    monkeypatch.setattr(bench10, "QUEUE_REPEATS", 1)
    rows = {(r.bench, r.variant): r.ms for r in bench10._profile_rows(eager, custom, tmp_path)}
    for model in ("eager", "custom ops"):
        parts = [ms for (b, v), ms in rows.items() if b == bench10.PARTS and v.startswith(model + ": ")]
        assert len(parts) == 6 and rows[(bench10.QUEUE, f"{model}: {bench10.KERNELS}")] == pytest.approx(sum(parts))
        assert all(rows[(bench10.QUEUE, f"{model}: {what}{end}")] > 0 for what in (bench10.QUEUED, bench10.STEP)
                   for end in ("", f", {bench10.LOW}", f", {bench10.HIGH}"))
        assert bench10.queue_verdict({v: ms for (b, v), ms in rows.items() if b == bench10.QUEUE}, model)
    queue = [bench10.Row(b, v, ms, None, None, None, None, None) for (b, v), ms in rows.items()]
    pitfalls = [bench10.Row(bench10.PITFALLS, str(i), i, None, None, None, None, None) for i in range(4)]
    unsynced = bench10._with_unsynced(pitfalls, queue)[2]  # after the cold and the steady step
    assert (unsynced.variant, unsynced.ms) == (bench10.UNSYNCED, rows[(bench10.QUEUE, f"eager: {bench10.QUEUED}")])
    assert 0 < (tmp_path / bench10.TRACE_PNG).stat().st_size < 150_000
    assert capsys.readouterr().out.count("ms (agree)") == 2
    bench10.train_step(custom, custom)()  # trains the custom model's weights away from the eager model's
    assert bench10.inference(custom)().shape == (2, 16, gpt.VOCAB)
    with torch.no_grad():
        custom.blocks[0].fc.weight.mul_(3)  # a wrong model: far outside the bf16 tolerance
    assert not bench10.parity(eager, custom)


def test_the_queue_verdict_is_given_only_outside_the_spread_of_the_queueing():
    from kernels.benchmarks import lesson10 as bench10

    def figures(low, median, high, kernels):
        named = {bench10.QUEUED: median, f"{bench10.QUEUED}, {bench10.LOW}": low,
                 f"{bench10.QUEUED}, {bench10.HIGH}": high, bench10.KERNELS: kernels, bench10.STEP: 20.0,
                 f"{bench10.STEP}, {bench10.LOW}": 19.0, f"{bench10.STEP}, {bench10.HIGH}": 21.0}
        return {f"m: {what}": ms for what, ms in named.items()}

    assert "(CPU-bound)" in bench10.queue_verdict(figures(13.0, 14.0, 16.0, 12.2), "m")
    assert "keeps ahead" in bench10.queue_verdict(figures(9.0, 10.0, 12.0, 21.5), "m")
    for kernels in (13.0, 14.0, 16.0):  # inside the range, or on its edge: no verdict
        line = bench10.queue_verdict(figures(13.0, 14.0, 16.0, kernels), "m")
        assert "too close to call" in line and "CPU-bound" not in line
    old = {k: v for k, v in figures(13.0, 14.0, 16.0, 12.2).items()  # recorded without the spread
           if not k.endswith((bench10.LOW, bench10.HIGH))}
    assert "no verdict" in bench10.queue_verdict(old, "m") and "CPU-bound" not in bench10.queue_verdict(old, "m")
    assert bench10._spread("x", [float(v) for v in range(1, 22)]) == {"x": 11.0, f"x, {bench10.LOW}": 3.0,
                                                                       f"x, {bench10.HIGH}": 19.0}


# The parts of a training step by the profiler ranges of gpt.py: the ops of the eager attention's scale, mask
# and softmax (the mask's construction, masked_fill's clone), forward and backward, are in the attention part,
# not in "other" where their names would put them; every event's own time is counted once.
PART_OPS = {
    "eager": {gpt.ATTENTION: ("aten::mul", "aten::ones", "aten::tril", "aten::bitwise_not", "aten::masked_fill",
                              "aten::_softmax", "MulBackward0", "MaskedFillBackward0", "SoftmaxBackward0",
                              "aten::_softmax_backward_data"),
              gpt.LAYERNORM: ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
              gpt.BIAS_GELU: ("aten::gelu", "aten::gelu_backward"),
              "matmul": ("aten::mm", "aten::bmm", "aten::addmm")},
    "custom": {gpt.ATTENTION: ("aten::mul", "MulBackward0", "softmax7", "softmax_backward", "causal_softmax"),
               gpt.LAYERNORM: ("layernorm", "layernorm_backward"),
               gpt.BIAS_GELU: ("bias_gelu", "bias_gelu_backward"),
               "matmul": ("aten::mm", "aten::bmm", "aten::addmm")}}


@pytest.mark.parametrize("name", ["eager", "custom"])
def test_profile_parts_come_from_the_ranges_and_count_every_event_once(models, name):
    assert gpt.RANGE == sp.RANGE and (gpt.ATTENTION, gpt.LAYERNORM, gpt.BIAS_GELU) == sp.SWAPPED  # one spelling
    model = models[name == "custom"]
    prof = sp.profile_steps(gpt.trainer(model, batch=BATCH), on_gpu=False)
    found = {}
    for e, part in sp.parts_of_events(prof):
        found.setdefault(e.name.split("::")[-1], set()).add(part)
    for part, ops in PART_OPS[name].items():
        for op in ops:
            seen = {p for n, ps in found.items() if n == op.split("::")[-1] for p in ps}
            assert seen == {part}, f"{op} of the {name} model is filed under {sorted(seen)}, not {part!r}"
    ms = sp.time_by_part(prof, on_gpu=False)
    total = sum(e.self_cpu_time_total for e in prof.key_averages() if not e.key.startswith("ProfilerStep"))
    assert abs(sum(ms.values()) - total / 1000 / sp.ACTIVE) < 1e-6 * total, (ms, total)
    assert sum(ms.values()) == pytest.approx(sp.total_ms(prof, on_gpu=False), rel=1e-9)
