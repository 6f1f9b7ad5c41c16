// cudasim_torch.h: what PyTorch's headers give CUDA code only under nvcc (__CUDACC__), given to
// the simulator's C++ build too. Included by cudasim.h, so it comes before any torch header.
#pragma once

// RestrictPtrTraits, the PtrTraits of the extension tutorial's packed accessors
// (x.packed_accessor32<float, 2, torch::RestrictPtrTraits>()): a pointer marked __restrict__.
namespace torch::headeronly {
template <typename T>
struct RestrictPtrTraits {
  using PtrType = T* __restrict;
};
}  // namespace torch::headeronly
namespace at {
using torch::headeronly::RestrictPtrTraits;
}  // namespace at
