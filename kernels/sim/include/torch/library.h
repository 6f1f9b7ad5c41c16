// torch/library.h for the simulator: PyTorch's own header, with TORCH_LIBRARY_IMPL registering a
// CUDA kernel for the CPU, where the simulator's tensors live.
//
// The dispatch key is mapped where the registration is made, so it holds however the key reaches
// it: TORCH_LIBRARY_IMPL(ns, CUDA, m) written out, TORCH_LIBRARY_IMPL_EXPAND, or a project's own
// macro that passes CUDA along (vLLM's registration.h). The rest of the header is PyTorch's.
#pragma once
#include_next <torch/library.h>

#include <c10/core/DispatchKey.h>

namespace cudasim {
// The key a kernel registered for `k` gets on the simulator: CUDA's keys become the CPU's.
inline c10::DispatchKey simulated_key(c10::DispatchKey k) {
  switch (k) {
    case c10::DispatchKey::CUDA: return c10::DispatchKey::CPU;
    case c10::DispatchKey::AutogradCUDA: return c10::DispatchKey::AutogradCPU;
    case c10::DispatchKey::AutocastCUDA: return c10::DispatchKey::AutocastCPU;
    case c10::DispatchKey::SparseCUDA: return c10::DispatchKey::SparseCPU;
    case c10::DispatchKey::QuantizedCUDA: return c10::DispatchKey::QuantizedCPU;
    default: return k;
  }
}
}  // namespace cudasim

// PyTorch's definition (torch/library.h) with the key passed through simulated_key.
#undef _TORCH_LIBRARY_IMPL
#define _TORCH_LIBRARY_IMPL(ns, k, m, uid)                                                                \
  static void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(torch::Library&);               \
  static const torch::detail::TorchLibraryInit C10_CONCATENATE(TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, \
                                                               uid)(                                      \
      torch::Library::IMPL, &C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid), C10_STRINGIZE(ns), \
      std::make_optional(::cudasim::simulated_key(c10::DispatchKey::k)), __FILE__, __LINE__);             \
  void C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid)(torch::Library & m)
