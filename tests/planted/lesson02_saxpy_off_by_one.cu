// planted bug (tests/test_lesson02.py): the guard is i <= n: one write past the end
// saxpy.cu: the exercise of lesson 02. out = a * x + y for float32 vectors ("single-precision
// a times x plus y", the oldest routine of BLAS).
//
// Two places to fill in: the kernel body (what one thread does) and the number of blocks in the
// launcher. The vectors the self-check uses are ragged: their sizes are not multiples of 256.
// Check it from the notebook: check_exercise("02", "saxpy", path="saxpy.cu")
#include "helpers.cuh"

constexpr int THREADS = 256;

// saxpy_kernel: thread i owns out[i] = a * x[i] + y[i]; reads 8 B and writes 4 B per element.
__global__ void saxpy_kernel(float a, const float* __restrict__ x, const float* __restrict__ y,
                             float* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;  // cast first: no 32-bit overflow
  if (i <= n) {  // BUG  // the last block overhangs the ragged end
    out[i] = a * x[i] + y[i];
  }
}

void saxpy(double a, const at::Tensor& x, const at::Tensor& y, at::Tensor& out) {
  CHECK_INPUT(x);
  CHECK_INPUT(y);
  CHECK_INPUT(out);
  CHECK_DTYPE(x, at::kFloat);
  CHECK_SAME_DTYPE(x, y);
  CHECK_SAME_DTYPE(x, out);
  CHECK_SAME_SHAPE(x, y);
  CHECK_SAME_SHAPE(x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, THREADS);  // rounded up: the ragged tail gets a block too
  saxpy_kernel<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
      static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), n);
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("saxpy(float a, Tensor x, Tensor y, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("saxpy", &saxpy); }
