// cuda_pipeline.h for the simulator: the asynchronous-copy primitives (__pipeline_memcpy_async,
// __pipeline_commit, __pipeline_wait_prior), see cuda_pipeline_primitives.h. The C++ class
// nvcuda::experimental::pipeline that CUDA's header adds is not simulated.
#pragma once
#include "cuda_pipeline_primitives.h"
