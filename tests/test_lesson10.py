"""Lesson 10: the GPT model with the lessons' kernels swapped in. The custom-op model trains like the eager one
(loss curve and gradients), compiles as one graph, its op passes opcheck, bad input is refused with what was
expected, and the exercise's self-check fails on the stub and on planted bugs and passes the solution.

Sizes are tiny (d_model 32, 2 heads, 16 tokens, 2 blocks) so that the simulator runs each in seconds.
"""
import sys
from pathlib import Path

import pytest
import torch

from kernels.exercises import check_exercise
from kernels.lessons.lesson10 import register_glue
from planting import assert_diagnosis

ROOT = Path(__file__).resolve().parent.parent
LESSON = ROOT / "lessons" / "10_model"
SOLUTION = ROOT / "solutions" / "10_model"
sys.path.insert(0, str(LESSON))
import gpt  # noqa: E402  (lessons/10_model/gpt.py, as the notebook imports it)

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
    assert_diagnosis(report, "raised OpCheckError", "raised NotImplementedError")
    assert "attention_softmax.py is not finished: the fake kernel of causal_softmax is not written yet" in report.hints
    assert "attention_softmax.py is not finished: the backward of causal_softmax is not written yet" in report.hints


def test_self_check_passes_on_the_solution(capsys):
    assert check_exercise("10", solution=True).passed


# Bugs planted in a copy of the solution's glue: (old, new, the diagnoses the self-check must give).
PLANTED_BUGS = {
    "fake kernel of the wrong shape": ("        return torch.empty_like(scores)\n\n",
                                       "        return torch.empty_like(scores)[:, :1]\n\n",
                                       ("raised OpCheckError", "test_faketensor failed")),
    "scale left out of the gradient": ("(dx if ctx.scale == 1.0 else dx * ctx.scale)", "dx",
                                       ("elements differ", "in grad of scores")),
    "scores saved instead of the output": ("ctx.save_for_backward(output)", "ctx.save_for_backward(inputs[0])",
                                           ("elements differ", "in grad of scores")),
    "strided gradient passed to the kernel": ("ops.softmax_backward(y, grad.contiguous())",
                                              "ops.softmax_backward(y, grad)", ("must be contiguous",)),
}


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_self_check_names_a_planted_bug(bug, tmp_path, capsys):
    old, new, diagnoses = PLANTED_BUGS[bug]
    source = (SOLUTION / "attention_softmax.py").read_text()
    assert source.count(old) == 1, f"the solution no longer contains {old!r} once: update the planted bug"
    planted = tmp_path / "attention_softmax.py"
    planted.write_text(source.replace(old, new) + f"# planted bug: {bug}\n")
    assert_diagnosis(check_exercise("10", path=planted), *diagnoses)


def test_benchmark_pieces_run_and_its_parity_check_catches_a_wrong_model(monkeypatch, dev, backend, capsys):
    # the GPU benchmark's own functions, at the tests' tiny size in float32 on this backend
    from kernels.benchmarks import lesson10 as bench10

    for name, value in (("CONFIG", dict(d_model=32, n_head=2, n_layer=1, seq_len=16)), ("BATCH", 2),
                        ("DTYPE", torch.float32), ("DEVICE", str(dev)), ("BACKEND", backend)):
        monkeypatch.setattr(bench10, name, value)
    eager, custom = bench10.models()
    assert bench10.parity(eager, custom)
    bench10.train_step(custom, custom)()  # trains the custom model's weights away from the eager model's
    assert bench10.inference(custom)().shape == (2, 16, gpt.VOCAB)
    with torch.no_grad():
        custom.blocks[0].fc.weight.mul_(3)  # a wrong model: far outside the bf16 tolerance
    assert not bench10.parity(eager, custom)
