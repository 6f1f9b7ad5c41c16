// ptx_common.cuh: the small inline-PTX helpers the ptx_*.cu test kernels share: shared-memory
// addresses, mbarrier operations, and the driver's tensor-map encoder reached through the runtime.
#pragma once

#include <cstdint>
#include <cuda.h>

#if defined(CUDASIM) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HAS_SM90A 1  // wgmma and setmaxnreg exist for sm_90a only (the simulator runs them)
#endif

// The shared-memory (.shared state space) address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// The first 1024-byte boundary in a dynamic shared buffer: the 128-byte swizzle repeats every 1024
// bytes, from shared address 0, so TMA and wgmma agree on a tile that starts there.
__device__ __forceinline__ unsigned char* align1024(unsigned char* raw) {
  return raw + (((smem_addr(raw) + 1023) & ~1023u) - smem_addr(raw));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count));
}
// One arrival that also announces `bytes` of copies completing on the barrier in this phase.
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}
// Wait until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"  // WAIT-LOOP
      "@!done bra WAIT;\n"
      "}\n" :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}

// cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion, so the extension needs no libcuda link.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiled tensor_map_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
  TORCH_CHECK(found == cudaDriverEntryPointSuccess && fn, "cuTensorMapEncodeTiled is not available");
  return reinterpret_cast<EncodeTiled>(fn);
}

// The inputs of the bulk-reduction test ops: x [blocks, n] and y0 [n] of one dtype, a row of 16 to max_bytes bytes and
// a multiple of 16. Returns a row's bytes.
inline int64_t reduction_row_bytes(const at::Tensor& x, const at::Tensor& y0, int64_t max_bytes) {
  TORCH_CHECK(x.dim() == 2 && y0.dim() == 1 && x.size(1) == y0.size(0) && x.scalar_type() == y0.scalar_type(),
              "x must be [blocks, n] and y0 [n] of its dtype");
  const int64_t bytes = y0.numel() * y0.element_size();
  TORCH_CHECK(bytes > 0 && bytes % 16 == 0 && bytes <= max_bytes && x.size(0) > 0, "a row must be 16..",
              std::to_string(max_bytes), " bytes, a multiple of 16");
  return bytes;
}
