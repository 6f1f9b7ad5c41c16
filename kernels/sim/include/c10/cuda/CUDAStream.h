// c10/cuda/CUDAStream.h for the simulator: one stream, the CPU; kernels run when launched.
#pragma once
#include "cudasim.h"
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace c10 {
namespace cuda {
class CUDAStream {
 public:
  CUDAStream() = default;
  cudaStream_t stream() const { return nullptr; }
  operator cudaStream_t() const { return nullptr; }
  c10::Device device() const { return c10::Device(c10::DeviceType::CPU); }
  c10::DeviceIndex device_index() const { return 0; }
  void synchronize() const {}
  bool query() const { return true; }
};
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(); }
inline CUDAStream getDefaultCUDAStream(c10::DeviceIndex = -1) { return CUDAStream(); }
inline CUDAStream getStreamFromPool(bool = false, c10::DeviceIndex = -1) { return CUDAStream(); }
}  // namespace cuda
}  // namespace c10
namespace at {
namespace cuda {
using c10::cuda::CUDAStream;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
using c10::cuda::getStreamFromPool;
}  // namespace cuda
}  // namespace at
