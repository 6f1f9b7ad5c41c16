// cudasim_ptx.h: the inline PTX the simulator runs. kernels/sim/translate.py includes this header in
// every file with an asm statement that has an instruction or an output (or a call of
// __cvta_generic_to_shared) and turns each asm statement into calls of the functions in cudasim_ptx/ (kernels/sim/ptx.py and ptx_ops.py say how):
//   core.h       operands, registers, addresses and state spaces, special registers, errors
//   alu.h        integer and float arithmetic, comparisons, bit operations, cvt
//   warp.h       shfl.sync, vote.sync, redux.sync, elect.sync, activemask, named barriers, setmaxnreg
//   mma.h        mma.sync, ldmatrix, stmatrix
//   tensormap.h  CUtensorMap and cuTensorMapEncodeTiled (also reached through <cuda.h>)
//   async.h      ld/st, cp.async, mbarrier, cp.async.bulk and cp.async.bulk.tensor (TMA)
//   wgmma.h      wgmma.fence, wgmma.mma_async, wgmma.commit_group, wgmma.wait_group
#pragma once
#include "cudasim_ptx/core.h"
#include "cudasim_ptx/alu.h"
#include "cudasim_ptx/warp.h"
#include "cudasim_ptx/mma.h"
#include "cudasim_ptx/tensormap.h"
#include "cudasim_ptx/async.h"
#include "cudasim_ptx/wgmma.h"
