"""How fast the simulator is: `python -m kernels.sim.speed`.

Four figures, each against the bar the simulator should stay under on a small laptop:
a 256x256 fp32 matmul with 16x16 shared-memory tiles, a 256x256x256 fp16 WMMA matmul (tensor-core
fragments, one warp per 16x16 tile), a 2^20-element vector add, and the sim
build of a one-op file with light headers (into a fresh temporary build folder, so uncached; the
first build there also precompiles the common headers once, and is shown apart).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch

SOURCE = r'''
#include "helpers.cuh"
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty.h>
#include <cuda_fp16.h>
#include <mma.h>

// one thread per output element; each 16x16 block walks K in 16-wide tiles through shared memory
__global__ void matmul_tiled_kernel(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[16][16];
  __shared__ float tb[16][16];
  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += 16) {
    ta[threadIdx.y][threadIdx.x] = a[row * n + k0 + threadIdx.x];
    tb[threadIdx.y][threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
    __syncthreads();  // wait until both tiles are loaded
    for (int k = 0; k < 16; ++k) acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();  // wait until everyone is done with the tiles before they are overwritten
  }
  c[row * n + col] = acc;
}

// one warp per 16x16 tile of c, its fragments loaded straight from global memory
__global__ void matmul_wmma_kernel(const __half* a, const __half* b, float* c, int n) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  const int row = blockIdx.y * 16, col = blockIdx.x * 16;
  for (int k0 = 0; k0 < n; k0 += 16) {
    wmma::load_matrix_sync(fa, a + row * n + k0, n);
    wmma::load_matrix_sync(fb, b + k0 * n + col, n);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c + row * n + col, acc, n, wmma::mem_row_major);
}

__global__ void add_kernel(const float* x, const float* y, float* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  int n = a.size(0);
  TORCH_CHECK(n % 16 == 0, "n must be a multiple of 16");
  auto c = at::empty_like(a);
  matmul_tiled_kernel<<<dim3(n / 16, n / 16), dim3(16, 16)>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                             c.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return c;
}

at::Tensor matmul_wmma(const at::Tensor& a, const at::Tensor& b) {
  int n = a.size(0);
  TORCH_CHECK(n % 16 == 0, "n must be a multiple of 16");
  auto c = at::empty({n, n}, a.options().dtype(at::kFloat));
  matmul_wmma_kernel<<<dim3(n / 16, n / 16), 32>>>(static_cast<const __half*>(a.data_ptr()),
                                                   static_cast<const __half*>(b.data_ptr()), c.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return c;
}

at::Tensor add(const at::Tensor& x, const at::Tensor& y) {
  auto out = at::empty_like(x);
  int64_t n = x.numel();
  add_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("matmul(Tensor a, Tensor b) -> Tensor");
  m.def("matmul_wmma(Tensor a, Tensor b) -> Tensor");
  m.def("add(Tensor x, Tensor y) -> Tensor");
}
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) {
  m.impl("matmul", &matmul);
  m.impl("matmul_wmma", &matmul_wmma);
  m.impl("add", &add);
}
'''

ONE_OP = r'''
#include "helpers.cuh"
#include <ATen/ops/empty_like.h>

__global__ void scale_kernel(const float* x, float* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 2.0f * x[i];
}

at::Tensor scale(const at::Tensor& x) {
  auto out = at::empty_like(x);
  int64_t n = x.numel();
  scale_kernel<<<ceil_div(n, 256), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
  return out;
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("scale(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("scale", &scale); }
'''


def best_of(fn, repeats: int = 3) -> float:
    """The fastest of `repeats` runs of fn(), in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def fresh_build_seconds(tmp: Path) -> tuple[float, float]:
    """Build the one-op file twice (two copies) into an empty build folder: the first build on a
    machine also precompiles the common headers; the second is what every later build of a new
    or edited file costs. Returns both times in seconds."""
    from kernels import load

    saved = os.environ.get("KERNELS_BUILD_DIR")
    os.environ["KERNELS_BUILD_DIR"] = str(tmp / "build")
    times = []
    try:
        for copy in ("first", "second"):
            src = tmp / f"one_op_{copy}.cu"
            src.write_text(ONE_OP)
            t0 = time.perf_counter()
            ext = load(src, "sim", quiet=True)
            times.append(time.perf_counter() - t0)
            x = torch.randn(1000)
            torch.testing.assert_close(ext.scale(x), 2 * x)
    finally:
        if saved is None:
            os.environ.pop("KERNELS_BUILD_DIR", None)
        else:
            os.environ["KERNELS_BUILD_DIR"] = saved
    return times[0], times[1]


def main(argv: list[str] | None = None) -> int:
    """`python -m kernels.sim.speed`: the four figures, each against its bar."""
    import argparse

    argparse.ArgumentParser(prog="python -m kernels.sim.speed", description=__doc__.splitlines()[0]).parse_args(argv)
    from kernels import load

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        first_s, build_s = fresh_build_seconds(tmp)
        src = tmp / "speed_kernels.cu"
        src.write_text(SOURCE)
        ext = load(src, "sim", quiet=True)
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        torch.testing.assert_close(ext.matmul(a, b), a @ b, rtol=1e-4, atol=1e-4)
        ah, bh = a.half(), b.half()
        torch.testing.assert_close(ext.matmul_wmma(ah, bh), (ah.double() @ bh.double()).float(), rtol=1e-4, atol=1e-3)
        x, y = torch.randn(1 << 20), torch.randn(1 << 20)
        torch.testing.assert_close(ext.add(x, y), x + y)
        rows = [
            ("256x256 fp32 matmul, 16x16 shared tiles", best_of(lambda: ext.matmul(a, b)), 0.5),
            ("256^3 fp16 WMMA matmul, a warp per tile", best_of(lambda: ext.matmul_wmma(ah, bh)), 1.0),
            ("2^20-element vector add", best_of(lambda: ext.add(x, y)), 0.3),
            ("sim build of a one-op file (uncached)", build_s, 10.0),
            ("first sim build on a machine (+ headers)", first_s, None),
        ]
    print(f"{'what':<42} {'seconds':>8} {'bar':>6}")
    slow = 0
    for what, seconds, bar in rows:
        flag = "" if bar is None or seconds < bar else "  SLOWER THAN THE BAR"
        slow += bar is not None and seconds >= bar
        print(f"{what:<42} {seconds:8.3f} {'-' if bar is None else f'{bar:.1f}':>6}{flag}")
    print(f"({os.cpu_count()} CPU cores; torch {torch.__version__})")
    return 1 if slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
