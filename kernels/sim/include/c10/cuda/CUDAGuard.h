// c10/cuda/CUDAGuard.h for the simulator: there is one device, so the guards do nothing.
#pragma once
#include "cudasim.h"
#include <c10/core/Device.h>
#include <optional>

namespace c10 {
namespace cuda {
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
  explicit CUDAGuard(c10::DeviceIndex) {}
  void set_device(c10::Device) {}
};
struct OptionalCUDAGuard {
  OptionalCUDAGuard() = default;
  explicit OptionalCUDAGuard(c10::Device) {}
  explicit OptionalCUDAGuard(std::optional<c10::Device>) {}
  void set_device(c10::Device) {}
  void reset() {}
};
}  // namespace cuda
}  // namespace c10
namespace at {
namespace cuda {
using c10::cuda::CUDAGuard;
using c10::cuda::OptionalCUDAGuard;
}  // namespace cuda
}  // namespace at
