// no_kernel_image.cu: "no kernel image is available for execution on the device". Nothing is
// wrong with this code; what breaks it is the build. nvcc compiles a kernel into machine code
// (SASS) for the architectures it is asked for (sm_80, sm_90, ...) and, optionally, into PTX that
// the driver can compile for a newer GPU. A library that holds neither for the GPU it runs on
// cannot launch its kernels. kernels.debugging.run("no_kernel_image") builds this file with
// TORCH_CUDA_ARCH_LIST naming another architecture than the GPU's, and runs it.
//
//   fill   out[i] = value
// The fix is the architecture list: leave TORCH_CUDA_ARCH_LIST unset (kernels.build then targets
// the GPUs it sees), or name the GPU's, such as "9.0" for an H100, or add "+PTX" to the newest.
#include "helpers.cuh"

// fill_kernel: thread i owns out[i]; 4 B written per element.
__global__ void fill_kernel(float* __restrict__ out, float value, int64_t n) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

void fill(at::Tensor& out, double value) {
  CHECK_INPUT(out);
  CHECK_DTYPE(out, at::kFloat);
  const int64_t n = out.numel();
  if (n == 0) return;
  fill_kernel<<<ceil_div(n, 256), 256, 0, c10::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>(),
                                                                              static_cast<float>(value), n);
  CHECK_LAUNCH();  // the launch itself fails: this is where the error is reported
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("fill(Tensor(a!) out, float value) -> ()"); }

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("fill", &fill); }
