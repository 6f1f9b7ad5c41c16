// compile-check: skip (a file with a syntax error on purpose: the loader must point at line 6)
#include "helpers.cuh"

__global__ void broken(float* out) {
  int i = threadIdx.x;
  out[i] = 1.0f   // the missing semicolon is the error
}
