"""Real-world CUDA runs unchanged on the simulator: cooperative groups, host code written for CUDA
tensors, packed accessors, cuBLAS included but not called.

The kernels live in tests/sim_compat/ and are ordinary CUDA: every op runs on the sim backend and,
where a GPU is present, on cuda too, and must agree with PyTorch on both. Tests of what only the
simulator does (its errors) run on sim alone; translator tests need no build.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels import load
from kernels.sim.translate import translate_source

# The simulator's reach beyond the lessons (public CUDA, inline PTX): `make test-toolkit` (kernels/dev/all_tests.py).
pytestmark = pytest.mark.toolkit

HERE = Path(__file__).parent / "sim_compat"
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])


def _device(backend: str) -> torch.device:
    return torch.device("cuda" if backend == "cuda" else "cpu")


@pytest.fixture(scope="module", params=BACKENDS)
def cg_ext(request):
    return request.param, load(HERE / "cg_reductions.cu", request.param)


@pytest.fixture(scope="module", params=BACKENDS)
def ext_style(request):
    return request.param, load(HERE / "extension_style.cu", request.param)


# ---------------------------------------------------------------------------------------------
# host code for CUDA tensors: the translator makes "the CUDA device" the CPU (no build)
def _body(src: str) -> str:
    return translate_source(src, "t.cu").split("\n", 2)[2]


@pytest.mark.parametrize("cuda_code, sim_code", [
    ("TORCH_CHECK(x.is_cuda());", "TORCH_CHECK(x.is_cpu());"),
    ("p->is_cuda( )", "p->is_cpu( )"),
    ("x.device().is_cuda()", "x.device().is_cpu()"),
    ("x.device().type() == torch::kCUDA", "x.device().type() == torch::kCPU"),
    ("x.to(at::kCUDA)", "x.to(at::kCPU)"),
    ("TensorOptions().device(c10::kCUDA)", "TensorOptions().device(c10::kCPU)"),
    ("TORCH_INTERNAL_ASSERT(a.device().type() == at::DeviceType::CUDA);",
     "TORCH_INTERNAL_ASSERT(a.device().type() == at::DeviceType::CPU);"),
    ("c10::DispatchKey :: CUDA", "c10::DispatchKey :: CPU"),
    ("auto y = x.cuda();", "auto y = x.cpu();"),
    ("auto y = x\n  .cuda();", "auto y = x\n  .cpu();"),
])
def test_cuda_device_in_host_code_means_the_cpu(cuda_code, sim_code):
    assert _body(cuda_code) == sim_code


@pytest.mark.parametrize("code", [
    'TORCH_CHECK(ok, "x must be a CUDA tensor: call .cuda() or .to(kCUDA)");',
    "// x.is_cuda() and DeviceType::CUDA in a comment",
    "/* kCUDA */ int kCUDAx = 1, cuda_count = my.cudaStream();",
    "bool is_cuda_tensor(const T& t); int CUDA = 2; torch::cuda::is_available();",
])
def test_cuda_words_in_strings_comments_and_other_names_are_kept(code):
    assert _body(code) == code


def test_device_rewrite_keeps_launches_and_line_numbers():
    src = "void f(at::Tensor x) {\n  k<<<1, 32>>>(x.cuda().data_ptr<float>(),\n    x.is_cuda());\n}\nint after;\n"
    out = _body(src)
    assert "x.cpu().data_ptr<float>()" in out and "x.is_cpu())" in out and "<<<" not in out
    assert out.count("\n") == src.count("\n") and out.splitlines()[4] == "int after;"


# ---------------------------------------------------------------------------------------------
# cooperative groups: warp-per-row and block reductions, llm.c style
@pytest.mark.parametrize("shape", [(1, 1), (5, 31), (9, 100), (33, 1024)])
def test_warp_per_row_layernorm_matches_torch(cg_ext, shape):
    backend, ext = cg_ext
    x = torch.randn(*shape, device=_device(backend))
    w, b = torch.randn(shape[1], device=x.device), torch.randn(shape[1], device=x.device)
    expected = torch.nn.functional.layer_norm(x, (shape[1],), w, b, eps=1e-5)
    torch.testing.assert_close(ext.layernorm_rows(x, w, b), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 1), (3, 33), (7, 257)])
def test_warp_per_row_softmax_with_greater_and_plus_matches_torch(cg_ext, shape):
    backend, ext = cg_ext
    x = torch.randn(*shape, device=_device(backend)) * 5 - 3  # rows of mostly negative values
    torch.testing.assert_close(ext.softmax_rows(x), torch.softmax(x, dim=1))


def test_warp_per_row_min_with_less_matches_torch(cg_ext):
    backend, ext = cg_ext
    x = torch.randint(-1000, 1000, (21, 70), dtype=torch.int32, device=_device(backend))
    torch.testing.assert_close(ext.row_min(x), x.amin(dim=1))


@pytest.mark.parametrize("n, threads", [(1, 32), (1000, 256), (4099, 1024), (96, 96)])
def test_block_reduction_with_block_sync_matches_torch(cg_ext, n, threads):
    backend, ext = cg_ext
    x = torch.randn(n, device=_device(backend))
    blocks = -(-n // threads)
    expected = torch.nn.functional.pad(x, (0, blocks * threads - n)).view(blocks, threads).sum(dim=1)
    torch.testing.assert_close(ext.block_sums(x, threads), expected, rtol=1e-5, atol=1e-4)


def _tile_expected(v: torch.Tensor, n: int) -> torch.Tensor:
    """What every tile member returns, column by column, as tile_ops_kernel writes it."""
    vals = v.tolist()
    rows = []
    for t, x in enumerate(vals):
        r, base = t % n, t - t % n
        tile = vals[base:base + n]
        ballot = sum(1 << i for i, y in enumerate(tile) if y > 0)
        ballot = ballot - (1 << 32) if ballot >= 1 << 31 else ballot  # the kernel stores it as int32
        rows.append([
            r, t // n, len(vals) // n, n, n,
            tile[(r + 1) % n],
            tile[r + 1] if r + 1 < n else x,
            tile[r - 1] if r >= 1 else x,
            tile[r ^ 1] if n > 1 else x,
            int(any(y > 0 for y in tile)), int(all(y > 0 for y in tile)), ballot, sum(tile),
        ])
    return torch.tensor(rows, dtype=torch.int32)


@pytest.mark.parametrize("tile", [1, 2, 4, 8, 16, 32])
def test_tile_members_give_ranks_shuffles_votes_and_sums(cg_ext, tile):
    backend, ext = cg_ext
    v = torch.randint(-2, 6, (128,), dtype=torch.int32)
    v[:32] = torch.arange(1, 33, dtype=torch.int32)  # a warp where every value is positive
    out = ext.tile_ops(v.to(_device(backend)), tile).cpu()
    torch.testing.assert_close(out, _tile_expected(v, tile))


def test_tile_size_outside_one_to_32_is_refused_with_the_sizes_allowed(cg_ext):
    backend, ext = cg_ext
    with pytest.raises(RuntimeError, match="tile must be 1, 2, 4, 8, 16 or 32, got 64"):
        ext.tile_ops(torch.zeros(64, dtype=torch.int32, device=_device(backend)), 64)


def test_thread_block_reports_ranks_sizes_and_indices_of_a_3d_block(cg_ext):
    backend, ext = cg_ext
    blocks, bx, by, bz = 2, 4, 3, 2
    out = ext.block_info(torch.empty(0, device=_device(backend)), blocks, bx, by, bz).cpu()
    n = bx * by * bz
    rows = [[r, n, n, b, r % bx, r // bx % by, r // (bx * by), bx, by, bz] for b in range(blocks) for r in range(n)]
    torch.testing.assert_close(out, torch.tensor(rows, dtype=torch.int32))


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_coalesced_threads_compact_every_positive_value_once(cg_ext, n):
    backend, ext = cg_ext
    x = torch.randn(n, device=_device(backend))
    kept, count = ext.compact_positive(x)
    positive = x[x > 0]
    assert count.item() == positive.numel()
    torch.testing.assert_close(kept[:count.item()].sort().values, positive.sort().values)


@pytest.mark.parametrize("shape", [(1, 1), (5, 40), (9, 513)])
def test_reduce_of_a_struct_with_a_device_function_gives_online_softmax(cg_ext, shape):
    backend, ext = cg_ext
    x = torch.randn(*shape, device=_device(backend)) * 8
    torch.testing.assert_close(ext.online_softmax(x), torch.softmax(x, dim=1))


def test_thread_group_run_time_tiles_and_tiles_of_a_tile_report_ranks_and_sizes(cg_ext):
    backend, ext = cg_ext
    n = 96
    out = ext.group_views(torch.empty(0, device=_device(backend)), n).cpu()
    rows = [[t, n, t % 8, 8, t % 32 // 4, 8] for t in range(n)]
    torch.testing.assert_close(out, torch.tensor(rows, dtype=torch.int32))


@pytest.mark.sim_only
def test_grid_sync_is_refused_with_a_clear_error():
    ext = load(HERE / "cg_reductions.cu", "sim")
    with pytest.raises(RuntimeError, match=r"grid-wide synchronisation \(this_grid\(\)\.sync\(\)\) at "
                                           r"cg_reductions\.cu:\d+ is not supported by the simulator"):
        ext.grid_sync(torch.zeros(4, dtype=torch.int32))


@pytest.mark.sim_only
def test_block_sync_at_two_lines_is_a_divergent_barrier_error_naming_both():
    ext = load(HERE / "cg_reductions.cu", "sim")
    src = (HERE / "cg_reductions.cu").read_text().splitlines()
    start = next(i for i, s in enumerate(src) if "divergent_sync_kernel(float" in s)
    lines = [i + 1 for i in range(start, start + 8) if "block.sync();" in src[i]]
    assert len(lines) == 2
    with pytest.raises(RuntimeError, match=rf"divergent __syncthreads: .*cg_reductions\.cu:{lines[0]}"
                                           rf".*cg_reductions\.cu:{lines[1]}"):
        ext.divergent_sync(torch.zeros(64))


# ---------------------------------------------------------------------------------------------
# the extension tutorial's host code and accessors, cuBLAS included but unused
def test_muladd_with_device_type_checks_matches_torch(ext_style):
    backend, ext = ext_style
    a, b = torch.randn(1000, device=_device(backend)), torch.randn(1000, device=_device(backend))
    torch.testing.assert_close(ext.muladd(a, b, 0.5), a * b + 0.5)


def test_device_check_still_refuses_a_tensor_elsewhere(ext_style):
    backend, ext = ext_style
    elsewhere = "meta" if backend == "sim" else "cpu"  # neither the simulator's device nor the GPU
    a = torch.empty(3, device=elsewhere)
    with pytest.raises(RuntimeError, match="a must be a CUDA tensor"):
        ext.muladd(a, a, 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_packed_accessor32_with_restrict_traits_matches_torch(ext_style, dtype):
    backend, ext = ext_style
    x = torch.randn(6, 300, dtype=dtype, device=_device(backend))
    w = torch.randn(300, dtype=dtype, device=x.device)
    torch.testing.assert_close(ext.sigmoid_scale(x, w), w * torch.sigmoid(x))


def test_packed_accessor64_on_a_3d_tensor_matches_torch(ext_style):
    backend, ext = ext_style
    x = torch.randn(3, 40, 7, dtype=torch.float64, device=_device(backend))
    torch.testing.assert_close(ext.row_offsets(x), x.sum(-1) + torch.arange(40, device=x.device))


def test_every_spelling_of_the_cuda_device_lands_where_the_kernel_runs(ext_style):
    backend, ext = ext_style
    x = torch.randn(77, device=_device(backend))
    out, held = ext.to_device(x)
    assert out.device == x.device
    torch.testing.assert_close(out, 2 * x)
    assert held.item() == 6, f"{held.item() - 1} of 5 device checks held"


@pytest.mark.sim_only
def test_a_cublas_call_beyond_the_matmuls_builds_and_raises_saying_the_stand_in_lacks_it(tmp_path):
    path = tmp_path / "calls_cublas.cu"
    path.write_text('#include "helpers.cuh"\n#include <cublas_v2.h>\n'
                    "int64_t scale() { cublasHandle_t h; cublasCreate(&h); float a = 2, x = 1;\n"
                    "  return cublasSscal(h, 1, &a, &x, 1); }\n"
                    "TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def(\"scale() -> int\", &scale); }\n")
    ext = load(path, "sim")
    with pytest.raises(RuntimeError, match="cublasSscal: the simulator's cuBLAS stand-in has only the matrix multiplications"):
        ext.scale()


# ---------------------------------------------------------------------------------------------
# the CUDA samples' shared-memory idioms: rows of dynamic shared memory, block_tile_memory
@pytest.fixture(scope="module", params=BACKENDS)
def samples_ext(request):
    return request.param, load(HERE / "samples_idioms.cu", request.param)


@pytest.mark.parametrize("shape", [(1, 1), (32, 32), (33, 65), (100, 7), (5, 300)])
def test_transpose_through_dynamic_shared_rows_matches_torch(samples_ext, shape):
    backend, ext = samples_ext
    x = torch.randn(*shape, device=_device(backend))
    torch.testing.assert_close(ext.transpose(x), x.T.contiguous(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 255, 256, 1000])
def test_block_sums_with_block_tile_memory_and_a_typed_view_of_dynamic_shared_match_torch(samples_ext, n, dtype):
    backend, ext = samples_ext
    x = torch.randn(n, dtype=dtype, device=_device(backend))
    blocks = -(-n // 256)
    expected = torch.nn.functional.pad(x, (0, blocks * 256 - n)).view(blocks, 256).sum(1)
    torch.testing.assert_close(ext.block_sums_scratch(x), expected)


# ---------------------------------------------------------------------------------------------
# torch/extension.h on the simulator: a light stand-in, and the real header when a file needs more
@pytest.fixture(scope="module", params=BACKENDS)
def pybind_ext(request):
    return request.param, load(HERE / "pybind_extension.cu", request.param)


def _sim_build_dir(ext) -> Path:
    """The build folder of a sim extension (its library lies there): a Python module's, or a
    TORCH_LIBRARY file's."""
    return Path(ext.so if hasattr(type(ext), "ops") else ext.__file__).parent


def _built_with_light_torch(ext, header: str = "cudasim_torch_extension.h") -> bool:
    """Whether the last compile of a sim extension used this light torch/extension.h (and nothing
    failed before it); the translated file names the header it was compiled with."""
    out = _sim_build_dir(ext)
    main = next((out / "sim_src").glob("sim_0_*.cpp")).read_text()
    return f"#include <{header}>" in main and not (out / "light_torch.log").exists()


@pytest.mark.parametrize("line, mapped", [
    ("#include <torch/extension.h>", "#include <cudasim_torch_extension.h>"),
    ("  #  include <torch/extension.h>", "#include <cudasim_torch_extension.h>"),
    ("#include <torch/all.h>", "#include <torch/all.h>"),
    ("// #include <torch/extension.h>", "// #include <torch/extension.h>"),
    ('const char* s = "#include <torch/extension.h>";', 'const char* s = "#include <torch/extension.h>";'),
])
def test_system_map_replaces_only_the_named_include_directives(line, mapped):
    body = translate_source(line, "t.cu", system_map={"torch/extension.h": "cudasim_torch_extension.h"})
    assert body.split("\n", 2)[2] == mapped


@pytest.mark.sim_only
@pytest.mark.parametrize("name", ["pybind_extension.cu", "extension_style.cu"])
def test_extension_files_build_on_the_sim_with_the_light_torch_header(name):
    assert _built_with_light_torch(load(HERE / name, "sim"))


@pytest.mark.parametrize("header", ["torch/extension.h", "torch/all.h"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_torch_library_file_that_includes_torch_extension_h_builds_without_pybind11(tmp_path, backend, header):
    """The .cu file of PyTorch's extension examples: torch/extension.h or (today's) torch/all.h, a
    kernel, and the op registered with TORCH_LIBRARY / TORCH_LIBRARY_IMPL(ns, CUDA, m), no pybind11.
    Made here from tests/sim_kernels/host_api.cu without its PYBIND11_MODULE block; on the simulator
    it gets the light header without pybind11, about half the compile time of the one with it."""
    src = (HERE.parent / "sim_kernels" / "host_api.cu").read_text()
    ns = f"sim_ops_style_{backend}_{header.split('/')[1][:-2]}"
    f = tmp_path / "ops_style.cu"
    f.write_text(src[:src.index("\nPYBIND11_MODULE(")].replace("sim_host_api_test", ns)
                 .replace("#include <torch/extension.h>", f"#include <{header}>"))
    ext = load(f, backend)
    if backend == "sim":
        assert _built_with_light_torch(ext, "cudasim_torch_all.h")
    x = torch.randn(1000, device=_device(backend))
    torch.testing.assert_close(getattr(torch.ops, ns).twice(x), 2 * x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dispatched_leaky_relu_through_packed_accessors_matches_torch(pybind_ext, dtype):
    backend, ext = pybind_ext
    x = torch.randn(5, 333, dtype=dtype, device=_device(backend))
    torch.testing.assert_close(ext.leaky_relu(x, slope=0.1), torch.nn.functional.leaky_relu(x, 0.1))


def test_dispatch_refuses_a_dtype_outside_floating_types_naming_the_op(pybind_ext):
    backend, ext = pybind_ext
    with pytest.raises(RuntimeError, match='"leaky_relu" not implemented for \'Int\''):
        ext.leaky_relu(torch.ones(2, 3, dtype=torch.int32, device=_device(backend)), 0.1)


def test_column_sums_through_64_bit_accessors_match_torch(pybind_ext):
    backend, ext = pybind_ext
    x = torch.randn(7, 130, device=_device(backend))
    torch.testing.assert_close(ext.column_sums(x), x.sum(0))


def test_a_vector_of_tensors_comes_back_as_a_list(pybind_ext):
    backend, ext = pybind_ext
    x = torch.randn(3, 100, dtype=torch.float64, device=_device(backend))
    first, second, ones, numel = ext.moments(x, 0.5)
    torch.testing.assert_close(first, 0.5 * x)
    torch.testing.assert_close(second, 0.5 * x * x)
    torch.testing.assert_close(ones, torch.ones_like(x))
    assert numel.tolist() == [300]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_file_beyond_the_light_header_falls_back_to_the_real_one_and_works(backend):
    ext = load(HERE / "uses_torch_nn.cu", backend)
    if backend == "sim":
        out = _sim_build_dir(ext)
        assert not _built_with_light_torch(ext)
        assert "#include <torch/extension.h>" in next((out / "sim_src").glob("sim_0_*.cpp")).read_text()
        assert "nn" in (out / "light_torch.log").read_text()  # the light build failed on torch::nn
    x = torch.randn(9, 4, device=_device(backend))
    w, b = torch.randn(3, 4, device=x.device), torch.randn(3, device=x.device)
    torch.testing.assert_close(ext.twice_linear(x, w, b), 2 * (x @ w.T + b))
