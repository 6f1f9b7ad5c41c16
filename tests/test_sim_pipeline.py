"""Asynchronous copies (<cuda_pipeline.h>: __pipeline_memcpy_async, __pipeline_commit, __pipeline_wait_prior)
run unchanged on the simulator and agree with a GPU; the simulator lands a copy only at its thread's wait.

The kernels live in tests/sim_kernels/pipeline.cu. Correct uses run on every backend against PyTorch;
the planted mistakes and the calls that break CUDA's rules are undefined on a GPU, so they run on sim alone.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels import device, load

PIPELINE = Path(__file__).parent / "sim_kernels" / "pipeline.cu"
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])
sim_only = pytest.mark.sim_only


def _line_of(marker: str) -> int:
    """The 1-based line of pipeline.cu that holds `marker`."""
    for i, line in enumerate(PIPELINE.read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker} not in {PIPELINE.name}")


@pytest.fixture(scope="module", params=BACKENDS)
def pipe(request):
    ext = load(PIPELINE, request.param)
    return ext, device(ext.backend)


@pytest.fixture(scope="module")
def sim():
    return load(PIPELINE, "sim")


@pytest.mark.parametrize("size", [4, 8, 16])
def test_copies_of_4_8_and_16_bytes_arrive_after_the_wait_and_the_barrier(pipe, size):
    ext, dev = pipe
    src = torch.randint(1, 256, (64 * size,), dtype=torch.uint8, device=dev)
    assert torch.equal(ext.async_copy(src, size, 0), src)


@pytest.mark.parametrize("size,zfill", [(4, 1), (8, 3), (16, 5), (16, 16)])
def test_zfill_writes_the_last_bytes_of_each_copy_as_zeros(pipe, size, zfill):
    ext, dev = pipe
    src = torch.randint(1, 256, (64, size), dtype=torch.uint8, device=dev)
    want = src.clone()
    want[:, size - zfill:] = 0
    assert torch.equal(ext.async_copy(src.view(-1), size, zfill).view(64, size), want)


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("rows", [1, 2, 7])
def test_a_ring_of_buffers_filled_ahead_gives_the_column_sums(pipe, stages, rows):
    ext, dev = pipe
    x = torch.randn(rows, 256, device=dev)
    torch.testing.assert_close(ext.pipelined_colsum(x, stages, 0), x.sum(0), rtol=1e-5, atol=1e-5)


@sim_only
@pytest.mark.parametrize("bug", [1, 2, 3], ids=["no_wait", "no_barrier_after_the_wait", "wait_leaves_its_own_group"])
@pytest.mark.parametrize("stages", [2, 3])
def test_a_kernel_that_reads_a_buffer_before_its_copy_landed_gets_nan(sim, bug, stages):
    # on a GPU these read stale or half-written shared memory; the simulator makes it poison every time
    out = sim.pipelined_colsum(torch.randn(5, 256), stages, bug)
    assert out.isnan().any()


@sim_only
def test_copies_of_a_block_do_not_leak_into_the_next_block(sim):
    # each launch (and block) starts with an empty queue: a stale copy from an earlier launch never lands
    sim.pipelined_colsum(torch.randn(5, 256), 3, 1)  # leaves copies queued
    x = torch.randn(4, 256)
    torch.testing.assert_close(sim.pipelined_colsum(x, 3, 0), x.sum(0), rtol=1e-5, atol=1e-5)


@sim_only
@pytest.mark.parametrize("what,marker,message", [
    (1, "MISALIGNED", r"the destination and the source must be 8-byte aligned \(the copy's size\), got destination % 8 = 4"),
    (2, "GLOBAL-DESTINATION", "the destination must be shared memory"),
    (3, "SHARED-SOURCE", "the source must be global memory"),
    (4, "ODD-SIZE", "size_and_align must be 4, 8 or 16 bytes, got 12"),
    (5, "ZFILL-ABOVE-SIZE", r"zfill \(the bytes written as zeros\) must be at most size_and_align \(8\), got 9"),
    (6, "LOCAL-SOURCE", "the source must be global memory"),
])
def test_a_copy_that_breaks_the_rules_is_refused_naming_the_line(sim, what, marker, message):
    x, y = torch.randn(64), torch.randn(64)
    with pytest.raises(RuntimeError, match=rf"__pipeline_memcpy_async at pipeline.cu:{_line_of(marker)}: {message}"):
        sim.async_misuse(x, y, what)
