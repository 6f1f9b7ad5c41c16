// standalone_program.cu: a whole CUDA program with main(), as llm.c's dev/cuda files and the CUDA
// samples are written: device memory, copies, a launch per kernel version, a CPU reference, a
// validation loop, event timing, printf and an exit status. Build and run it with nvcc on a GPU, or
// with the simulator's driver on the CPU:
//
//   nvcc standalone_program.cu -o prog && ./prog 1                      (GPU)
//   kernels/sim/nvcc-sim standalone_program.cu -o prog && ./prog 1      (simulator; the time is NaN there)
//
// Version 1 is right; version 2 is a planted mistake (its guard skips the last element), so that the
// validation is seen to fail: tests/test_sim_driver.py runs both.
// build-cache: make test-toolkit (only its tests load this file, so make test-all does not build it first)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) {                                                                         \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);           \
      std::exit(2);                                                                                  \
    }                                                                                                \
  } while (0)

__global__ void saxpy1(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void saxpy2(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n - 1) y[i] = a * x[i] + y[i];  // the planted mistake: the last element is left alone
}

int main(int argc, char** argv) {
  int version = argc > 1 ? std::atoi(argv[1]) : 1;
  if (version != 1 && version != 2) {
    std::printf("unknown kernel version %d (1 or 2)\n", version);
    return 2;
  }
  const int n = 1000;
  const float a = 2.5f;
  std::vector<float> x(n), y(n), expected(n), got(n);
  for (int i = 0; i < n; i++) {
    x[i] = std::sin(0.1f * i);
    y[i] = 0.5f * i;
    expected[i] = a * x[i] + y[i];  // the CPU reference
  }
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  int block = 128, grid = (n + block - 1) / block;
  CHECK(cudaEventRecord(start));
  if (version == 1)
    saxpy1<<<grid, block>>>(n, a, dx, dy);
  else
    saxpy2<<<grid, block>>>(n, a, dx, dy);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaMemcpy(got.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; i++) {
    if (std::fabs(got[i] - expected[i]) > 1e-5f * (1 + std::fabs(expected[i]))) {
      if (wrong++ < 3) std::printf("mismatch at %d: %f != %f\n", i, got[i], expected[i]);
    }
  }
  std::printf("kernel %d: %d of %d wrong; time %.4f ms\n", version, wrong, n, ms);
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return wrong ? 1 : 0;
}
