// cublas_api.h for the simulator: see cublas_v2.h.
#pragma once
#include "cublas_v2.h"
