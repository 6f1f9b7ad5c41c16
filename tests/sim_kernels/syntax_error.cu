// compile-check: skip (broken on purpose: the error must be reported at this file's line 17,
// after the simulator has rewritten the launch and the __shared__ declaration above it)
#include "helpers.cuh"

__global__ void fine_kernel(float* out) {
  __shared__ float tile[32][33];
  tile[threadIdx.y][threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}

void launch(float* out) {
  fine_kernel<<<1,
                dim3(32, 32)>>>(
      out);
  int after_the_launch = 1;
  float broken = undeclared_name * 2.0f;  // SYNTAX-ERROR-LINE
}
