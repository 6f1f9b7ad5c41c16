// cudasim_runtime.h: the CUDA runtime API beyond kernels, for the simulator (included by cudasim.h).
//
// The CPU is the device and host memory stands for device memory: cudaMallocHost and cudaHostAlloc
// allocate ordinary memory, cudaMalloc and cudaMallocManaged guarded mappings (cudasim.h), copies are memmove, every call
// and launch is synchronous (streams and events order nothing that was not already in order), and
// the device looks like an H100 (compute capability 9.0, 132 SMs) to code that asks. What cannot be
// answered truthfully is marked: an event's elapsed time is NaN (the simulator does not time kernels)
// and a note on stderr says so once.
//
// Also here: the guards of the real runtime headers that the CUDA samples' helper_cuda.h tests
// (__CUDA_RUNTIME_H__, __DRIVER_TYPES_H__), CUDART_VERSION, device attributes and properties,
// streams, events, host and managed memory, 2D copies, symbols, occupancy, cudaLaunchKernel, and
// device-side intrinsics that CUDA's headers declare next to the runtime (__trap, integer and
// conversion intrinsics, CUDA's extra float functions).
#pragma once

#include <assert.h>  // before the kernels' assert below, which must follow glibc's declaration
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>

#include "cudasim_round.h"

// What the real runtime headers define (the CUDA samples' helper_cuda.h defines its helpers only
// when it sees them).
#define __CUDA_RUNTIME_H__
#define __CUDA_RUNTIME_API_H__
#define __DRIVER_TYPES_H__
#ifndef CUDART_VERSION
#define CUDART_VERSION 13000
#endif

// A launch's kernel name, as text once the macro it was written in has expanded (translate.py uses
// it for names pasted together with ##).
#define CUDASIM_STRINGIFY(...) CUDASIM_STRINGIFY_(__VA_ARGS__)
#define CUDASIM_STRINGIFY_(...) #__VA_ARGS__

// ---------------------------------------------------------------------------------------------
// The device: what an H100 SXM reports (compute capability 9.0), with the simulator's name.
typedef struct { char bytes[16]; } cudaUUID_t;
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  char luid[8];
  unsigned int luidDeviceNodeMask;
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize;
  size_t memPitch;
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  size_t totalConstMem;
  int major, minor;
  size_t textureAlignment, texturePitchAlignment;
  int multiProcessorCount, integrated, canMapHostMemory;
  int maxTexture1D, maxTexture1DMipmap, maxTexture2D[2], maxTexture2DMipmap[2], maxTexture2DLinear[3];
  int maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap, maxTexture1DLayered[2];
  int maxTexture2DLayered[3], maxTextureCubemapLayered[2], maxSurface1D, maxSurface2D[2], maxSurface3D[3];
  int maxSurface1DLayered[2], maxSurface2DLayered[3], maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount;
  int unifiedAddressing, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize, maxThreadsPerMultiProcessor;
  int streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported;
  int pageableMemoryAccess, concurrentManagedAccess, computePreemptionSupported;
  int canUseHostPointerForRegisteredMem, cooperativeLaunch;
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor;
  int accessPolicyMaxWindowSize;
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported, sparseCudaArraySupported, hostRegisterReadOnlySupported;
  int timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
  unsigned int gpuDirectRDMAFlushWritesOptions;
  int gpuDirectRDMAWritesOrdering;
  unsigned int memoryPoolSupportedHandleTypes;
  int deferredMappingCudaArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers;
  int deviceNumaConfig, deviceNumaId, mpsEnabled, hostNumaId;
  unsigned int gpuPciDeviceID, gpuPciSubsystemID;
  int hostNumaMultinodeIpcSupported;
  int reserved[56];
};

enum cudaComputeMode {
  cudaComputeModeDefault = 0,
  cudaComputeModeExclusive = 1,
  cudaComputeModeProhibited = 2,
  cudaComputeModeExclusiveProcess = 3,
};

// The attributes code asks for (CUDA's numbering); any other one reads as 0.
enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxBlockDimX = 2,
  cudaDevAttrMaxBlockDimY = 3,
  cudaDevAttrMaxBlockDimZ = 4,
  cudaDevAttrMaxGridDimX = 5,
  cudaDevAttrMaxGridDimY = 6,
  cudaDevAttrMaxGridDimZ = 7,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrTotalConstantMemory = 9,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMaxPitch = 11,
  cudaDevAttrMaxRegistersPerBlock = 12,
  cudaDevAttrClockRate = 13,
  cudaDevAttrTextureAlignment = 14,
  cudaDevAttrGpuOverlap = 15,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrKernelExecTimeout = 17,
  cudaDevAttrIntegrated = 18,
  cudaDevAttrCanMapHostMemory = 19,
  cudaDevAttrComputeMode = 20,
  cudaDevAttrConcurrentKernels = 31,
  cudaDevAttrEccEnabled = 32,
  cudaDevAttrPciBusId = 33,
  cudaDevAttrPciDeviceId = 34,
  cudaDevAttrTccDriver = 35,
  cudaDevAttrMemoryClockRate = 36,
  cudaDevAttrGlobalMemoryBusWidth = 37,
  cudaDevAttrL2CacheSize = 38,
  cudaDevAttrMaxThreadsPerMultiProcessor = 39,
  cudaDevAttrAsyncEngineCount = 40,
  cudaDevAttrUnifiedAddressing = 41,
  cudaDevAttrPciDomainId = 50,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrStreamPrioritiesSupported = 78,
  cudaDevAttrGlobalL1CacheSupported = 79,
  cudaDevAttrLocalL1CacheSupported = 80,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrMaxRegistersPerMultiprocessor = 82,
  cudaDevAttrManagedMemory = 83,
  cudaDevAttrIsMultiGpuBoard = 84,
  cudaDevAttrHostNativeAtomicSupported = 86,
  cudaDevAttrPageableMemoryAccess = 88,
  cudaDevAttrConcurrentManagedAccess = 89,
  cudaDevAttrComputePreemptionSupported = 90,
  cudaDevAttrCooperativeLaunch = 95,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrMaxBlocksPerMultiprocessor = 106,
  cudaDevAttrMaxPersistingL2CacheSize = 108,
  cudaDevAttrReservedSharedMemoryPerBlock = 111,
  cudaDevAttrMemoryPoolsSupported = 115,
  cudaDevAttrClusterLaunch = 120,
};

namespace cudasim {
// The compute capability reported: an H100's 9.0, or $CUDASIM_CAPABILITY ("7.5") to stand in for an older GPU,
// whose launchers' refusals (check_capability in helpers.cuh) the tests of the lessons' gates run here
// (kernels/sim/knobs.py writes it). Read at every query, as the other knobs are at every launch.
CUDASIM_INTERNAL inline std::pair<int, int> reported_capability() {
  const char* c = std::getenv("CUDASIM_CAPABILITY");
  if (!c || !*c) return {9, 0};
  int major = 0, minor = 0, end = 0;
  if (std::sscanf(c, "%d.%d%n", &major, &minor, &end) != 2 || c[end] || major < 1 || minor < 0 || minor > 9 ||
      !std::isdigit(static_cast<unsigned char>(c[0])))
    throw std::runtime_error(std::string("cudasim: CUDASIM_CAPABILITY=") + c +
                             " is not a compute capability; use one such as 7.5 or 9.0");
  return {major, minor};
}

CUDASIM_INTERNAL inline const cudaDeviceProp& device_properties() {
  static const cudaDeviceProp p = [] {
    cudaDeviceProp d;
    std::memset(&d, 0, sizeof d);
    std::snprintf(d.name, sizeof d.name, "cudasim (CPU simulator)");
    d.totalGlobalMem = 80ull << 30;
    d.sharedMemPerBlock = kStaticSharedLimit;
    d.sharedMemPerBlockOptin = kOptinSharedLimit;
    d.sharedMemPerMultiprocessor = 228 * 1024;
    d.reservedSharedMemPerBlock = 1024;
    d.regsPerBlock = d.regsPerMultiprocessor = 65536;
    d.warpSize = 32;
    d.memPitch = 0x7FFFFFFF;
    d.maxThreadsPerBlock = 1024;
    d.maxThreadsDim[0] = 1024, d.maxThreadsDim[1] = 1024, d.maxThreadsDim[2] = 64;
    d.maxGridSize[0] = 0x7FFFFFFF, d.maxGridSize[1] = 65535, d.maxGridSize[2] = 65535;
    d.totalConstMem = 64 * 1024;
    d.major = 9, d.minor = 0;
    d.textureAlignment = 512, d.texturePitchAlignment = 32, d.surfaceAlignment = 512;
    d.multiProcessorCount = 132;
    d.maxThreadsPerMultiProcessor = 2048;
    d.maxBlocksPerMultiProcessor = 32;
    d.l2CacheSize = 50 * 1024 * 1024;
    d.persistingL2CacheMaxSize = 30 * 1024 * 1024;
    d.memoryBusWidth = 5120;
    d.canMapHostMemory = d.concurrentKernels = d.unifiedAddressing = d.managedMemory = 1;
    d.streamPrioritiesSupported = d.globalL1CacheSupported = d.localL1CacheSupported = 1;
    d.concurrentManagedAccess = d.computePreemptionSupported = d.cooperativeLaunch = 1;
    d.memoryPoolsSupported = d.clusterLaunch = d.hostRegisterSupported = 1;
    d.asyncEngineCount = 2;
    d.ECCEnabled = 1;
    return d;
  }();
  return p;
}
}  // namespace cudasim

CUDASIM_INTERNAL inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  *p = ::cudasim::device_properties();
  std::tie(p->major, p->minor) = ::cudasim::reported_capability();
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  const cudaDeviceProp& d = ::cudasim::device_properties();
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = d.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *v = d.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *v = d.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *v = d.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *v = d.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *v = d.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *v = d.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = static_cast<int>(d.sharedMemPerBlock); break;
    case cudaDevAttrTotalConstantMemory: *v = static_cast<int>(d.totalConstMem); break;
    case cudaDevAttrWarpSize: *v = d.warpSize; break;
    case cudaDevAttrMaxPitch: *v = static_cast<int>(d.memPitch); break;
    case cudaDevAttrMaxRegistersPerBlock: *v = d.regsPerBlock; break;
    case cudaDevAttrClockRate: *v = 1980000; break;        // kHz, as the H100 SXM reports
    case cudaDevAttrMemoryClockRate: *v = 2619000; break;  // kHz
    case cudaDevAttrTextureAlignment: *v = static_cast<int>(d.textureAlignment); break;
    case cudaDevAttrMultiProcessorCount: *v = d.multiProcessorCount; break;
    case cudaDevAttrIntegrated: *v = d.integrated; break;
    case cudaDevAttrCanMapHostMemory: *v = d.canMapHostMemory; break;
    case cudaDevAttrComputeMode: *v = cudaComputeModeDefault; break;
    case cudaDevAttrConcurrentKernels: *v = d.concurrentKernels; break;
    case cudaDevAttrEccEnabled: *v = d.ECCEnabled; break;
    case cudaDevAttrGlobalMemoryBusWidth: *v = d.memoryBusWidth; break;
    case cudaDevAttrL2CacheSize: *v = d.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = d.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrAsyncEngineCount: *v = d.asyncEngineCount; break;
    case cudaDevAttrUnifiedAddressing: *v = d.unifiedAddressing; break;
    case cudaDevAttrComputeCapabilityMajor: *v = ::cudasim::reported_capability().first; break;
    case cudaDevAttrComputeCapabilityMinor: *v = ::cudasim::reported_capability().second; break;
    case cudaDevAttrStreamPrioritiesSupported: *v = d.streamPrioritiesSupported; break;
    case cudaDevAttrGlobalL1CacheSupported: *v = d.globalL1CacheSupported; break;
    case cudaDevAttrLocalL1CacheSupported: *v = d.localL1CacheSupported; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = static_cast<int>(d.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *v = d.regsPerMultiprocessor; break;
    case cudaDevAttrManagedMemory: *v = d.managedMemory; break;
    case cudaDevAttrConcurrentManagedAccess: *v = d.concurrentManagedAccess; break;
    case cudaDevAttrComputePreemptionSupported: *v = d.computePreemptionSupported; break;
    case cudaDevAttrCooperativeLaunch: *v = d.cooperativeLaunch; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = static_cast<int>(d.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *v = d.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrMaxPersistingL2CacheSize: *v = d.persistingL2CacheMaxSize; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: *v = static_cast<int>(d.reservedSharedMemPerBlock); break;
    case cudaDevAttrMemoryPoolsSupported: *v = d.memoryPoolsSupported; break;
    case cudaDevAttrClusterLaunch: *v = d.clusterLaunch; break;
    default: *v = 0; break;
  }
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaDriverGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaChooseDevice(int* d, const cudaDeviceProp*) { *d = 0; return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaDeviceReset() { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *total = ::cudasim::device_properties().totalGlobalMem;
  *free_bytes = *total;
  return cudaSuccess;
}

#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceScheduleYield 0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceMapHost 0x08
#define cudaDeviceLmemResizeToMax 0x10
#define cudaDeviceBlockingSync cudaDeviceScheduleBlockingSync  // the older name, which the CUDA samples still use
CUDASIM_INTERNAL inline cudaError_t cudaSetDeviceFlags(unsigned) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaGetDeviceFlags(unsigned* f) { *f = 0; return cudaSuccess; }

enum cudaLimit {
  cudaLimitStackSize = 0x00,
  cudaLimitPrintfFifoSize = 0x01,
  cudaLimitMallocHeapSize = 0x02,
  cudaLimitDevRuntimeSyncDepth = 0x03,
  cudaLimitDevRuntimePendingLaunchCount = 0x04,
  cudaLimitMaxL2FetchGranularity = 0x05,
  cudaLimitPersistingL2CacheSize = 0x06,
};
CUDASIM_INTERNAL inline cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaDeviceGetLimit(size_t* v, cudaLimit l) {
  *v = l == cudaLimitStackSize ? 1024 : l == cudaLimitPrintfFifoSize || l == cudaLimitMallocHeapSize ? 8 << 20 : 0;
  return cudaSuccess;
}
enum cudaFuncCache {
  cudaFuncCachePreferNone = 0,
  cudaFuncCachePreferShared = 1,
  cudaFuncCachePreferL1 = 2,
  cudaFuncCachePreferEqual = 3,
};
enum cudaSharedMemConfig {
  cudaSharedMemBankSizeDefault = 0,
  cudaSharedMemBankSizeFourByte = 1,
  cudaSharedMemBankSizeEightByte = 2,
};
CUDASIM_INTERNAL inline cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* c) { *c = cudaFuncCachePreferNone; return cudaSuccess; }
template <class F>
CUDASIM_INTERNAL inline cudaError_t cudaFuncSetCacheConfig(F*, cudaFuncCache) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaDeviceCanAccessPeer(int* can, int, int) { *can = 0; return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaDeviceDisablePeerAccess(int) { return cudaSuccess; }

// ---------------------------------------------------------------------------------------------
// Host, managed and pitched memory: all of it ordinary memory here.
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaMemAttachSingle 0x04
CUDASIM_INTERNAL inline cudaError_t cudaMallocHost(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  return *p ? cudaSuccess : ::cudasim::record(cudaErrorMemoryAllocation);
}
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaMallocHost(T** p, size_t n, unsigned = 0) {
  return cudaMallocHost(reinterpret_cast<void**>(p), n);
}
CUDASIM_INTERNAL inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMallocHost(p, n); }
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaHostAlloc(T** p, size_t n, unsigned f) {
  return cudaHostAlloc(reinterpret_cast<void**>(p), n, f);
}
CUDASIM_INTERNAL inline cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaHostRegister(void*, size_t, unsigned) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaHostGetDevicePointer(void** d, void* h, unsigned) { *d = h; return cudaSuccess; }
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaHostGetDevicePointer(T** d, void* h, unsigned f) {
  return cudaHostGetDevicePointer(reinterpret_cast<void**>(d), h, f);
}
CUDASIM_INTERNAL inline cudaError_t cudaMallocManaged(void** p, size_t n, unsigned = cudaMemAttachGlobal) {
  return cudaMalloc(p, n);
}
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaMallocManaged(T** p, size_t n, unsigned f = cudaMemAttachGlobal) {
  return cudaMallocManaged(reinterpret_cast<void**>(p), n, f);
}
// Which stream may touch managed memory: one memory here, which every stream may.
CUDASIM_INTERNAL inline cudaError_t cudaStreamAttachMemAsync(cudaStream_t, void*, size_t = 0,
                                                             unsigned = cudaMemAttachSingle) {
  return cudaSuccess;
}
// CUDA 13 takes a cudaMemLocation where CUDA 12 took a device number: either is accepted.
template <class... A>
CUDASIM_INTERNAL inline cudaError_t cudaMemPrefetchAsync(const void*, size_t, A&&...) { return cudaSuccess; }
template <class... A>
CUDASIM_INTERNAL inline cudaError_t cudaMemAdvise(const void*, size_t, A&&...) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t s) {
  return cudaMallocAsync(reinterpret_cast<void**>(p), n, s);
}
CUDASIM_INTERNAL inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }

// Rows padded to a multiple of 512 bytes, as the GPU pads them.
CUDASIM_INTERNAL inline cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
  *pitch = (width + 511) / 512 * 512;
  return cudaMalloc(p, *pitch * height);
}
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaMallocPitch(T** p, size_t* pitch, size_t width, size_t height) {
  return cudaMallocPitch(reinterpret_cast<void**>(p), pitch, width, height);
}
CUDASIM_INTERNAL inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                                 size_t width, size_t height, cudaMemcpyKind) {
  if (width > dpitch || width > spitch) return ::cudasim::record(cudaErrorInvalidPitchValue);
  for (size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                                                      size_t width, size_t height, cudaMemcpyKind k,
                                                      cudaStream_t = nullptr) {
  return cudaMemcpy2D(dst, dpitch, src, spitch, width, height, k);
}
CUDASIM_INTERNAL inline cudaError_t cudaMemset2D(void* dst, size_t pitch, int v, size_t width, size_t height) {
  if (width > pitch) return ::cudasim::record(cudaErrorInvalidPitchValue);
  for (size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(dst) + r * pitch, v, width);
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaMemcpyPeer(void* d, int, const void* s, int, size_t n) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaMemcpyPeerAsync(void* d, int dd, const void* s, int sd, size_t n,
                                                        cudaStream_t = nullptr) {
  return cudaMemcpyPeer(d, dd, s, sd, n);
}

// Symbols: a __device__ or __constant__ variable is an ordinary variable here.
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& sym, size_t n, size_t off = 0,
                                                         cudaMemcpyKind = cudaMemcpyDeviceToHost) {
  if (off + n > sizeof(T)) return ::cudasim::record(cudaErrorInvalidValue);
  std::memcpy(dst, reinterpret_cast<const char*>(&sym) + off, n);
  return cudaSuccess;
}
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaMemcpyToSymbolAsync(T& sym, const void* src, size_t n, size_t off = 0,
                                                            cudaMemcpyKind k = cudaMemcpyHostToDevice,
                                                            cudaStream_t = nullptr) {
  return cudaMemcpyToSymbol(sym, src, n, off, k);
}
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const T& sym, size_t n, size_t off = 0,
                                                              cudaMemcpyKind k = cudaMemcpyDeviceToHost,
                                                              cudaStream_t = nullptr) {
  return cudaMemcpyFromSymbol(dst, sym, n, off, k);
}
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaGetSymbolAddress(void** p, const T& sym) {
  *p = const_cast<void*>(static_cast<const void*>(&sym));
  return cudaSuccess;
}
template <class T>
CUDASIM_INTERNAL inline cudaError_t cudaGetSymbolSize(size_t* n, const T&) {
  *n = sizeof(T);
  return cudaSuccess;
}

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
// Every pointer is device memory, and host memory too: the simulator's device is the CPU.
CUDASIM_INTERNAL inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  a->type = cudaMemoryTypeManaged;
  a->device = 0;
  a->devicePointer = a->hostPointer = const_cast<void*>(p);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Streams and events. Work is done when the call returns, so every stream is idle and every event
// has happened; an event's elapsed time is NaN, because the simulator does not time anything.
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaStreamLegacy (reinterpret_cast<cudaStream_t>(0x1))
#define cudaStreamPerThread (reinterpret_cast<cudaStream_t>(0x2))
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
struct CUstream_st {
  unsigned flags;
};
struct CUevent_st {
  unsigned flags;
};
CUDASIM_INTERNAL inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st{flags};
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
CUDASIM_INTERNAL inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}
CUDASIM_INTERNAL inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s != cudaStreamLegacy && s != cudaStreamPerThread) delete s;
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaStreamQuery(cudaStream_t) { return ::cudasim::sticky(); }
CUDASIM_INTERNAL inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
// Host functions queued on a stream: the work before them is done by the time they are queued here (every call is
// synchronous), so they run at once, on the calling thread, with the stream's status.
#define CUDART_CB
typedef void (*cudaStreamCallback_t)(cudaStream_t, cudaError_t, void*);
typedef void (*cudaHostFn_t)(void*);
CUDASIM_INTERNAL inline cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t fn, void* data,
                                                          unsigned flags) {
  if (!fn || flags != 0) return ::cudasim::record(cudaErrorInvalidValue);  // CUDA reserves flags: they must be 0
  fn(s, ::cudasim::g.sticky_error, data);
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void* data) {
  if (!fn) return ::cudasim::record(cudaErrorInvalidValue);
  if (cudaError_t lost = ::cudasim::sticky()) return lost;
  fn(data);
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  *e = new CUevent_st{flags};
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
CUDASIM_INTERNAL inline cudaError_t cudaEventCreate(cudaEvent_t* e, unsigned flags) { return cudaEventCreateWithFlags(e, flags); }
CUDASIM_INTERNAL inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaEventRecordWithFlags(cudaEvent_t, cudaStream_t = nullptr, unsigned = 0) {
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return ::cudasim::sticky(); }
CUDASIM_INTERNAL inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
CUDASIM_INTERNAL inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  static bool said = false;
  if (!said) {
    said = true;
    std::fprintf(stderr, "cudasim: cudaEventElapsedTime gives NaN: the simulator runs kernels on the CPU and does "
                         "not time them; time the program on a GPU\n");
  }
  *ms = std::nanf("");
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Kernels as functions: attributes, occupancy (an H100's thread limits; registers are not modelled)
// and cudaLaunchKernel with its arguments behind void pointers.
struct cudaFuncAttributes {
  size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
  int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, cacheModeCA, maxDynamicSharedSizeBytes;
  int preferredShmemCarveout, clusterDimMustBeSet, requiredClusterWidth, requiredClusterHeight;
  int requiredClusterDepth, clusterSchedulingPolicyPreference, nonPortableClusterSizeAllowed;
  int reserved[16];
};
template <class F>
CUDASIM_INTERNAL inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) {
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->numRegs = 32;
  a->ptxVersion = a->binaryVersion = 90;
  a->maxDynamicSharedSizeBytes = static_cast<int>(::cudasim::kStaticSharedLimit);
  return cudaSuccess;
}
template <class F>
CUDASIM_INTERNAL inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F*, int block_size,
                                                                                 size_t dynamic_smem) {
  if (block_size <= 0 || block_size > 1024) return ::cudasim::record(cudaErrorInvalidValue);
  int by_threads = 2048 / block_size, by_smem = dynamic_smem ? static_cast<int>(228 * 1024 / dynamic_smem) : 32;
  *blocks = std::min({by_threads, by_smem, 32});
  return cudaSuccess;
}
template <class F>
CUDASIM_INTERNAL inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* blocks, F* f, int block_size, size_t dynamic_smem, unsigned) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, block_size, dynamic_smem);
}
template <class F>
CUDASIM_INTERNAL inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int* min_grid, int* block_size, F*,
                                                                      size_t = 0, int limit = 0) {
  *block_size = limit > 0 && limit < 1024 ? limit : 1024;
  *min_grid = 132 * std::max(1, 2048 / *block_size);
  return cudaSuccess;
}

namespace cudasim {
template <class... P, size_t... I>
CUDASIM_INTERNAL inline cudaError_t launch_kernel_seq(const char* name, const char* file, int line, void (*f)(P...),
                                                      std::index_sequence<I...>, dim3 grid, dim3 block, void** args,
                                                   size_t smem = 0, cudaStream_t stream = nullptr) {
  launch(name, file, line, config(grid, block, smem, stream), [&](auto&... a) { f(a...); },
         *static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);
  return cudaPeekAtLastError();
}
template <class... P, class... Rest>
CUDASIM_INTERNAL inline cudaError_t launch_kernel_(const char* name, const char* file, int line, void (*f)(P...),
                                                   Rest... rest) {
  return launch_kernel_seq(name, file, line, f, std::index_sequence_for<P...>{}, rest...);
}
template <class T, class... Rest>
inline cudaError_t launch_kernel_(const char*, const char*, int, const T*, Rest...) {
  static_assert(!sizeof(T*), "cudaLaunchKernel on the simulator needs the kernel itself, not a void* to it: "
                "write cudaLaunchKernel(kernel, ...) instead of cudaLaunchKernel((void*)kernel, ...)");
  return cudaErrorInvalidDeviceFunction;
}
}  // namespace cudasim
// A launch whose arguments are pointers to the kernel's parameters (their types come from the
// kernel, as in CUDA's templated overload); a cooperative launch is an ordinary one here (its
// grid.sync() is refused, see cooperative_groups.h).
#define cudaLaunchKernel(f, ...) ::cudasim::launch_kernel_(#f, __FILE__, __LINE__, f, __VA_ARGS__)
#define cudaLaunchCooperativeKernel(f, ...) ::cudasim::launch_kernel_(#f, __FILE__, __LINE__, f, __VA_ARGS__)

// cudaLaunchKernelEx (the C++ form: the kernel and its arguments) with a configuration and attributes. The cluster
// attribute makes a thread-block cluster; the others (priority, programmatic serialisation, ...) change nothing a
// kernel can see here and are accepted.
enum cudaLaunchAttributeID {
  cudaLaunchAttributeIgnore = 0, cudaLaunchAttributeAccessPolicyWindow = 1, cudaLaunchAttributeCooperative = 2,
  cudaLaunchAttributeSynchronizationPolicy = 3, cudaLaunchAttributeClusterDimension = 4,
  cudaLaunchAttributeClusterSchedulingPolicyPreference = 5, cudaLaunchAttributeProgrammaticStreamSerialization = 6,
  cudaLaunchAttributeProgrammaticEvent = 7, cudaLaunchAttributePriority = 8
};
enum cudaClusterSchedulingPolicy { cudaClusterSchedulingPolicyDefault = 0, cudaClusterSchedulingPolicySpread = 1,
                                   cudaClusterSchedulingPolicyLoadBalancing = 2 };
// The L2 cache's access policy (a window of global memory kept in L2): accepted, and it changes nothing here, where
// there is no cache to keep anything in.
enum cudaAccessProperty { cudaAccessPropertyNormal = 0, cudaAccessPropertyStreaming = 1, cudaAccessPropertyPersisting = 2 };
struct cudaAccessPolicyWindow {
  void* base_ptr;
  size_t num_bytes;
  float hitRatio;
  cudaAccessProperty hitProp, missProp;
};
union cudaLaunchAttributeValue {
  char pad[64];
  cudaAccessPolicyWindow accessPolicyWindow;
  struct { unsigned int x, y, z; } clusterDim;
  cudaClusterSchedulingPolicy clusterSchedulingPolicyPreference;
  int cooperative;
  int priority;
  int programmaticStreamSerializationAllowed;
};
// A stream's attributes are the launch attributes under their older names (CUDA 12 made them one type).
typedef cudaLaunchAttributeID cudaStreamAttrID;
typedef cudaLaunchAttributeValue cudaStreamAttrValue;
#define cudaStreamAttributeAccessPolicyWindow cudaLaunchAttributeAccessPolicyWindow
#define cudaStreamAttributeSynchronizationPolicy cudaLaunchAttributeSynchronizationPolicy
#define cudaStreamAttributePriority cudaLaunchAttributePriority
CUDASIM_INTERNAL inline cudaError_t cudaStreamSetAttribute(cudaStream_t, cudaStreamAttrID, const cudaStreamAttrValue* v) {
  return v ? cudaSuccess : ::cudasim::record(cudaErrorInvalidValue);
}
CUDASIM_INTERNAL inline cudaError_t cudaStreamGetAttribute(cudaStream_t, cudaStreamAttrID, cudaStreamAttrValue* v) {
  if (!v) return ::cudasim::record(cudaErrorInvalidValue);
  *v = cudaStreamAttrValue{};
  return cudaSuccess;
}
CUDASIM_INTERNAL inline cudaError_t cudaCtxResetPersistingL2Cache() { return cudaSuccess; }
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  char pad[8 - sizeof(cudaLaunchAttributeID)];
  cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned int numAttrs;
};
namespace cudasim {
// A launch configuration's cluster shape: its cluster attribute's (the last one given), {0, 0, 0} without one.
CUDASIM_INTERNAL inline dim3 cluster_attribute(const cudaLaunchConfig_t& cfg) {
  dim3 out(0, 0, 0);
  for (unsigned i = 0; i < cfg.numAttrs; ++i)
    if (cfg.attrs[i].id == cudaLaunchAttributeClusterDimension) {
      const auto& d = cfg.attrs[i].val.clusterDim;
      out = dim3(d.x, d.y, d.z);
    }
  return out;
}

template <class... P, class... A>
CUDASIM_INTERNAL inline cudaError_t launch_kernel_ex_(const char* name, const char* file, int line,
                                                      const cudaLaunchConfig_t* cfg, void (*f)(P...), A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "cudaLaunchKernelEx: give one argument per kernel parameter");
  if (!cfg) return record(cudaErrorInvalidValue);
  Config c = config(cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes, cfg->stream);
  c.cluster = cluster_attribute(*cfg);
  const bool given = c.cluster.x || c.cluster.y || c.cluster.z;
  if (given && (!c.cluster.x || !c.cluster.y || !c.cluster.z)) return record(cudaErrorInvalidClusterSize);
  launch(name, file, line, c, [&](auto&... a) { f(a...); },
         static_cast<std::remove_cv_t<std::remove_reference_t<P>>>(std::forward<A>(args))...);
  return cudaPeekAtLastError();
}
// How many clusters of the configuration's shape can run at once: an H100's 132 SMs, one block of the
// configuration per SM (the simulator does not model GPCs, where a GPU may fit fewer). The shape is the kernel's
// __cluster_dims__ or the configuration's attribute, refused as the launch refuses it (cluster_shape): more than 8
// blocks without cudaFuncAttributeNonPortableClusterSizeAllowed is cudaErrorInvalidClusterSize. `name` is the
// kernel as written in the call (the launch finds its attributes by the same name).
template <class F>
CUDASIM_INTERNAL inline cudaError_t occupancy_max_active_clusters(const char* name, int* n, F*,
                                                                  const cudaLaunchConfig_t* cfg) {
  if (!n || !cfg) return record(cudaErrorInvalidValue);
  const dim3 given = cluster_attribute(*cfg);
  if ((given.x || given.y || given.z) && (!given.x || !given.y || !given.z))
    return record(cudaErrorInvalidClusterSize);
  dim3 d;
  if (!cluster_shape(name, given, d)) return record(cudaErrorInvalidClusterSize);
  *n = static_cast<int>(132 / (d.x * d.y * d.z));
  return cudaSuccess;
}
}  // namespace cudasim
#define cudaOccupancyMaxActiveClusters(n, f, cfg) ::cudasim::occupancy_max_active_clusters(#f, n, f, cfg)
#define cudaLaunchKernelEx(cfg, f, ...) ::cudasim::launch_kernel_ex_(#f, __FILE__, __LINE__, cfg, f, ##__VA_ARGS__)

// ---------------------------------------------------------------------------------------------
// Device-side intrinsics.
namespace cudasim {
[[noreturn]] CUDASIM_INTERNAL inline void trap_(const char* file, int line) {
  SimScope scope;
  if (!g.cur) throw std::runtime_error("cudasim: __trap() called outside a kernel");
  fail("__trap() at " + base_name(file) + ":" + std::to_string(line) +
       ": the kernel stopped itself (on a GPU the launch fails with \"unspecified launch failure\" and the "
       "CUDA context is lost)");
}
}  // namespace cudasim
#define __trap() ::cudasim::trap_(__FILE__, __LINE__)

// assert() in a kernel. On a GPU a failed assert prints the condition with the block and thread, and the launch fails
// with cudaErrorAssert ("device-side assert triggered"); glibc's assert would abort the whole process here (a Jupyter
// kernel with it). glibc's assert calls __assert_fail, which this module defines for itself (inline, so hidden in
// each library and program, and glibc's own stays as it is): in a kernel thread it stops the thread, and the launch
// fails naming the condition, the line, the block and the thread; anywhere else it does what glibc's does.
namespace cudasim {
[[noreturn]] CUDASIM_RT void device_assert_failed(const char* expr, const char* file, unsigned line) {
  SimScope scope;
  g.fail_code = cudaErrorAssert;
  stop_thread("device-side assert triggered: the assertion `" + std::string(expr) + "' failed at " + base_name(file) +
              ":" + std::to_string(line) + " (on a GPU the launch fails with cudaErrorAssert, \"device-side assert "
              "triggered\", and the CUDA context is lost)");
}
}  // namespace cudasim
#if defined(__GLIBC__) && !defined(NDEBUG)
extern "C" inline __attribute__((noreturn)) void __assert_fail(const char* expr, const char* file, unsigned int line,
                                                             const char* function) noexcept {
  if (::cudasim::g.cur && ::cudasim::g.running) ::cudasim::device_assert_failed(expr, file, line);
  std::fprintf(stderr, "%s:%u: %s: Assertion `%s' failed.\n", file, line, function, expr);
  std::abort();
}
#endif
#define __brkpt() ((void)0)

template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, typename ::cudasim::type_identity<T>::type v) { *p = v; }

// Integer intrinsics.
inline int __hadd(int a, int b) { return static_cast<int>((static_cast<long long>(a) + b) >> 1); }
inline int __rhadd(int a, int b) { return static_cast<int>((static_cast<long long>(a) + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return static_cast<unsigned>((1ull * a + b) >> 1); }
inline unsigned __urhadd(unsigned a, unsigned b) { return static_cast<unsigned>((1ull * a + b + 1) >> 1); }
inline int __mul24(int a, int b) {
  return static_cast<int>(static_cast<long long>(a << 8 >> 8) * static_cast<long long>(b << 8 >> 8));
}
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }
inline long long __mul64hi(long long a, long long b) { return static_cast<long long>((static_cast<__int128>(a) * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
// The integer minimum and maximum functions of CUDA's math library.
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned __sad(int a, int b, unsigned c) { return c + static_cast<unsigned>(a > b ? a - b : b - a); }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long both = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((both >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>(((static_cast<unsigned long long>(hi) << 32 | lo) << (s & 31u)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>(((static_cast<unsigned long long>(hi) << 32 | lo) << (s < 32 ? s : 32)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>((static_cast<unsigned long long>(hi) << 32 | lo) >> (s & 31u));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
  return static_cast<unsigned>((static_cast<unsigned long long>(hi) << 32 | lo) >> (s < 32 ? s : 32));
}
// The n-th set bit (n counted from 1, or back from -1) at or after (before) `base`; 0xFFFFFFFF if none.
inline unsigned __fns(unsigned mask, unsigned base, int offset) {
  if (offset == 0) return base < 32 && (mask >> base & 1u) ? base : 0xFFFFFFFFu;
  int step = offset > 0 ? 1 : -1, need = offset > 0 ? offset : -offset;
  for (int b = static_cast<int>(base); b >= 0 && b < 32; b += step)
    if ((mask >> b & 1u) && --need == 0) return static_cast<unsigned>(b);
  return 0xFFFFFFFFu;
}
// Dot products of packed 8- and 16-bit integers (sm_61 and later).
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i) c += static_cast<signed char>(a >> (8 * i)) * static_cast<signed char>(b >> (8 * i));
  return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 0xFFu) * ((b >> (8 * i)) & 0xFFu);
  return c;
}
inline int __dp2a_lo(int a, int b, int c) {
  for (int i = 0; i < 2; ++i) c += static_cast<short>(a >> (16 * i)) * static_cast<signed char>(b >> (8 * i));
  return c;
}
inline int __dp2a_hi(int a, int b, int c) {
  for (int i = 0; i < 2; ++i) c += static_cast<short>(a >> (16 * i)) * static_cast<signed char>(b >> (8 * (i + 2)));
  return c;
}

// Conversions between floats and integers in CUDA's rounding modes (saturating; NaN gives 0).
#define CUDASIM_F2I(from, F, to, I)                                                                                    \
  inline I __##from##2##to##_rn(F v) { return ::cudasim::to_integer<I>(v, ::cudasim::Round::Nearest); }                \
  inline I __##from##2##to##_rz(F v) { return ::cudasim::to_integer<I>(v, ::cudasim::Round::Zero); }                   \
  inline I __##from##2##to##_rd(F v) { return ::cudasim::to_integer<I>(v, ::cudasim::Round::Down); }                   \
  inline I __##from##2##to##_ru(F v) { return ::cudasim::to_integer<I>(v, ::cudasim::Round::Up); }
CUDASIM_F2I(float, float, uint, unsigned)
CUDASIM_F2I(float, float, ll, long long)
CUDASIM_F2I(float, float, ull, unsigned long long)
CUDASIM_F2I(double, double, int, int)
CUDASIM_F2I(double, double, uint, unsigned)
CUDASIM_F2I(double, double, ll, long long)
CUDASIM_F2I(double, double, ull, unsigned long long)
#undef CUDASIM_F2I
inline int __float2int_rd(float v) { return ::cudasim::to_integer<int>(v, ::cudasim::Round::Down); }
inline int __float2int_ru(float v) { return ::cudasim::to_integer<int>(v, ::cudasim::Round::Up); }
#define CUDASIM_I2F(from, I)                                                                                  \
  inline float __##from##2float_rn(I v) { return static_cast<float>(v); }                                     \
  inline float __##from##2float_rz(I v) { return ::cudasim::integer_to_float(v, ::cudasim::Round::Zero); }     \
  inline float __##from##2float_rd(I v) { return ::cudasim::integer_to_float(v, ::cudasim::Round::Down); }     \
  inline float __##from##2float_ru(I v) { return ::cudasim::integer_to_float(v, ::cudasim::Round::Up); }
namespace cudasim {
template <class I>
CUDASIM_INTERNAL inline float integer_to_float(I v, Round mode) {
  uint32_t bits = round_any_integer(v, mode, kFloatFormat);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace cudasim
CUDASIM_I2F(int, int)
CUDASIM_I2F(uint, unsigned)
CUDASIM_I2F(ll, long long)
CUDASIM_I2F(ull, unsigned long long)
#undef CUDASIM_I2F
inline double __ll2double_rn(long long v) { return static_cast<double>(v); }
inline double __ull2double_rn(unsigned long long v) { return static_cast<double>(v); }
inline float __double2float_rn(double v) { return static_cast<float>(v); }
inline int __double2hiint(double v) { long long b; std::memcpy(&b, &v, 8); return static_cast<int>(b >> 32); }
inline int __double2loint(double v) { long long b; std::memcpy(&b, &v, 8); return static_cast<int>(b); }
inline double __hiloint2double(int hi, int lo) {
  long long b = static_cast<long long>(static_cast<unsigned long long>(static_cast<unsigned>(hi)) << 32 |
                                       static_cast<unsigned>(lo));
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}

// CUDA's float functions that the C library does not have.
inline float sinpif(float x) { return static_cast<float>(std::sin(M_PI * static_cast<double>(x))); }
inline float cospif(float x) { return static_cast<float>(std::cos(M_PI * static_cast<double>(x))); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline double sinpi(double x) { return std::sin(M_PI * x); }
inline double cospi(double x) { return std::cos(M_PI * x); }
inline void sincospi(double x, double* s, double* c) { *s = sinpi(x); *c = cospi(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline double rcbrt(double x) { return 1.0 / std::cbrt(x); }
inline float rhypotf(float x, float y) { return 1.0f / hypotf(x, y); }
inline double rhypot(double x, double y) { return 1.0 / std::hypot(x, y); }
inline float norm3df(float a, float b, float c) { return static_cast<float>(std::sqrt(1.0 * a * a + 1.0 * b * b + 1.0 * c * c)); }
inline float rnorm3df(float a, float b, float c) { return 1.0f / norm3df(a, b, c); }
inline float norm4df(float a, float b, float c, float d) {
  return static_cast<float>(std::sqrt(1.0 * a * a + 1.0 * b * b + 1.0 * c * c + 1.0 * d * d));
}
inline float rnorm4df(float a, float b, float c, float d) { return 1.0f / norm4df(a, b, c, d); }
inline double norm3d(double a, double b, double c) { return std::sqrt(a * a + b * b + c * c); }
inline double rnorm3d(double a, double b, double c) { return 1.0 / norm3d(a, b, c); }
inline float normf(int n, const float* a) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += 1.0 * a[i] * a[i];
  return static_cast<float>(std::sqrt(s));
}
inline float rnormf(int n, const float* a) { return 1.0f / normf(n, a); }
namespace cudasim {
// erf^-1 by Newton's method on erf, from a first guess good to about 1e-3.
CUDASIM_INTERNAL inline double erfinv_(double y) {
  if (std::isnan(y) || y < -1 || y > 1) return std::nan("");
  if (y == 1 || y == -1) return y * HUGE_VAL;
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  x = y * (w < 5 ? 0.886 + 0.232 * w : 1.41 + 0.28 * std::sqrt(w));
  x = std::copysign(std::min(std::fabs(x), std::sqrt(w)), y);
  for (int i = 0; i < 60; ++i) {
    double step = (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
    x -= step;
    if (std::fabs(step) <= 1e-16 * std::fabs(x)) break;
  }
  return x;
}
}  // namespace cudasim
inline double erfinv(double y) { return ::cudasim::erfinv_(y); }
inline float erfinvf(float y) { return static_cast<float>(::cudasim::erfinv_(y)); }
inline double erfcinv(double y) { return ::cudasim::erfinv_(1.0 - y); }
inline float erfcinvf(float y) { return static_cast<float>(::cudasim::erfinv_(1.0 - static_cast<double>(y))); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * M_SQRT1_2); }
inline double normcdfinv(double p) { return -M_SQRT2 * erfcinv(2.0 * p); }
inline float normcdfinvf(float p) { return static_cast<float>(normcdfinv(p)); }
inline float erfcxf(float x) { return static_cast<float>(std::exp(1.0 * x * x) * std::erfc(1.0 * x)); }
inline double erfcx(double x) { return std::exp(x * x) * std::erfc(x); }
