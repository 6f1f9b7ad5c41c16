// cublasLt.h for the simulator, which has no cuBLASLt: the handle type builds, a call raises.
#pragma once
#include "cublas_v2.h"

struct cublasLtContext;
typedef cublasLtContext* cublasLtHandle_t;
CUDASIM_NO_CUBLAS(cublasLtCreate)
CUDASIM_NO_CUBLAS(cublasLtDestroy)
CUDASIM_NO_CUBLAS(cublasLtMatmul)
