// cudaTypedefs.h for the simulator: the driver functions' pointer types it has (PFN_cuTensorMapEncodeTiled).
#pragma once
#include "cuda.h"
