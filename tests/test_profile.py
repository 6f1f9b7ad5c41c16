"""The simulator's memory-access profiler, `kernels.profile`: per source line, the sectors a warp's
global request touches, the bank ways of a shared request and the active lanes, on probes with
known access patterns (tests/sim_kernels/profile_probes.cu) and on lesson 06's reductions."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernels import load, profile
from kernels.sim.profile import KINDS, Report, compiler_problem
from kernels.tools.profile import main

PROBES = Path(__file__).parent / "sim_kernels" / "profile_probes.cu"


def _line(marker: str, path: Path = PROBES) -> str:
    """'file.cu:NN' of the first line of code (not a comment) in the file that holds `marker`."""
    for i, text in enumerate(path.read_text().splitlines(), 1):
        if marker in text and not text.lstrip().startswith("//"):
            return f"{path.name}:{i}"
    raise AssertionError(f"{marker} not in {path.name}")


def _one(report: Report, kind: str, line: str):
    rows = [r for r in report.rows if r.kind == kind and r.line == line]
    assert len(rows) == 1, f"expected one {kind} row at {line}, got:\n{report}"
    return rows[0]


@pytest.fixture(scope="module")
def probes():
    if compiler_problem():
        pytest.skip(compiler_problem())
    return load(PROBES, "sim")


@pytest.mark.parametrize("stride, sectors", [(1, 4), (2, 8), (32, 32)])
def test_strided_float_loads_touch_4_8_32_sectors_per_request(probes, stride, sectors):
    n = 64 * 32
    x, out = torch.rand(n * stride), torch.empty(n)
    report = profile(probes.strided_copy, x, out, stride)
    line = _line("out[i] = x[i * stride]")
    load_row = _one(report, "global load", line)
    assert load_row.kernel == "strided_copy_kernel"
    assert load_row.requests == n // 32
    assert load_row.sectors_per_request == sectors
    assert load_row.bank_ways is None
    assert load_row.active_lanes == 32
    assert _one(report, "global store", line).sectors_per_request == 4  # the stores stay coalesced
    torch.testing.assert_close(out, x[::stride][:n])  # the profiled run computed the right answer


@pytest.mark.parametrize("stride, ways", [(1, 1), (2, 2), (32, 32), (0, 1)],
                         ids=["stride1", "stride2", "stride32", "broadcast"])
def test_shared_reads_at_stride_2_and_32_are_2_and_32_way_conflicts_and_a_broadcast_is_1(probes, stride, ways):
    out = torch.empty(2 * 256)
    report = profile(probes.shared_stride, out, stride)
    read = _one(report, "shared load", _line("words[(lane * stride) % 1024]"))
    assert read.requests == 2 * 256 // 32
    assert read.bank_ways == ways
    assert read.sectors_per_request is None
    fill = _one(report, "shared store", _line("words[w] = static_cast<float>(w)"))
    assert fill.bank_ways == 1 and fill.requests == 2 * 1024 // 32
    lanes = torch.arange(2 * 256) % 32
    assert torch.equal(out, ((lanes * stride) % 1024).float())


def test_a_branch_on_odd_threads_halves_the_active_lanes(probes):
    x = torch.rand(1024)
    out = torch.zeros(1024)
    report = profile(probes.odd_lanes, x, out)
    line = _line("threadIdx.x % 2 == 1")
    for kind in ("global load", "global store"):
        row = _one(report, kind, line)
        assert row.active_lanes == 16
        assert row.requests == 1024 // 32
        assert row.sectors_per_request == 4  # 16 lanes, every other float: still 128 bytes
    assert torch.equal(out[1::2], x[1::2]) and not out[0::2].any()


def test_an_atomic_is_one_row_of_kind_atomic_with_one_request_per_warp(probes):
    x = torch.rand(512)
    out = torch.zeros(1)
    report = profile(probes.atomic_sum, x, out)
    row = _one(report, "atomic", _line("atomicAdd(out, x[i])"))
    assert row.requests == 512 // 32 and row.sectors_per_request == 1 and row.active_lanes == 32
    assert _one(report, "global load", _line("atomicAdd(out, x[i])")).sectors_per_request == 4
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-5)


def test_a_python_function_that_calls_several_ops_is_profiled_whole(probes):
    x = torch.rand(256)

    def two_ops():
        probes.odd_lanes(x, torch.empty(256))
        probes.strided_copy(x, torch.empty(128), 2)
        return x.sum()  # PyTorch's own ops run as usual

    report = profile(two_ops)
    assert {r.kernel for r in report.rows} == {"odd_lanes_kernel", "strided_copy_kernel"}
    assert all(r.kind in KINDS for r in report.rows)
    text = str(report)
    assert text.splitlines()[0].split() == ["kernel", "line", "kind", "requests", "sectors/req", "bank", "ways",
                                            "active", "lanes"]
    assert _line("out[i] = x[i * stride]") in text and "odd_lanes_kernel" in text


def test_the_tiled_matmul_reads_each_tile_once_per_warp_without_conflicts_in_under_5_s(probes):
    a, b = torch.rand(256, 256), torch.rand(256, 256)
    profile(probes.matmul_tiled, a, b)  # builds (or finds) the profiling build
    t0 = time.perf_counter()
    probes.matmul_tiled(a, b)
    plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = profile(probes.matmul_tiled, a, b)
    took = time.perf_counter() - t0
    # 5 s where the plain run takes the 0.13 s kernels/sim/README.md states; a busier machine gets
    # proportionally more
    assert took < 5.0 * max(1.0, plain / 0.13), f"profiling took {took:.1f} s (the plain run {plain:.2f} s)"
    warps, tiles = 256 * 256 // 32, 256 // 16
    tile_loads = [r for r in report.rows if r.kind == "global load"]
    assert [r.requests for r in tile_loads] == [warps * tiles] * 2
    assert all(r.sectors_per_request == 4 for r in tile_loads)  # two rows of 16 floats: 2 x 64 bytes
    inner = _one(report, "shared load", _line("acc += as[ty][j] * bs[j][tx]"))
    assert inner.requests == warps * tiles * 16 * 2 and inner.bank_ways == 1


def test_a_function_without_sim_ops_or_something_not_callable_is_refused(probes):
    with pytest.raises(ValueError, match="called no op or function of a file loaded with the sim backend"):
        profile(lambda: torch.ones(3).sum())
    with pytest.raises(TypeError, match="expects an op"):
        profile(42)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: an op loaded for the cuda backend")
def test_an_op_loaded_for_cuda_is_refused_with_the_way_to_profile_it(probes):
    gpu = load(PROBES, "cuda")
    x = torch.rand(64, device="cuda")
    with pytest.raises(RuntimeError, match="the profile is a simulator feature: load profile_probes.cu with backend='sim'"):
        profile(gpu.odd_lanes, x, torch.empty_like(x))


def test_the_plain_sim_build_stays_uninstrumented_and_the_profiling_build_is_a_separate_library(probes):
    import shutil
    import subprocess

    from kernels.sim.instrumented import twin_of

    twin = twin_of(probes)
    assert twin.so != probes.so

    def symbols(so):
        return subprocess.run([shutil.which("nm") or "nm", str(so)], capture_output=True, text=True, check=True).stdout

    assert "__tsan_read4" in symbols(twin.so) and "cudasim_profile_rows" in symbols(twin.so)
    assert "__tsan_" not in symbols(probes.so)
    x, out = torch.rand(256), torch.zeros(256)
    probes.odd_lanes(x, out)  # outside profile: the plain build runs
    assert torch.equal(out[1::2], x[1::2])


def test_a_missing_compiler_is_named_with_what_to_install(monkeypatch):
    compiler_problem.cache_clear()
    monkeypatch.setenv("CXX", "no-such-compiler-x")
    try:
        said = compiler_problem()
        assert said and "no-such-compiler-x was not found" in said and "install g++" in said
        from kernels.tools.doctor import report as doctor_report

        assert dict(doctor_report())["profiler"].startswith("NOT AVAILABLE")
    finally:
        compiler_problem.cache_clear()


@pytest.mark.slow
def test_lesson06_sum2_runs_its_tree_with_fewer_active_lanes_than_sum3():
    """sum2 (interleaved, tid % 2s) keeps every warp busy with ever fewer lanes; sum3 (sequential,
    tid < s) packs the working threads into whole warps. Per block of 256: 255 lane-steps either way,
    in 47 warp requests for sum2 and 12 for sum3. Neither has bank conflicts."""
    if compiler_problem():
        pytest.skip(compiler_problem())
    ext = load("06_reductions", "sim")
    x = torch.rand(4 * 256)
    ref = Path(__file__).parents[1] / "kernels" / "reference" / "06_reductions.cu"
    sum2 = profile(ext.sum2, x, torch.zeros(1))
    sum3 = profile(ext.sum3, x, torch.zeros(1))
    tree2 = _one(sum2, "shared load", _line("if (tid % (2 * s) == 0) partial[tid] += partial[tid + s];", ref))
    tree3 = _one(sum3, "shared load", _line("if (tid < s) partial[tid] += partial[tid + s];", ref))
    assert tree2.active_lanes == pytest.approx(255 / 47)
    assert tree3.active_lanes == pytest.approx(255 / 12)
    assert tree2.bank_ways == tree3.bank_ways == 1


def test_make_profile_names_the_lessons_it_knows_when_given_another(capsys):
    assert main(["99"]) == 2
    assert "make profile LESSON=NN, with NN one of 04, 06, 09" in capsys.readouterr().out


@pytest.mark.slow
def test_make_profile_lesson_04_prints_the_strided_walks_sectors(capsys):
    if compiler_problem():
        pytest.skip(compiler_problem())
    assert main(["4"]) == 0
    out = capsys.readouterr().out
    for stride, sectors in [(1, 4), (2, 8), (32, 32)]:
        section = out.split(f"== scale_add3 with stride {stride}\n")[1].split("\n\n")[0]
        load_line = next(line for line in section.splitlines() if " global load " in line)
        kernel, where, _, _, requests, per_request, lanes = load_line.split()
        assert (kernel, per_request, lanes) == ("scale_add_kernel3", str(sectors), "32")


@pytest.mark.slow
def test_lesson09_matmul1_stores_a_column_of_c_in_32_sectors_and_matmul2_a_row_in_4():
    """matmul1's lanes walk down a column of C (one 32-byte sector each), matmul2's along a row (128 bytes)."""
    if compiler_problem():
        pytest.skip(compiler_problem())
    ext = load("09", "sim")
    a, b, c = torch.rand(32, 8), torch.rand(8, 32), torch.empty(32, 32)
    stores = {}
    for name in ("matmul1", "matmul2"):
        rows = [r for r in profile(getattr(ext, name), a, b, c).rows if r.kind == "global store"]
        assert len(rows) == 1 and rows[0].line.startswith("09_matmul.cu:"), rows
        stores[name] = rows[0]
    assert (stores["matmul1"].sectors_per_request, stores["matmul2"].sectors_per_request) == (32, 4)
    assert stores["matmul1"].requests == stores["matmul2"].requests == 32  # a 32x32 block: 32 warps, one store each
    torch.testing.assert_close(c, a @ b)


@pytest.mark.slow
@pytest.mark.toolkit  # host_api.cu, public extensions' host code, is built by make test-toolkit only
def test_a_pybind11_function_and_an_op_of_a_namespace_the_file_names_itself_are_profiled():
    """Most public extension code binds with PYBIND11_MODULE or registers TORCH_LIBRARY(myops, m): the profile
    runs both from the instrumented build (whose copy of `myops` gets a suffix, so it loads beside the plain one)."""
    if compiler_problem():
        pytest.skip(compiler_problem())
    ext = load(PROBES.parent / "host_api.cu", "sim")
    x = torch.rand(1000)
    for fn in (ext.axpb, lambda v, a, b: ext.axpb(v, a, b), lambda v, a, b: torch.ops.sim_host_api_test.twice(v)):
        report = profile(fn, x, 2.0, 1.0)
        assert {(r.kind, r.line) for r in report.rows} == {("global load", "host_api.cu:15"),
                                                            ("global store", "host_api.cu:15")}, report
    torch.testing.assert_close(ext.axpb(x, 2.0, 1.0), 2 * x + 1)  # the plain build is back afterwards
