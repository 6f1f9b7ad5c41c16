// host_api.cu: the other binding style (<torch/extension.h> and PYBIND11_MODULE) and the host
// side of CUDA that PyTorch extensions use: streams, guards, device properties, error checks,
// and a plain TORCH_LIBRARY_IMPL(ns, CUDA, m) that the simulator registers for CPU tensors.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "helpers.cuh"

__global__ void axpb_kernel(const float* x, float* out, float a, float b, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a * x[i] + b;
}

// out = a * x + b, launched the way a production extension launches
torch::Tensor axpb(torch::Tensor x, double a, double b) {
  CHECK_INPUT(x);
  CHECK_DTYPE(x, at::kFloat);
  const c10::cuda::CUDAGuard guard(x.device());
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  axpb_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), a, b, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// The same through c10's stream and an explicit check of every runtime call.
torch::Tensor axpb_checked(torch::Tensor x, double a, double b) {
  CHECK_INPUT(x);
  at::cuda::OptionalCUDAGuard guard(x.device());
  auto out = torch::empty_like(x);
  const int64_t n = x.numel();
  auto stream = c10::cuda::getCurrentCUDAStream();
  axpb_kernel<<<ceil_div(n, 128), 128, 0, stream.stream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), a, b, n);
  cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, "launch failed: ", cudaGetErrorString(err));
  C10_CUDA_CHECK(cudaDeviceSynchronize());  // only to show the call; wrappers should not sync
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

// What the device reports: warp size, SMs, max threads per block, shared memory per block.
std::vector<int64_t> properties() {
  const cudaDeviceProp* p = at::cuda::getCurrentDeviceProperties();
  int dev = -1;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  return {p->warpSize, p->multiProcessorCount > 0, p->maxThreadsPerBlock, static_cast<int64_t>(p->sharedMemPerBlock), dev};
}

// A plain (not _EXPAND) registration with a fixed namespace, CUDA dispatch key and all.
torch::Tensor twice(const torch::Tensor& x) { return axpb(x, 2.0, 0.0); }

TORCH_LIBRARY(sim_host_api_test, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(sim_host_api_test, CUDA, m) { m.impl("twice", &twice); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("axpb", &axpb, "out = a * x + b");
  m.def("axpb_checked", &axpb_checked, "out = a * x + b, every runtime call checked");
  m.def("properties", &properties, "warp size, SMs > 0, max threads per block, shared memory per block, device");
}
