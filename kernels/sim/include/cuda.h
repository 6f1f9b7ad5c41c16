// cuda.h for the simulator: the driver API's tensor maps (cudasim_ptx/tensormap.h); the runtime lives in cudasim.h.
#pragma once
#include "cudasim.h"
#include "cudasim_ptx/tensormap.h"
