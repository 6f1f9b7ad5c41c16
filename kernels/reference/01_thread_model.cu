// 01_thread_model.cu: adding two vectors twice, as a loop on the CPU and as a CUDA kernel, side by side.
// Load with `ext = load("01")`; both ops are out-variants: ext.add2(x, y, out).
//
//   add_loop1  a C++ for loop on the CPU: one core visits the elements one after another (CPU tensors)
//   add2       the same sum as a CUDA kernel: one thread per element, a grid of blocks covers the vector
//
// Both take float32 x and y of the same shape (contiguous) and write `out` of that shape.
// add_loop1 is registered for CPU tensors; add2 for CUDA tensors (on the simulator, CPU tensors).

// ---------------------------------------------------------------------------------------------
// Includes.
#include "helpers.cuh"

constexpr int THREADS = 256;  // threads per block: a multiple of 32 (a warp), a common first choice

// ---------------------------------------------------------------------------------------------
// The CPU loop: what the kernel replaces.

// add_loop1: one CPU core runs the loop body n times, in order. Reads 8 B and writes 4 B per
// element; bounded by one core's speed (a few elements per nanosecond at best).
void add_loop1(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  TORCH_CHECK(x.device().is_cpu() && y.device().is_cpu() && out.device().is_cpu(),
              "add_loop1 runs on the CPU: x, y and out must be CPU tensors, got ", x.device(), ", ", y.device(),
              " and ", out.device());
  CHECK_CONTIGUOUS(x);
  CHECK_CONTIGUOUS(y);
  CHECK_CONTIGUOUS(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_SAME_DTYPE(x, y);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_SHAPE(x, out);
  const float* xp = x.data_ptr<float>();
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {  // the loop the GPU unrolls into threads: this body becomes the kernel
    op[i] = xp[i] + yp[i];
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel.

// add_kernel2: thread (blockIdx.x, threadIdx.x) owns element i = blockIdx.x * blockDim.x + threadIdx.x.
// Reads 8 B and writes 4 B per element, nothing else: bounded by memory bandwidth. The grid is
// rounded up to whole blocks, so the threads of the last block past n must do nothing.
__global__ void add_kernel2(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                            int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;  // 64-bit: n may pass 2^31
  if (i < n) {  // the bounds guard: the last block overhangs the end of the vector
    out[i] = x[i] + y[i];
  }
}

// ---------------------------------------------------------------------------------------------
// Launcher.

void add2(const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_SAME_DTYPE(x, y);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_SHAPE(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;  // a grid of 0 blocks is an invalid launch
  const int64_t blocks = ceil_div(n, THREADS);  // enough blocks to give every element a thread
  CHECK_GRID(blocks);
  // The launch only queues the kernel on PyTorch's current stream and returns at once.
  add_kernel2<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Registration: the schema once, then which function runs for which device.

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("add_loop1(Tensor x, Tensor y, Tensor(a!) out) -> ()");
  m.def("add2(Tensor x, Tensor y, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, m) { m.impl("add_loop1", &add_loop1); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("add2", &add2); }
