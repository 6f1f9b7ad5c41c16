// device_memory.cu: the mistakes a whole program makes with cudaMalloc'd memory, one per argument, so that
// tests/test_sim_driver.py can see what the simulator says about each. On a GPU most of them pass silently
// (a write a few hundred bytes past a buffer lands in the next allocation); compute-sanitizer's memcheck and
// initcheck are the tools that find them there.
//
//   kernels/sim/nvcc-sim device_memory.cu -o mem && ./mem past
//
//   right       fill and copy back 1000 floats: prints "right: ok"
//   past        a guard that lets 100 threads write past the end of a 1000-float buffer
//   before      an index that starts at -300
//   stale       a launch on a buffer already given back with cudaFree
//   twice       cudaFree twice: the second call's error
//   copy        a cudaMemcpy of 1001 floats out of a 1000-float buffer: its error
//   freed       a cudaMemcpy out of a buffer already given back: its error
//   unset       atomicAdd into a counter that was never set (no cudaMemset): prints what it holds
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

constexpr int N = 1000;

__global__ void fill(float* y, int from, int to) {
  int i = from + int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < to) y[i] = 1.0f;
}

__global__ void count(const float* x, int n, float* total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(total, x[i]);
}

static void fill_range(float* y, int from, int to) {
  int n = to - from;
  fill<<<(n + 255) / 256, 256>>>(y, from, to);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("fill [%d, %d): %s\n", from, to, cudaGetErrorString(e));
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "right";
  float *d = nullptr, h[N + 1] = {};
  if (cudaMalloc(&d, N * sizeof(float)) != cudaSuccess) return 2;
  if (!std::strcmp(mode, "right")) {
    fill_range(d, 0, N);
    cudaMemcpy(h, d, N * sizeof(float), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int i = 0; i < N; ++i) wrong += h[i] != 1.0f;
    std::printf("right: %s\n", wrong ? "wrong" : "ok");
  } else if (!std::strcmp(mode, "past")) {
    fill_range(d, 0, N + 100);
  } else if (!std::strcmp(mode, "before")) {
    fill_range(d, -300, N);
  } else if (!std::strcmp(mode, "stale")) {
    cudaFree(d);
    fill_range(d, 0, N);
    return 0;
  } else if (!std::strcmp(mode, "twice")) {
    std::printf("first cudaFree: %s\n", cudaGetErrorString(cudaFree(d)));
    std::printf("second cudaFree: %s\n", cudaGetErrorString(cudaFree(d)));
    return 0;
  } else if (!std::strcmp(mode, "copy")) {
    std::printf("copy of %d floats: %s\n", N + 1,
                cudaGetErrorString(cudaMemcpy(h, d, (N + 1) * sizeof(float), cudaMemcpyDeviceToHost)));
  } else if (!std::strcmp(mode, "freed")) {
    cudaFree(d);
    std::printf("copy from a freed buffer: %s\n",
                cudaGetErrorString(cudaMemcpy(h, d, N * sizeof(float), cudaMemcpyDeviceToHost)));
    return 0;
  } else if (!std::strcmp(mode, "unset")) {
    float* total = nullptr;
    cudaMalloc(&total, sizeof(float));
    fill_range(d, 0, N);
    count<<<(N + 255) / 256, 256>>>(d, N, total);
    float got = 0.0f;
    cudaMemcpy(&got, total, sizeof got, cudaMemcpyDeviceToHost);
    std::printf("unset: total %g\n", got);
    cudaFree(total);
  }
  std::printf("cudaFree: %s\n", cudaGetErrorString(cudaFree(d)));
  return 0;
}
