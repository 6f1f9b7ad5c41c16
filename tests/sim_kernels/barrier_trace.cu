// barrier_trace.cu: a hand-off through one mbarrier, for the simulator's mbarrier trace (kernels.barrier_trace,
// tests/test_sim_trace.py): warp 0 works, then one of its lanes arrives; the 32 lanes of warp 1 wait for that
// phase. The trace must show warp 1 blocked on the barrier a step for each term warp 0 adds, and one arrival.
// needs compute capability: 9.0 for mbarrier.try_wait.parity
//
//   op        what it computes
//   handoff   out[0] = 0 + 1 + ... + (work - 1), summed by warp 0 with a __syncwarp per term (a turn of the
//             simulator's scheduler each); out[32 + i] = out[0] + i, written by warp 1 once the barrier says so.
//             A grid of `blocks` blocks, each doing the same into its own 64 floats. work < 0: warp 0 never
//             arrives, a deadlock (the simulator reports it, with the trace up to it; refused on a GPU, where it
//             would hang).
#include "helpers.cuh"

#include <cstdint>

#include "ptx_common.cuh"

__global__ void handoff_kernel(float* out, int work) {
#if defined(CUDASIM) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
  __shared__ alignas(8) uint64_t ready;  // warp 0's sum is in out[0]
  float* mine = out + 64 * blockIdx.x;
  if (threadIdx.x == 0) mbar_init(&ready, 1);  // INIT: one arrival a phase
  __syncthreads();
  if (threadIdx.x < 32) {
    float sum = 0.f;
    for (int i = 0; i < work; ++i) {
      sum += i;
      __syncwarp();
    }
    if (threadIdx.x == 0 && work >= 0) {
      mine[0] = sum;
      mbar_arrive(&ready);  // ARRIVE
    }
  } else {
    mbar_wait(&ready, 0);  // WAIT: phase 0 completes at warp 0's arrival
    mine[threadIdx.x] = mine[0] + (threadIdx.x - 32);
  }
#else
  (void)out, (void)work;
  __trap();  // needs compute capability 9.0 (the launcher refuses an older GPU first)
#endif
}

void handoff(at::Tensor out, int64_t work, int64_t blocks) {
  CHECK_INPUT(out);
  CHECK_DTYPE(out, at::kFloat);
  TORCH_CHECK(blocks >= 1 && out.numel() == 64 * blocks, "out must hold 64 values a block");
  check_capability("handoff", 900, "mbarrier.try_wait.parity");
#ifndef CUDASIM
  TORCH_CHECK(work >= 0, "work < 0 leaves warp 1 waiting forever: the simulator reports the deadlock, a GPU hangs");
#endif
  handoff_kernel<<<static_cast<int>(blocks), 64>>>(out.data_ptr<float>(), static_cast<int>(work));
  CHECK_LAUNCH();
}

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) { m.def("handoff(Tensor(a!) out, int work, int blocks) -> ()"); }
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, m) { m.impl("handoff", &handoff); }
