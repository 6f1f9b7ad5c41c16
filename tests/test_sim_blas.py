"""cuBLAS and cuBLASLt as llm.c's dev/cuda files and extensions call them, linked with load's extra_ldflags:
the real libraries on cuda, the simulator's stand-ins on sim (kernels/sim/include/cublas_v2.h, cublasLt.h),
each product compared with torch.matmul; and load's link options (extra_ldflags, extra_include_paths,
extra_cuda_cflags, extra_objects): checked, and part of the build cache's key.

The ops (tests/sim_compat/blas_calls.cu) take flat buffers that the tests read as column-major matrices, so
leading dimensions, transposes and batch strides are all exercised as cuBLAS sees them.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernels import load, load_inline
from kernels.build import BuildError, is_cached

pytestmark = pytest.mark.toolkit

HERE = Path(__file__).parent / "sim_compat"
BLAS = HERE / "blas_calls.cu"
LINK = ["-lcublas", "-lcublasLt"]
BACKENDS = ["sim"] + (["cuda"] if torch.cuda.is_available() else [])
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module", params=BACKENDS)
def blas(request):
    return request.param, load(BLAS, request.param, extra_ldflags=LINK)


def _dev(backend):
    return "cuda" if backend == "cuda" else "cpu"


def colmajor(buf: torch.Tensor, rows: int, cols: int, ld: int, offset: int = 0) -> torch.Tensor:
    """The rows x cols column-major matrix with leading dimension ld that starts at buf[offset]."""
    return buf[offset:offset + ld * cols].view(cols, ld)[:, :rows].T


def buffer(rows, cols, ld, dtype, device, batch=1, stride=0, gen=None):
    n = max(ld * cols, (batch - 1) * stride + ld * cols)
    return torch.randn(n, generator=gen).to(dtype=dtype, device=device)


def op(buf, trans, rows, cols, ld, offset=0):
    """op(X) of a stored matrix: X is rows x cols as op(X) needs it, stored transposed when `trans`."""
    return colmajor(buf, cols, rows, ld, offset).T if trans else colmajor(buf, rows, cols, ld, offset)


def expected(a, b, c0, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, oa=0, ob=0, oc=0):
    A = op(a, ta, m, k, lda, oa).double()
    B = op(b, tb, k, n, ldb, ob).double()
    out = alpha * A @ B
    if beta:
        out = out + beta * colmajor(c0, m, n, ldc, oc).double()
    return out


def close(got, want, dtype):
    tol = TOL[dtype]
    torch.testing.assert_close(got.double().cpu(), want.cpu(), atol=tol * (1 + want.abs().max().item()), rtol=tol)


SHAPES = [(5, 6, 4), (33, 17, 64), (1, 40, 3)]


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_sgemm_with_transposes_and_padded_leading_dimensions_matches_torch(blas, ta, tb, m, n, k):
    backend, ext = blas
    g, dev = torch.Generator().manual_seed(m * 100 + n + k + 7 * ta + 3 * tb), _dev(backend)
    lda, ldb, ldc = (k if ta else m) + 3, (n if tb else k) + 1, m + 2
    a = buffer(*((k, m) if ta else (m, k)), lda, torch.float32, dev, gen=g)
    b = buffer(*((n, k) if tb else (k, n)), ldb, torch.float32, dev, gen=g)
    c = buffer(m, n, ldc, torch.float32, dev, gen=g)
    c0 = c.clone()
    ext.sgemm(a, b, c, ta, tb, m, n, k, lda, ldb, ldc, 1.5, -0.5)
    close(colmajor(c, m, n, ldc), expected(a, b, c0, ta, tb, m, n, k, lda, ldb, ldc, 1.5, -0.5), torch.float32)
    pad = c.view(n, ldc)[:, m:]  # the padding between columns is not written
    assert torch.equal(pad, c0.view(n, ldc)[:, m:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("trans,m,n,incx,incy", [(0, 5, 7, 1, 1), (1, 5, 7, 2, 3), (0, 33, 1, 3, 2), (1, 1, 40, 1, 1)])
def test_gemv_with_a_transpose_and_strided_vectors_matches_torch(blas, dtype, trans, m, n, incx, incy):
    # the CUDA samples' UnifiedMemoryStreams calls cublasDgemv
    backend, ext = blas
    g, dev = torch.Generator().manual_seed(m + 10 * n + incx), _dev(backend)
    lda = m + 2
    a = buffer(m, n, lda, dtype, dev, gen=g)
    xs, ys = (m, n) if trans else (n, m)  # op(A) x: x has op(A)'s columns, y its rows
    x = torch.randn((xs - 1) * incx + 1, generator=g).to(dtype=dtype, device=dev)
    y = torch.randn((ys - 1) * incy + 2, generator=g).to(dtype=dtype, device=dev)  # one element past the last
    y0 = y.clone()
    ext.gemv(a, x, y, trans, m, n, lda, incx, incy, 1.5, -0.5)
    want = 1.5 * op(a.double().cpu(), trans, ys, xs, lda) @ x.double().cpu()[::incx] - 0.5 * y0.double().cpu()[:-1:incy]
    torch.testing.assert_close(y.double().cpu()[:-1:incy], want, rtol=1e-5, atol=1e-5)
    others = torch.ones_like(y, dtype=torch.bool)
    others[:-1:incy] = False
    assert torch.equal(y[others], y0[others])  # only y's own elements are written


@pytest.mark.parametrize("dtype,out_dtype", [(torch.float32, torch.float32), (torch.float16, torch.float16),
                                             (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32),
                                             (torch.bfloat16, torch.float32)])
def test_gemm_ex_in_each_data_type_matches_torch(blas, dtype, out_dtype):
    backend, ext = blas
    g, dev = torch.Generator().manual_seed(5), _dev(backend)
    m, n, k = 24, 10, 48
    # llm.c's call: out (B*T, OC) = inp @ weight.T, as cuBLAS sees it: op(A) = weight^T, A stored (C x OC)
    a, b = buffer(k, m, k, dtype, dev, gen=g), buffer(k, n, k, dtype, dev, gen=g)
    c = torch.full((m * n,), float("nan"), dtype=out_dtype, device=dev)  # beta 0: C is not read
    ext.gemm_ex(a, b, c, 1, 0, m, n, k, k, k, m, 1.0, 0.0)
    want = expected(a, b, c, 1, 0, m, n, k, k, k, m, 1.0, 0.0)
    close(colmajor(c, m, n, m), want, dtype if out_dtype == dtype else torch.float32)


@pytest.mark.parametrize("ex", [False, True])
def test_strided_batched_gemm_matches_torch_bmm(blas, ex):
    backend, ext = blas
    g, dev = torch.Generator().manual_seed(11), _dev(backend)
    m, n, k, batch = 7, 9, 5, 3
    sa, sb, sc = m * k + 4, k * n + 2, m * n + 1  # gaps between the matrices
    a = buffer(m, k, m, torch.float32, dev, batch, sa, g)
    b = buffer(n, k, n, torch.float32, dev, batch, sb, g)  # stored n x k: op(B) = B^T
    c = buffer(m, n, m, torch.float32, dev, batch, sc, g)
    c0 = c.clone()
    call = ext.gemm_batched_ex if ex else ext.sgemm_batched
    call(a, b, c, 0, 1, m, n, k, m, sa, n, sb, m, sc, batch, 1.0, 2.0)
    for i in range(batch):
        want = expected(a, b, c0, 0, 1, m, n, k, m, n, m, 1.0, 2.0, i * sa, i * sb, i * sc)
        close(colmajor(c, m, n, m, i * sc), want, torch.float32)


EPILOGUES = {"DEFAULT": 1, "RELU": 2, "BIAS": 4, "RELU_BIAS": 6, "GELU": 32, "GELU_BIAS": 36}


@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_cublaslt_matmul_with_llm_c_layouts_and_epilogues_matches_torch(blas, epilogue):
    backend, ext = blas
    g, dev = torch.Generator().manual_seed(3), _dev(backend)
    BT, C, OC = 12, 32, 20  # llm.c's matmul_forward3: out (BT, OC) = inp (BT, C) @ weight (OC, C)^T + bias
    inp, weight = torch.randn(BT, C, generator=g).to(dev), torch.randn(OC, C, generator=g).to(dev)
    bias = torch.randn(OC, generator=g).to(dev) if "BIAS" in epilogue else torch.empty(0, device=dev)
    out = torch.full((BT, OC), float("nan"), device=dev)
    ext.lt_matmul(weight, inp, out, out, bias, 1, 0, OC, BT, C, C, C, OC, EPILOGUES[epilogue], 1.0, 0.0)
    want = inp.double() @ weight.double().T + (bias.double() if bias.numel() else 0)
    if "RELU" in epilogue:
        want = torch.relu(want)
    if "GELU" in epilogue:
        want = torch.nn.functional.gelu(want, approximate="tanh")
    close(out, want, torch.float32)


def test_cublaslt_adds_beta_c_from_a_separate_matrix(blas):
    backend, ext = blas
    g, dev = torch.Generator().manual_seed(4), _dev(backend)
    m, n, k = 6, 5, 7
    a, b, c = (torch.randn(s, generator=g).to(dev) for s in (m * k, k * n, m * n))
    d = torch.zeros(m * n, device=dev)
    ext.lt_matmul(a, b, c, d, torch.empty(0, device=dev), 0, 0, m, n, k, m, k, m, 1, 0.5, 3.0)
    close(colmajor(d, m, n, m), expected(a, b, c, 0, 0, m, n, k, m, k, m, 0.5, 3.0), torch.float32)


# ---- what the stand-ins refuse (sim only): an error naming the call and the argument, never another answer
@pytest.fixture(scope="module")
def sim_blas():
    return load(BLAS, "sim", extra_ldflags=LINK)


@pytest.mark.sim_only
def test_an_epilogue_the_stand_in_lacks_is_an_error_naming_it(sim_blas):
    ext, x = sim_blas, torch.randn(16)
    with pytest.raises(RuntimeError, match=r"cublasLtMatmul: the epilogue 164 is not one the stand-in has"):
        ext.lt_matmul(x, x, x, x.clone(), x[:4], 0, 0, 4, 4, 4, 4, 4, 4, 164, 1.0, 0.0)  # GELU_AUX_BIAS


@pytest.mark.sim_only
def test_a_bad_leading_dimension_or_mixed_types_are_errors_naming_the_argument(sim_blas):
    ext, x = sim_blas, torch.randn(64)
    with pytest.raises(RuntimeError, match=r"cublasSgemm: lda is 3, less than the 4 rows"):
        ext.sgemm(x, x, x, 0, 0, 4, 4, 4, 3, 4, 4, 1.0, 0.0)
    with pytest.raises(RuntimeError, match=r"cublasGemmEx: Btype is CUDA_R_32F, not Atype's CUDA_R_16F"):
        ext.gemm_ex(x.half(), x, x, 0, 0, 4, 4, 4, 4, 4, 4, 1.0, 0.0)


# ---- load's link options ---------------------------------------------------------------------------
def test_link_options_are_checked_before_any_build(tmp_path):
    with pytest.raises(ValueError, match="extra_ldflags must be a list of strings"):
        load(BLAS, "sim", extra_ldflags="-lcublas")
    with pytest.raises(FileNotFoundError, match="extra_include_paths: no such folder: nowhere/at/all"):
        load(BLAS, "sim", extra_include_paths=["nowhere/at/all"])
    with pytest.raises(FileNotFoundError, match="extra_objects: no such object or library file"):
        load(BLAS, "sim", extra_objects=[tmp_path / "missing.o"])
    with pytest.raises(FileNotFoundError, match="'libfoo.a' is neither an option"):
        load(BLAS, "sim", extra_ldflags=["libfoo.a"])
    with pytest.raises(FileNotFoundError, match="extra_ldflags: no such library folder: nowhere"):
        load_inline("linked", "__global__ void k() {}\n", "sim", extra_ldflags=["-Lnowhere", "-lfoo"])


@pytest.mark.sim_only
def test_a_library_or_flag_the_simulator_cannot_take_is_a_build_error_naming_it(tmp_path):
    with pytest.raises(BuildError, match="-lcurand: the simulator has no stand-in for libcurand"):
        load(BLAS, "sim", extra_ldflags=LINK + ["-lcurand"], quiet=True)
    with pytest.raises(BuildError, match="does not know nvcc's option '--frobnicate'"):
        load(BLAS, "sim", extra_ldflags=LINK, extra_cuda_cflags=["--frobnicate"], quiet=True)
    fake = tmp_path / "gpu.o"
    fake.write_bytes(b"\x7fELF....nv_fatbin....")  # what nvcc's objects hold: GPU code
    with pytest.raises(BuildError, match="gpu.o was compiled by nvcc for the GPU"):
        load(BLAS, "sim", extra_ldflags=LINK, extra_objects=[fake], quiet=True)


def test_the_link_options_are_part_of_the_cache_key(blas, tmp_path):
    backend, _ = blas
    assert is_cached(BLAS, backend, extra_ldflags=LINK)
    assert not is_cached(BLAS, backend, extra_ldflags=LINK + ["-lm"])
    assert not is_cached(BLAS, backend, extra_ldflags=LINK, extra_include_paths=[tmp_path])
    assert not is_cached(BLAS, backend, extra_ldflags=LINK, extra_cuda_cflags=["-DUNUSED=1"])
