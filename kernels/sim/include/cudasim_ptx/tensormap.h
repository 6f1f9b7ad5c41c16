// cudasim_ptx/tensormap.h: the driver API's tensor maps (CUtensorMap, cuTensorMapEncodeTiled) for
// TMA copies (cp.async.bulk.tensor), and the ways host code reaches the encoder: directly, or
// through cudaGetDriverEntryPoint / cudaGetDriverEntryPointByVersion (what code that does not link
// libcuda does). The stand-in keeps the parameters in the map's 128 opaque bytes and checks them as
// the driver documents (cuda.h); a map it refuses returns CUDA_ERROR_INVALID_VALUE, as the driver
// does, and says why on stderr. Interleaved layouts (CU_TENSOR_MAP_INTERLEAVE_16B, _32B) are encoded
// with the rules the H100's driver was seen to apply to them (tests/ptx_vectors/ptx_tma_interleave.pt);
// how a copy walks such a map is async.h's (interleaved_walk). Not simulated (an error naming the
// parameter): the 128B_ATOM swizzles, the sub-byte data types, im2col maps, and the interleaved boxes
// whose acceptance was not recorded.
#pragma once
#include "../cudasim.h"

#include <cstdio>
#include <stdexcept>
#include <string>

typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;
#ifndef CUDAAPI
#define CUDAAPI
#endif

typedef enum cudaError_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NOT_SUPPORTED = 801,
} CUresult;

#define CU_TENSOR_MAP_NUM_QWORDS 16
typedef struct CUtensorMap_st {
  alignas(128) cuuint64_t opaque[CU_TENSOR_MAP_NUM_QWORDS];
} CUtensorMap;

typedef enum CUtensorMapDataType_enum {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
  CU_TENSOR_MAP_DATA_TYPE_UINT16,
  CU_TENSOR_MAP_DATA_TYPE_UINT32,
  CU_TENSOR_MAP_DATA_TYPE_INT32,
  CU_TENSOR_MAP_DATA_TYPE_UINT64,
  CU_TENSOR_MAP_DATA_TYPE_INT64,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ,
  CU_TENSOR_MAP_DATA_TYPE_TFLOAT32,
  CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ,
  CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B,
  CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B,
  CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B
} CUtensorMapDataType;

typedef enum CUtensorMapInterleave_enum {
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
  CU_TENSOR_MAP_INTERLEAVE_16B,
  CU_TENSOR_MAP_INTERLEAVE_32B
} CUtensorMapInterleave;

typedef enum CUtensorMapSwizzle_enum {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_32B,
  CU_TENSOR_MAP_SWIZZLE_64B,
  CU_TENSOR_MAP_SWIZZLE_128B,
  CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B,
  CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B,
  CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B
} CUtensorMapSwizzle;

typedef enum CUtensorMapL2promotion_enum {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
  CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B
} CUtensorMapL2promotion;

typedef enum CUtensorMapFloatOOBfill_enum {
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
} CUtensorMapFloatOOBfill;

namespace cudasim {
namespace tma {

constexpr uint64_t kMagic = 0x5041'4D52'4F53'4E45ull;  // marks a map this stand-in encoded

// A tensor map's parameters, decoded. strides[0] is the element size; dims, box, estride per dim.
// An interleaved map's dimension 0 counts slices of `slice` bytes (16 or 32), not elements, and its
// dimension rank - 2 is not walked (async.h, interleaved_walk); box_bytes is then the bytes of its lines.
struct Map {
  int dtype = 0, rank = 0, swizzle = 0, oob = 0, interleave = 0;  // interleave: 0 none, 1 16B, 2 32B
  uint64_t base = 0, elem = 0, slice = 0;
  uint64_t dims[5] = {1, 1, 1, 1, 1}, strides[5] = {0, 0, 0, 0, 0};
  uint32_t box[5] = {1, 1, 1, 1, 1}, estride[5] = {1, 1, 1, 1, 1};
  uint32_t n[5] = {1, 1, 1, 1, 1};  // elements (an interleaved map's dim 0: slices) along each dim: ceil(box / estride)
  uint64_t box_bytes = 0;
};

// The dimension of an interleaved map that the H100 does not walk: only its coordinate places the box.
CUDASIM_INTERNAL inline int unwalked_dim(const Map& m) { return m.rank - 2; }

CUDASIM_INTERNAL inline int elem_size(int dtype) {
  static const int sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return dtype >= 0 && dtype < 13 ? sizes[dtype] : 0;
}
CUDASIM_INTERNAL inline bool is_float(int dtype) { return dtype >= 6 && dtype != 13; }

CUDASIM_INTERNAL inline CUresult refuse(const std::string& why) {
  std::fprintf(stderr, "cudasim: cuTensorMapEncodeTiled refused the tensor map (CUDA_ERROR_INVALID_VALUE): %s\n",
               why.c_str());
  return CUDA_ERROR_INVALID_VALUE;
}

// Decode a map written by encode_tiled; nullptr-safe messages are the caller's.
CUDASIM_INTERNAL inline bool decode(const CUtensorMap& t, Map& m) {
  if (t.opaque[0] != kMagic) return false;
  uint64_t w = t.opaque[2];
  m.dtype = static_cast<int>(w & 0xFF);
  m.rank = static_cast<int>((w >> 8) & 0xFF);
  m.interleave = static_cast<int>((w >> 16) & 0xFF);
  m.slice = m.interleave == CU_TENSOR_MAP_INTERLEAVE_16B ? 16 : m.interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 0;
  m.swizzle = static_cast<int>((w >> 24) & 0xFF);
  m.oob = static_cast<int>((w >> 40) & 0xFF);
  m.base = t.opaque[1];
  m.elem = static_cast<uint64_t>(elem_size(m.dtype));
  m.box_bytes = m.elem;
  for (int d = 0; d < 5; ++d) {
    m.dims[d] = d < m.rank ? t.opaque[3 + d] : 1;
    m.strides[d] = d == 0 ? m.elem : d < m.rank ? t.opaque[7 + d] : 0;
    m.box[d] = d < m.rank ? static_cast<uint32_t>((t.opaque[12] >> (9 * d)) & 0x1FF) : 1;
    // dimension 0's element stride counts only in an interleaved map (the driver ignores it otherwise)
    const bool strided = d < m.rank && (d > 0 || m.interleave);
    m.estride[d] = strided ? static_cast<uint32_t>((t.opaque[13] >> (4 * d)) & 0xF) : 1;
    m.n[d] = (m.box[d] + m.estride[d] - 1) / m.estride[d];
    m.box_bytes *= m.n[d];
  }
  if (m.interleave) {  // lines of n[0] slices, one per step of the walked dimensions
    m.box_bytes = m.n[0] * m.slice;
    for (int d = 1; d < m.rank; ++d)
      if (d != unwalked_dim(m)) m.box_bytes *= m.n[d];
  }
  return true;
}

CUDASIM_INTERNAL inline CUresult encode_tiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* global,
                                              const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                              const cuuint32_t* estride, CUtensorMapInterleave interleave,
                                              CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                              CUtensorMapFloatOOBfill oob) {
  auto not_simulated = [](const std::string& what) {
    throw std::runtime_error("cudasim: cuTensorMapEncodeTiled: " + what + " is not simulated");
  };
  if (!map || reinterpret_cast<uintptr_t>(map) % 64) return refuse("the tensor map's address must be 64-byte aligned");
  if (dtype >= CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && dtype <= CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B)
    not_simulated("a packed sub-byte data type (16U4, 16U6)");
  int es = elem_size(static_cast<int>(dtype));
  if (!es) return refuse("unknown data type " + std::to_string(static_cast<int>(dtype)));
  if (rank < 1 || rank > 5) return refuse("the rank must be 1 to 5, got " + std::to_string(rank));
  if (static_cast<int>(interleave) < 0 || interleave > CU_TENSOR_MAP_INTERLEAVE_32B)
    return refuse("unknown interleave " + std::to_string(static_cast<int>(interleave)));
  const bool interleaved = interleave != CU_TENSOR_MAP_INTERLEAVE_NONE, il32 = interleave == CU_TENSOR_MAP_INTERLEAVE_32B;
  if (interleaved && rank < 3)
    return refuse("an interleaved layout (CU_TENSOR_MAP_INTERLEAVE_16B/32B) needs a rank of 3 to 5, got " +
                  std::to_string(rank));
  if (swizzle > CU_TENSOR_MAP_SWIZZLE_128B) not_simulated("the swizzle mode " + std::to_string(static_cast<int>(swizzle)));
  const unsigned align = il32 ? 32 : 16;  // the 32-byte interleave wants a 32-byte aligned address and strides
  if (!global || reinterpret_cast<uintptr_t>(global) % align)
    return refuse("globalAddress must be " + std::to_string(align) + "-byte aligned" +
                  (il32 ? " with CU_TENSOR_MAP_INTERLEAVE_32B" : ""));
  for (cuuint32_t d = 0; d < rank; ++d) {
    if (dims[d] == 0 || dims[d] > (1ull << 32))
      return refuse("globalDim[" + std::to_string(d) + "] must be 1 to 2^32, got " + std::to_string(dims[d]));
    if (box[d] == 0 || box[d] > 256)
      return refuse("boxDim[" + std::to_string(d) + "] must be 1 to 256, got " + std::to_string(box[d]));
    if (estride[d] == 0 || estride[d] > 8)
      return refuse("elementStrides[" + std::to_string(d) + "] must be 1 to 8, got " + std::to_string(estride[d]));
    if (d + 1 < rank && (strides[d] % align || strides[d] >= (1ull << 40)))
      return refuse("globalStrides[" + std::to_string(d) + "] must be a multiple of " + std::to_string(align) +
                    " bytes below 2^40" + (il32 ? " with CU_TENSOR_MAP_INTERLEAVE_32B" : "") + ", got " +
                    std::to_string(strides[d]));
  }
  // The 16-byte rule binds interleaved maps too (the H100's driver refuses an 8-byte box with the 16B
  // interleave, though cuda.h states the rule for CU_TENSOR_MAP_INTERLEAVE_NONE only).
  if (box[0] * es % 16)
    return refuse("boxDim[0] * the element size must be a multiple of 16 bytes, got " + std::to_string(box[0] * es));
  if (il32 && box[0] * es % 32)
    not_simulated("CU_TENSOR_MAP_INTERLEAVE_32B with boxDim[0] * the element size = " + std::to_string(box[0] * es) +
                  " bytes, not a multiple of 32 (whether the driver accepts it is not recorded)");
  // The swizzle's span bounds the box's inner dimension only without interleave (cuda.h; the H100's driver
  // accepts a 64-byte box under the 32-byte swizzle with the 16B interleave). Any swizzle goes with either
  // interleave: the driver takes the 32B interleave without a swizzle and with the 64-byte one.
  static const unsigned span[] = {0, 32, 64, 128};
  if (!interleaved && swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && box[0] * es > span[swizzle])
    return refuse("with a " + std::to_string(span[swizzle]) + "B swizzle the box's inner dimension (boxDim[0] * the "
                  "element size) must be at most " + std::to_string(span[swizzle]) + " bytes, got " +
                  std::to_string(box[0] * es));
  if (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_float(static_cast<int>(dtype)))
    return refuse("the NaN out-of-bounds fill needs a floating-point data type");
  std::memset(map->opaque, 0, sizeof map->opaque);
  map->opaque[0] = kMagic;
  map->opaque[1] = reinterpret_cast<uint64_t>(global);
  map->opaque[2] = static_cast<uint64_t>(dtype) | (static_cast<uint64_t>(rank) << 8) |
                   (static_cast<uint64_t>(interleave) << 16) | (static_cast<uint64_t>(swizzle) << 24) |
                   (static_cast<uint64_t>(l2) << 32) | (static_cast<uint64_t>(oob) << 40);
  for (cuuint32_t d = 0; d < rank; ++d) {
    map->opaque[3 + d] = dims[d];
    if (d + 1 < rank) map->opaque[8 + d] = strides[d];
    map->opaque[12] |= static_cast<uint64_t>(box[d]) << (9 * d);
    map->opaque[13] |= static_cast<uint64_t>(estride[d]) << (4 * d);
  }
  return CUDA_SUCCESS;
}

}  // namespace tma
}  // namespace cudasim

inline CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType dtype, cuuint32_t rank, void* global,
                                       const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                       const cuuint32_t* estride, CUtensorMapInterleave interleave,
                                       CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                       CUtensorMapFloatOOBfill oob) {
  return ::cudasim::tma::encode_tiled(map, dtype, rank, global, dims, strides, box, estride, interleave, swizzle, l2, oob);
}
typedef CUresult(CUDAAPI* PFN_cuTensorMapEncodeTiled_v12000)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                                             const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                                             const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                                             CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
#define PFN_cuTensorMapEncodeTiled PFN_cuTensorMapEncodeTiled_v12000

inline CUresult cuGetErrorString(CUresult e, const char** s) {
  *s = e == CUDA_SUCCESS ? "no error" : e == CUDA_ERROR_INVALID_VALUE ? "invalid argument" : "unknown error";
  return CUDA_SUCCESS;
}
inline CUresult cuGetErrorName(CUresult e, const char** s) {
  *s = e == CUDA_SUCCESS ? "CUDA_SUCCESS" : e == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}

// The runtime's way to a driver function without linking libcuda.
enum cudaGetDriverEntryPointFlags { cudaEnableDefault = 0x0, cudaEnableLegacyStream = 0x1, cudaEnablePerThreadDefaultStream = 0x2 };
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1,
                                       cudaDriverEntryPointVersionNotSufficent = 2 };
inline cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                                    cudaDriverEntryPointQueryResult* status = nullptr) {
  bool found = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *fn = found ? reinterpret_cast<void*>(&cuTensorMapEncodeTiled) : nullptr;
  if (status) *status = found ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
inline cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                           cudaDriverEntryPointQueryResult* status = nullptr) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, 12000, flags, status);
}
