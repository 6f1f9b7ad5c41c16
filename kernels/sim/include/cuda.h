// cuda_runtime.h for the simulator: the whole simulated runtime lives in cudasim.h.
#pragma once
#include "cudasim.h"
