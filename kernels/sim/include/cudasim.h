// cudasim.h: the runtime of the CPU simulator (the `sim` backend).
//
// A .cu file is translated (kernels/sim/translate.py rewrites launches, __shared__ declarations
// and a kernel's `return;`, little else) and compiled as ordinary C++ with this header in front.
// Every CUDA thread of a block is a fiber with its own stack; one block runs at a time and its
// fibers switch only at __syncthreads, warp operations, an atomic repeated without changing
// memory (a poll), __nanosleep or the end of the thread. That gives CUDA's semantics for
// everything a correct kernel may rely on, and turns the usual bugs into wrong answers or clear
// errors instead of lucky passes:
//   - shared memory is poisoned (all bytes 0xFF, a NaN for floats) at every block start;
//   - threads can run forward, in reverse or in random order, blocks can be shuffled
//     (CUDASIM_ORDER=forward|reverse|random, CUDASIM_SHUFFLE_BLOCKS=1, CUDASIM_SEED=n), and one block of
//     a thread-block cluster runs ahead of the others (CUDASIM_CLUSTER_LEAD=first|last|random|none);
//   - a barrier reached at different places, a warp operation that waits for a lane that never
//     comes, a shuffle naming a lane that has exited, a deadlock, a spin that never ends and a
//     stack overflow raise an error naming the kernel, the block and the line;
//   - an access outside mapped memory (a wild index) raises an error naming the thread, the
//     line and the address instead of killing the process.
// See kernels/sim/README.md for what is supported and what is not.
#pragma once

#define CUDASIM 1
#define __CUDASIM__ 1

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <math.h>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

// Instrumented builds (kernels.profile, and the check's race and bounds pass: -DCUDASIM_INSTRUMENTED
// -fsanitize=thread) make every load and store of the learner's code call a hook
// (cudasim_instrument.h). The simulator's own functions carry CUDASIM_INTERNAL: they are not
// instrumented, so that the hooks see only the learner's accesses (a simulator function that reads or
// writes memory on a thread's behalf reports it with note_read/note_write). Such functions must not
// be always_inline: GCC refuses to inline across a sanitizer-attribute mismatch. Clang's
// no_sanitize_thread still instruments atomics (a hook that performs an atomic would call itself), so
// with clang they carry disable_sanitizer_instrumentation, which leaves out everything, as GCC does.
#if defined(__clang__) && __has_attribute(disable_sanitizer_instrumentation)
#define CUDASIM_UNINSTRUMENTED disable_sanitizer_instrumentation
#else
#define CUDASIM_UNINSTRUMENTED no_sanitize_thread
#endif
// GCC never inlines them into the learner's instrumented code; clang would (their own accesses then
// instrumented, __builtin_return_address no longer the learner's line), so there they are noinline.
#if defined(__clang__) && defined(CUDASIM_INSTRUMENTED)
#define CUDASIM_INTERNAL __attribute__((CUDASIM_UNINSTRUMENTED, noinline))
#else
#define CUDASIM_INTERNAL __attribute__((CUDASIM_UNINSTRUMENTED))
#endif
// The simulator's larger functions (the scheduler, warp operations, error reports, the check's and the
// profiler's bookkeeping) carry CUDASIM_RT. Compiled in every file they are about a second of each sim
// build, so kernels/sim/build.py compiles them once per set of flags into an object of their own
// (-DCUDASIM_RUNTIME_OBJECT: their one definition) and links it into every build of those flags, which
// sees them as GNU `extern inline` (-DCUDASIM_PREBUILT_RUNTIME): declared, the body never compiled there,
// each call a call into the object. Without either macro they are ordinary inline functions, so a file
// also builds alone (the object is an optimisation of the build, never needed for correctness).
#if defined(CUDASIM_RUNTIME_OBJECT)
#define CUDASIM_RT CUDASIM_INTERNAL
#elif defined(CUDASIM_PREBUILT_RUNTIME) && defined(__clang__)
#define CUDASIM_RT CUDASIM_INTERNAL __attribute__((gnu_inline, noinline)) extern inline
#elif defined(CUDASIM_PREBUILT_RUNTIME)
#define CUDASIM_RT CUDASIM_INTERNAL __attribute__((gnu_inline)) extern inline  // gcc: noinline conflicts with it
#else
#define CUDASIM_RT CUDASIM_INTERNAL inline
#endif
// The same for the state of the simulator's optional parts (cudasim_ptx.h's mbarriers, bulk stores and wgmma
// groups, cp.async's pipelines): objects with constructors and destructors, which every file that includes
// their header would otherwise compile (about two seconds of each build, with the registrations of their
// checks at a block's end). The runtime object defines them (and makes the registrations: it includes
// cudasim_ptx.h); a build that links it sees them extern. Without it they are inline variables. The runtime
// object's are inline too (kept by `used`), so that an object compiled without the runtime (nvcc-sim -c) and
// linked beside it shares their one guard: each is constructed and destroyed once.
#if defined(CUDASIM_RUNTIME_OBJECT)
#define CUDASIM_RT_STATE inline __attribute__((used))  // inline: an nvcc-sim object linked beside it shares its guard
#elif defined(CUDASIM_PREBUILT_RUNTIME)
#define CUDASIM_RT_STATE extern
#else
#define CUDASIM_RT_STATE inline
#endif

#include "cudasim_platform.h"  // the fiber switch and the fault handler's registers, per CPU and OS
#ifdef SI_KERNEL
#define CUDASIM_NO_ADDRESS_FAULT SI_KERNEL  // Linux: a fault without an address (a general-protection fault)
#else
#define CUDASIM_NO_ADDRESS_FAULT (-1)  // other systems have no such si_code: never matches
#endif

// ---------------------------------------------------------------------------------------------
// asm operands: nvcc's rules. "h" "r" "l" take an integer, enum (or for "l" a pointer) of exactly
// 2, 4, 8 bytes; "f" a float; "d" a double. Anything else is the error nvcc gives. Here rather than in
// cudasim_ptx.h: an asm statement without an instruction (a value held in registers, a compiler barrier)
// becomes only these checks of its operands, and its file does not need the PTX header (kernels/sim/ptx.py).
namespace cudasim {
namespace ptx {
template <char C>
using reg_t = std::conditional_t<C == 'h', uint16_t, std::conditional_t<C == 'r', uint32_t,
              std::conditional_t<C == 'l', uint64_t, std::conditional_t<C == 'f', float, double>>>>;

template <char C, class X>
constexpr bool operand_ok =
    (C == 'f') ? std::is_same_v<X, float>
  : (C == 'd') ? std::is_same_v<X, double>
  : ((std::is_integral_v<X> && !std::is_same_v<X, bool>) || std::is_enum_v<X> || (C == 'l' && std::is_pointer_v<X>)) &&
        sizeof(X) == sizeof(reg_t<C>);
}  // namespace ptx
}  // namespace cudasim

#define CUDASIM_PTX_OPERAND_CHECK(C, X)                                                                          \
  static_assert(::cudasim::ptx::operand_ok<C, X>, "asm operand type/size does not match the type/size implied by " \
                "its constraint (nvcc refuses it too): \"h\" takes a 2-byte integer, \"r\" a 4-byte integer, \"l\" "  \
                "an 8-byte integer or a pointer, \"f\" a float, \"d\" a double")

namespace cudasim {
// The operands of an asm statement without an instruction: "+" ones must be modifiable lvalues, as nvcc says.
template <char C, class X>
inline void asm_operand_inout(X&) {
  static_assert(!std::is_const_v<X>, "an asm operand marked \"+\" (read and written) must be a modifiable lvalue");
  CUDASIM_PTX_OPERAND_CHECK(C, X);
}
template <char C, class X>
inline void asm_operand_in(const X&) {
  CUDASIM_PTX_OPERAND_CHECK(C, std::remove_cv_t<X>);
}
}  // namespace cudasim

// ---------------------------------------------------------------------------------------------
// Qualifiers: on the CPU every function is host code. (nvcc-sim -E keeps them in its output, where they say
// what each function is: CUDASIM_PREPROCESS_ONLY.)
#ifndef CUDASIM_PREPROCESS_ONLY
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#endif
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __grid_constant__

// ---------------------------------------------------------------------------------------------
// Vector types, laid out and aligned as CUDA lays them out.
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define CUDASIM_VEC1(T, N, A) struct alignas(A) N##1 { T x; }; \
  inline N##1 make_##N##1(T x) { return N##1{x}; }
#define CUDASIM_VEC2(T, N, A) struct alignas(A) N##2 { T x, y; }; \
  inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define CUDASIM_VEC3(T, N) struct N##3 { T x, y, z; }; \
  inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define CUDASIM_VEC4(T, N, A) struct alignas(A) N##4 { T x, y, z, w; }; \
  inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define CUDASIM_VECS(T, N, S) CUDASIM_VEC1(T, N, S) CUDASIM_VEC2(T, N, 2 * S) \
  CUDASIM_VEC4(T, N, (4 * S > 16 ? 16 : 4 * S))
CUDASIM_VECS(signed char, char, 1)
CUDASIM_VECS(unsigned char, uchar, 1)
CUDASIM_VECS(short, short, 2)
CUDASIM_VECS(unsigned short, ushort, 2)
CUDASIM_VECS(int, int, 4)
CUDASIM_VECS(unsigned int, uint, 4)
CUDASIM_VECS(long long, longlong, 8)
CUDASIM_VECS(unsigned long long, ulonglong, 8)
CUDASIM_VECS(float, float, 4)
CUDASIM_VECS(double, double, 8)
CUDASIM_VEC3(signed char, char) CUDASIM_VEC3(unsigned char, uchar) CUDASIM_VEC3(short, short)
CUDASIM_VEC3(unsigned short, ushort) CUDASIM_VEC3(int, int) CUDASIM_VEC3(long long, longlong)
CUDASIM_VEC3(unsigned long long, ulonglong) CUDASIM_VEC3(float, float) CUDASIM_VEC3(double, double)
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
#undef CUDASIM_VEC1
#undef CUDASIM_VEC2
#undef CUDASIM_VEC3
#undef CUDASIM_VEC4
#undef CUDASIM_VECS

// ---------------------------------------------------------------------------------------------
// The runtime API subset, with CUDA's error codes and strings.
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorInvalidSymbol = 13,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorAssert = 710,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorInvalidClusterSize = 912,
  cudaErrorUnknown = 999,
};
typedef cudaError_t cudaError;
inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorInvalidClusterSize: return "invalid cluster size";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unknown error";
}
inline const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidSymbol: return "cudaErrorInvalidSymbol";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorInvalidClusterSize: return "cudaErrorInvalidClusterSize";
    case cudaErrorUnknown: return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct CUevent_st;
typedef CUevent_st* cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                      cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9,
                         cudaFuncAttributeNonPortableClusterSizeAllowed = 14 };

namespace cudasim {

constexpr size_t kStaticSharedLimit = 48 * 1024;   // without an opt-in, as on every GPU
constexpr size_t kOptinSharedLimit = 227 * 1024;   // the H100's per-block maximum
constexpr size_t kCanary = 64;                     // guard bytes after dynamic shared memory
constexpr unsigned char kPoison = 0xFF;            // a NaN in every float type, -1 in integers
constexpr unsigned kMaxCluster = 16;               // blocks in a cluster: 8 portable, 16 with the opt-in
constexpr int kIdleRounds = 2000;                  // polls with nothing moving on before a wait is a deadlock
constexpr unsigned kPortableCluster = 8;

// ---------------------------------------------------------------------------------------------
// Fibers. On x86-64 and arm64 (Linux and macOS) a hand-written switch saves the callee-saved
// registers (cudasim_platform.h; about 17 ns on x86-64); on other CPUs ucontext is used (a system
// call per switch, about 10x slower).
#ifndef CUDASIM_UCONTEXT
using platform::switch_stack;
#endif

enum class State : unsigned char { Ready, Barrier, Warp, Yield, Done };
enum class WarpOp : unsigned char { Active, Sync, ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All,
                                    ReduceAdd, ReduceMin, ReduceMax, ReduceAnd, ReduceOr, ReduceXor,
                                    ReduceUMin, ReduceUMax,  // these two: unsigned compare
                                    Collective };  // a warp-wide call such as wmma::mma_sync (WarpJob)
CUDASIM_INTERNAL inline bool is_shuffle(WarpOp op) { return op >= WarpOp::ShflIdx && op <= WarpOp::ShflXor; }
enum class BarKind : unsigned char { Plain, Count, And, Or };

struct Thread {
  void* sp = nullptr;
#ifdef CUDASIM_UCONTEXT
  ucontext_t uc;
#endif
  char* stack = nullptr;
  size_t stack_size = 0;
  uint3 idx{0, 0, 0};
  int linear = 0;  // the thread's slot in Sim::threads: its linear threadIdx, plus its block's first slot in a cluster
  int local = 0;   // its linear threadIdx
  int cta = 0;     // its block's rank in the cluster (0 without clusters)
  State state = State::Ready;
  // __syncthreads
  int bar_site = 0;
  const char* bar_file = nullptr;
  int bar_line = 0;
  BarKind bar_kind = BarKind::Plain;
  int bar_pred = 0;
  int bar_result = 0;
  // warp operations
  WarpOp wop = WarpOp::Sync;
  unsigned int wmask = 0;
  int warg = 0, wwidth = 32;
  unsigned char wval[16];
  unsigned char wout[16];
  unsigned long long wres = 0;
  const char* wfile = nullptr;
  int wline = 0;
  const char* wname = nullptr;  // a Collective's function name, for messages
  // where the thread left the kernel: a `return;` in the kernel's body (the translator marks
  // each one), or nullptr for the end of the body
  const char* exit_file = nullptr;
  int exit_line = 0;
  // the atomic this thread repeats without changing memory (a poll): address, value seen, count
  const void* spin_addr = nullptr;
  unsigned long long spin_value = 0, spin_count = 0, spin_progress = 0;
  double spin_since = 0;  // a poll of peer memory (another process's): when it began, in seconds (peer_poll)
  // inside a simulator function called by the learner's code (see SimScope)
  bool in_sim = false;
  // barrier.cluster: the phase this thread arrived for (it waits until that many phases completed), and
  // whether its arrival still waits for its wait
  unsigned long long cluster_arrived = 0;
  bool cluster_pending = false;
};

// One rank's segment of peer memory as this process maps it (kernels/sim/peers.py writes CUDASIM_PEERS): its
// buffer, its signal pad, and the race check's shadow of both (cudasim_peers.h), each [lo, lo + bytes).
struct PeerSegment {
  int owner = 0, me = 0;  // the rank whose memory it is, and this process's rank
  uintptr_t buf = 0, buf_bytes = 0, pad = 0, pad_bytes = 0, shadow = 0, shadow_bytes = 0;
};

struct SharedSlot {
  unsigned long long gen;
  size_t offset;
};

struct Sim {
  unsigned long long launches = 0;  // launches so far: each gets its own random thread order
  long long clock = 0;              // what clock64() counted so far
  // the running launch
  Thread* cur = nullptr;
  uint3 thread_idx{0, 0, 0};  // the running thread's threadIdx, refreshed at every switch
  uint3 block_idx{0, 0, 0};
  dim3 block_dim, grid_dim;
  const char* kernel = "";
  const char* launch_file = "";
  int launch_line = 0;
  int nthreads = 0;
  bool running = false;
  // fibers
  std::vector<Thread> threads;
  std::vector<int> runq;
  size_t runq_head = 0;
  // per warp of the running block: the lanes waiting in a warp operation (not __activemask) and the lanes that
  // have finished, so that a lane arriving at a warp operation knows in a few instructions whether it is the last
  std::vector<unsigned> warp_waiting, warp_done;
  void* sched_sp = nullptr;
#ifdef CUDASIM_UCONTEXT
  ucontext_t sched_uc;
#endif
  void (*body)(void*) = nullptr;
  void* body_ctx = nullptr;
  std::exception_ptr error;
  // shared memory
  unsigned char* smem = nullptr;
  size_t dyn_bytes = 0, static_base = 0, static_used = 0, static_limit = kStaticSharedLimit;
  unsigned long long block_gen = 0;
  // knobs
  int order = 0;  // 0 forward, 1 reverse, 2 random
  bool shuffle_blocks = false;
  int lead_knob = -1;  // CUDASIM_CLUSTER_LEAD, as kLeadNames: 0 none, 1 first, 2 last, 3 random; -1 (unset) by order
  std::mt19937_64 rng{0};
  // Peer memory (kernels/sim/peers.py): other processes' buffers and signal pads mapped into this one, one segment
  // per rank, as CUDASIM_PEERS lists them; CUDASIM_PEER_TIMEOUT, how long a poll of it may wait (seconds).
  std::vector<PeerSegment> peers;
  const PeerSegment* peer_at = nullptr;  // peers' storage and count, for the instrumented build's hooks, which must not
  size_t peer_count = 0;                 // call the (instrumented) vector's members
  std::string peers_text;                 // the knob as last read: a new value starts a new set of segments
  unsigned long long peer_launches = 0;   // launches since it was set: every rank shuffles its blocks alike
  double peer_timeout = 60;
  // spinning detection: yields in a row without any thread finishing or passing a barrier
  unsigned long long idle_yields = 0;
  // bumped whenever the block visibly moves on: an atomic that changes memory, a barrier or warp
  // operation that completes, a thread that finishes
  unsigned long long progress = 0;
  // a finding of an instrumented build's hooks in a running thread (a race, an access out of
  // bounds; see stop_thread): what it says, and the thread, or -1
  std::string finding;
  int finding_thread = -1;
  // a fault caught by the SIGSEGV handler in a running thread (see on_segv): the thread, or -1
  volatile int fault_thread = -1;
  volatile bool fault_overflow = false;  // in the thread's stack guard, else an illegal access
  volatile bool fault_spin = false;      // stopped by the watchdog (see spin_watchdog), not a fault
  // the CUDA error of the failure that stops the running launch (an illegal address, an assert), set where it is found;
  // cudaSuccess for any other failure, which a whole program gets as cudaErrorLaunchFailure (kernel_failed)
  cudaError_t fail_code = cudaSuccess;
  // the watchdog's view of a launch: fibers resumed so far, the thread running the launch, its limit in seconds
  std::atomic<unsigned long long> resumes{0};
  pthread_t launch_thread{};
  double spin_seconds = 30;  // CUDASIM_SPIN_SECONDS
  const void* volatile fault_addr = nullptr;
  volatile int fault_code = 0;  // the signal's si_code: SI_KERNEL for a fault that carries no address (Linux)
  const void* volatile fault_pc = nullptr;
  const void* volatile fault_sp = nullptr;
  // the sticky and the last error, as cudaGetLastError reports them
  cudaError_t last_error = cudaSuccess;
  // a kernel's failure in a whole program (see kernel_failed): every later call reports it, as a lost CUDA context does
  cudaError_t sticky_error = cudaSuccess;
  // opt-in dynamic shared memory, recorded by kernel name
  std::vector<std::pair<std::string, int>> max_dynamic_smem;
  size_t stack_bytes = 256 * 1024;  // CUDASIM_STACK_KB
  // file-scope __shared__ variables: fixed offsets in their own region of the arena
  size_t file_static_used = 0;
  const char* file_static_overflow = nullptr;  // the first one past the limit, reported at launch
  bool file_dynamic_declared = false;          // a file-scope `extern __shared__` array exists
  // Thread-block clusters. A cluster's blocks run together, as one set of fibers: block r of the cluster (its rank)
  // has the thread slots [r * cta_stride, r * cta_stride + cta_threads) and the shared memory at arena + r *
  // kCtaStride, so that every shared-memory address (what cvta.to.shared gives) names one byte of one block.
  // Without clusters: cluster_size 1, cta_stride = cta_threads = nthreads.
  unsigned cluster_size = 1;
  dim3 cluster_dim{1, 1, 1};
  int cta_threads = 0, cta_stride = 0;
  uint3 cta_idx[kMaxCluster];                  // each rank's blockIdx
  int cta_at_barrier[kMaxCluster] = {}, cta_done[kMaxCluster] = {};  // threads at __syncthreads, threads ended
  bool cta_release = false;                    // a block's threads have all reached its __syncthreads
  unsigned long long cluster_phase = 0;        // barrier.cluster phases completed in the running cluster
  int cluster_arrivals = 0;                    // arrivals in the current phase
  // The rank of the running cluster that runs ahead of the others (-1: none, its blocks start together and take
  // turns round by round): the other ranks start only once it can go no further alone, and after that their threads
  // run only in the rounds where it cannot move on (`hold` false), so it also exits first when it can. While `hold`,
  // the others' threads taken from the run queue wait in `held` for the next round in which they may run.
  int lead = -1;
  bool hold = false;
  std::vector<int> held;
  bool cta_started[kMaxCluster] = {};          // a thread of the rank has run (a block's memory is its own from then)
  std::vector<std::pair<std::string, dim3>> cluster_dims;  // __cluster_dims__ by kernel name
  std::vector<std::pair<std::string, int>> non_portable;   // cudaFuncAttributeNonPortableClusterSizeAllowed
};

constexpr size_t kGuardBytes = 64 * 1024;  // below each fiber stack: an overflow faults here
constexpr size_t kDynRegion = (kOptinSharedLimit + kCanary + 127) / 128 * 128;
constexpr size_t kFileRegion = kOptinSharedLimit;
// All shared memory lives at one fixed address, so that a file-scope `extern __shared__` array
// or `__shared__` variable can be bound once, when the library loads:
// [dynamic, canary | function-scope static, from static_base | file-scope static]
// A cluster's block of rank r has its own copy of that window at arena + r * kCtaStride (a multiple of
// 2^18, so a wgmma descriptor's 18-bit start address is the offset within the block, as on a GPU).
constexpr size_t kCtaRegion = kDynRegion + kOptinSharedLimit + 128 + kFileRegion;
constexpr size_t kCtaStride = size_t(1) << 20;
static_assert(kCtaRegion <= kCtaStride, "a block's shared-memory window must fit its stride");
alignas(1024) inline unsigned char arena[kCtaStride * kMaxCluster];
constexpr size_t kFileBase = kDynRegion + kOptinSharedLimit + 128;
// Whether p is shared memory: in the arena, any block's window of it.
CUDASIM_INTERNAL inline bool in_arena(const void* p) {
  return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(arena) < sizeof arena;
}
// The same byte of shared memory in the cluster's block of rank `rank`, for a window offset in any block's memory.
CUDASIM_INTERNAL inline uint64_t at_rank(uint64_t off, unsigned rank) { return rank * kCtaStride + off % kCtaStride; }

inline Sim g;

[[noreturn]] CUDASIM_RT void fail(const std::string& what);

// In an instrumented build, the simulator's functions are not instrumented, but the standard
// library's templates they call (std::vector's, std::max, ...) are. A SimScope at the entry of every
// simulator function that the learner's code calls (a barrier, a warp operation, an atomic, ...)
// marks the running thread as being inside the simulator, so that the hooks leave those accesses
// alone. Per thread, because the function may switch to other threads that run the learner's code.
struct SimScope {
#ifdef CUDASIM_INSTRUMENTED
  Thread* t;
  bool was;
  CUDASIM_INTERNAL SimScope() : t(g.cur), was(t && t->in_sim) {
    if (t) t->in_sim = true;
  }
  CUDASIM_INTERNAL void end() {
    if (t) t->in_sim = was;
    t = nullptr;
  }
  CUDASIM_INTERNAL ~SimScope() { end(); }
#else
  void end() {}
#endif
};

CUDASIM_RT std::string base_name(const char* path) {
  if (!path) return "?";
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

CUDASIM_RT std::string where() {
  char buf[256];
  const Thread* t = g.cur;
  const uint3 b = t && g.cluster_size > 1 ? g.cta_idx[t->cta] : g.block_idx;  // in a cluster: the thread's own block
  std::snprintf(buf, sizeof buf, " [kernel %s, block (%u,%u,%u)", g.kernel, b.x, b.y, b.z);
  std::string s = buf;
  if (t) {
    std::snprintf(buf, sizeof buf, ", thread (%u,%u,%u)", t->idx.x, t->idx.y, t->idx.z);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, ", launched at %s:%d]", base_name(g.launch_file).c_str(), g.launch_line);
  return s + buf;
}

[[noreturn]] CUDASIM_RT void fail(const std::string& what) { throw std::runtime_error("cudasim: " + what + where()); }

// The mbarrier trace (cudasim_trace.h; kernels.barrier_trace): off unless Python asks for it. `blocks`: how many
// blocks of each launch to record (0: none); `block`: whether the running block is recorded; `step`: its clock,
// the rounds of its run queue so far (run_block). The scheduler and the mbarrier functions test `block` only.
struct Tracing {
  unsigned blocks = 0;
  bool block = false;
  long long step = 0;
};
inline Tracing tracing;
}  // namespace cudasim
#include "cudasim_trace.h"
namespace cudasim {

// The instrumented build's events (cudasim_instrument.h): what the hooks need to know besides the
// learner's loads and stores. Nothing in a plain build.
#ifdef CUDASIM_INSTRUMENTED
namespace instr {
CUDASIM_RT void access(const void* p, size_t bytes, bool write, const char* file, int line);
CUDASIM_RT void access_for(const void* p, size_t bytes, bool write, const char* file, int line, int thread);
CUDASIM_RT void atomic_access(const void* p, size_t bytes, void* pc);
CUDASIM_RT void atomic_range(const void* p, size_t bytes, const char* file, int line);
CUDASIM_RT void atomic_load_next();  // the next atomic_access is a strong load's (it acquires, releases nothing)
CUDASIM_RT void sync_object_access(const void* p, size_t bytes, void* pc);
CUDASIM_RT void mbar_reset(const void* bar);
CUDASIM_RT void mbar_release(const void* bar, int thread);
CUDASIM_RT void mbar_completed(const void* bar, uint64_t phase);
CUDASIM_RT void mbar_acquire(const void* bar, long long phase);
CUDASIM_RT void group_completed(int first_thread, int threads);
CUDASIM_RT void fence(bool system);
CUDASIM_RT void launch_begin();
CUDASIM_RT void launch_end();
CUDASIM_RT void block_begin();
CUDASIM_RT void block_end();
CUDASIM_RT void barrier_released();
CUDASIM_RT void passed_barrier(int thread);
CUDASIM_RT void warp_synced(int warp);
CUDASIM_RT void shared_declared(size_t offset, size_t bytes, const char* name);
CUDASIM_RT void device_alloc(const void* p, size_t bytes);
CUDASIM_RT void device_free(const void* p);
}  // namespace instr
#define CUDASIM_EVENT(call) ::cudasim::instr::call
#else
#define CUDASIM_EVENT(call) ((void)0)
#endif

// What a simulator function reads or writes on behalf of the running kernel thread (a WMMA load, a
// cp.async copy): reported to the instrumented build's hooks before the access, with the learner's
// line; nothing in a plain build.
CUDASIM_RT void note_read(const void* p, size_t bytes, const char* file, int line) {
  CUDASIM_EVENT(access(p, bytes, false, file, line));
  (void)p, (void)bytes, (void)file, (void)line;
}
CUDASIM_RT void note_write(void* p, size_t bytes, const char* file, int line) {
  CUDASIM_EVENT(access(p, bytes, true, file, line));
  (void)p, (void)bytes, (void)file, (void)line;
}
// Atomics the simulator makes on the running thread's behalf over a range (a bulk reduction's elements): checked
// as atomic writes, which conflict with plain accesses of other threads and not with other atomics.
CUDASIM_RT void note_atomic(void* p, size_t bytes, const char* file, int line) {
  CUDASIM_EVENT(atomic_range(p, bytes, file, line));
  (void)p, (void)bytes, (void)file, (void)line;
}
// A write that lands now for another thread of the block (an asynchronous copy completing on an mbarrier, for the
// thread that issued it): checked as that thread's.
CUDASIM_RT void note_write_for(void* p, size_t bytes, const char* file, int line, int thread) {
  CUDASIM_EVENT(access_for(p, bytes, true, file, line, thread));
  (void)p, (void)bytes, (void)file, (void)line, (void)thread;
}

// In a cluster, a block's __syncthreads is released as soon as its last thread arrives (its threads at the barrier
// and those that ended make up the block), since the cluster's other blocks may still be running.
// Whether thread slot `id` is a thread of the launch (in a cluster, not the padding between two blocks' slots).
CUDASIM_INTERNAL inline bool slot_exists(int id) { return id < g.nthreads && id % g.cta_stride < g.cta_threads; }

CUDASIM_INTERNAL inline void cta_check(int cta) {
  if (g.cta_at_barrier[cta] && g.cta_at_barrier[cta] + g.cta_done[cta] == g.cta_threads) g.cta_release = true;
}
// A cluster's block whose threads have all ended takes its shared memory with it: the simulator poisons it, so
// another block that reads it later through a plain pointer (map_shared_rank) reads NaN (PTX accesses and
// copies to it are errors: cudasim_ptx/core.h).
CUDASIM_INTERNAL inline void thread_ended(const Thread& t) {
  if (g.cluster_size == 1) return;
  g.cta_done[t.cta] += 1;
  cta_check(t.cta);
  if (g.cta_done[t.cta] == g.cta_threads) {
    unsigned char* base = arena + t.cta * kCtaStride;
    std::memset(base, kPoison, g.dyn_bytes);
    std::memset(base + g.static_base, kPoison, g.static_used);
  }
}

// Switch from the running fiber back to the scheduler.
CUDASIM_RT void to_scheduler() {
  Thread* t = g.cur;
#ifdef CUDASIM_UCONTEXT
  swapcontext(&t->uc, &g.sched_uc);
#else
  switch_stack(&t->sp, g.sched_sp);
#endif
}

// A finding of the instrumented build's hooks in the running thread (a race, an access out of
// bounds): the thread stops where it is, before the access, without unwinding (the hooks cannot
// throw through the learner's code), and the scheduler raises the finding as an error.
[[noreturn]] CUDASIM_RT void stop_thread(std::string what) {
  Thread* t = g.cur;
  g.finding = std::move(what);
  g.finding_thread = t->linear;
  t->state = State::Done;
  g.warp_done[t->linear / 32] |= 1u << (t->linear & 31);
  thread_ended(*t);
  to_scheduler();
  __builtin_trap();  // a stopped fiber is never resumed
}

[[noreturn]] CUDASIM_RT void fiber_main() {
  Thread* t = g.cur;
  try {
    g.body(g.body_ctx);
  } catch (...) {
    if (!g.error) g.error = std::current_exception();
  }
  t->state = State::Done;
  g.warp_done[t->linear / 32] |= 1u << (t->linear & 31);
  thread_ended(*t);
  g.idle_yields = 0;
  g.progress += 1;
  if (tracing.block) trace::thread_done();
  to_scheduler();
  __builtin_trap();  // a finished fiber is never resumed
}

#ifdef CUDASIM_UCONTEXT
CUDASIM_RT void fiber_entry_uc() { fiber_main(); }
#endif

// A fiber's mapping: kGuardBytes of PROT_NONE guard, then g.stack_bytes of stack (it grows down
// towards the guard). `stack` points at the guard; `stack_size` is what it was mapped with.
CUDASIM_RT void start_fiber(Thread& t) {
  if (t.stack && t.stack_size != g.stack_bytes) {  // CUDASIM_STACK_KB changed since
    munmap(t.stack, kGuardBytes + t.stack_size);
    t.stack = nullptr;
  }
  if (!t.stack) {
    void* p = mmap(nullptr, kGuardBytes + g.stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cudasim: cannot allocate a fiber stack");
    mprotect(p, kGuardBytes, PROT_NONE);  // an overflow faults here instead of corrupting memory
    t.stack = static_cast<char*>(p);
    t.stack_size = g.stack_bytes;
  }
  t.exit_file = nullptr;
  t.exit_line = 0;
  t.in_sim = false;
  t.spin_addr = nullptr;
  t.spin_count = 0;
  t.spin_since = 0;
#ifdef CUDASIM_UCONTEXT
  getcontext(&t.uc);
  t.uc.uc_stack.ss_sp = t.stack + kGuardBytes;
  t.uc.uc_stack.ss_size = g.stack_bytes;
  t.uc.uc_link = nullptr;
  makecontext(&t.uc, fiber_entry_uc, 0);
#else
  t.sp = platform::first_frame(t.stack + kGuardBytes + g.stack_bytes, fiber_main);  // starts in fiber_main
#endif
}

CUDASIM_RT void resume(Thread& t) {
  g.resumes.fetch_add(1, std::memory_order_relaxed);
  g.cur = &t;
  g.thread_idx = t.idx;
  if (g.cluster_size > 1) {
    g.block_idx = g.cta_idx[t.cta];
    g.smem = arena + t.cta * kCtaStride;
  }
#ifdef CUDASIM_UCONTEXT
  swapcontext(&g.sched_uc, &t.uc);
#else
  switch_stack(&g.sched_sp, t.sp);
#endif
  g.cur = nullptr;
}

CUDASIM_RT void make_ready(int id) {
  g.threads[id].state = State::Ready;
  g.runq.push_back(id);
}

// Queue a group of threads in the configured order.
CUDASIM_RT void queue_in_order(int* ids, size_t n) {
  if (g.order == 1) std::reverse(ids, ids + n);
  if (g.order == 2) std::shuffle(ids, ids + n, g.rng);
  for (size_t i = 0; i < n; ++i) make_ready(ids[i]);
}
CUDASIM_RT void queue_in_order(std::vector<int>& ids) { queue_in_order(ids.data(), ids.size()); }

// ---------------------------------------------------------------------------------------------
// __syncthreads and its counting variants.
CUDASIM_RT int barrier(BarKind kind, int pred, const char* file, int line, int site) {
  SimScope scope;
  Thread* t = g.cur;
  if (!t) fail("__syncthreads() called outside a kernel");
  t->state = State::Barrier;
  t->bar_kind = kind;
  t->bar_pred = pred;
  t->bar_file = file;
  t->bar_line = line;
  t->bar_site = site;
  if (g.cluster_size > 1) {
    g.cta_at_barrier[t->cta] += 1;
    cta_check(t->cta);
  }
  to_scheduler();
  CUDASIM_EVENT(passed_barrier(t->linear));  // the access profiler's mark
  return t->bar_result;
}

CUDASIM_RT void release_barrier(std::vector<int>& at_barrier);

// In a cluster: the blocks whose threads have all reached __syncthreads (or ended) go on.
CUDASIM_RT void release_ready_ctas() {
  g.cta_release = false;
  for (unsigned r = 0; r < g.cluster_size; ++r) {
    if (!g.cta_at_barrier[r] || g.cta_at_barrier[r] + g.cta_done[r] != g.cta_threads) continue;
    std::vector<int> ids;
    for (int i = 0; i < g.cta_threads; ++i)
      if (g.threads[r * g.cta_stride + i].state == State::Barrier) ids.push_back(static_cast<int>(r) * g.cta_stride + i);
    g.cta_at_barrier[r] = 0;
    release_barrier(ids);
  }
}

// Called by the scheduler when no thread can run: release a barrier, or explain the deadlock.
CUDASIM_RT void resolve_block() {
  std::vector<int> at_barrier;
  int warp_waiting = -1;
  for (auto& t : g.threads) {
    if (t.state == State::Barrier) {
      at_barrier.push_back(t.linear);
    } else if (t.state == State::Warp && warp_waiting < 0) {
      warp_waiting = t.linear;
    }
  }
  if (warp_waiting >= 0) {
    Thread& w = g.threads[warp_waiting];
    g.cur = &w;
    char buf[512];
    int warp = w.linear / 32;
    std::string missing;
    for (int lane = 0; lane < 32; ++lane) {
      int id = warp * 32 + lane;
      if (!(w.wmask >> lane & 1u) || id >= g.nthreads) continue;
      const Thread& o = g.threads[id];
      if (o.state == State::Warp && o.wmask == w.wmask) continue;
      char b[96];
      std::snprintf(b, sizeof b, "%slane %d (%s)", missing.empty() ? "" : ", ", lane,
                    o.state == State::Barrier ? "waiting at __syncthreads" : o.state == State::Warp ?
                    "in a warp operation with another mask" : "exited");
      missing += b;
    }
    if (w.wop == WarpOp::Collective)
      std::snprintf(buf, sizeof buf,
                    "deadlock: %s at %s:%d waits for %s; it is a warp-wide call, so all 32 lanes of the warp "
                    "must make it together (no lane may skip it in a branch)",
                    w.wname, base_name(w.wfile).c_str(), w.wline, missing.c_str());
    else
      std::snprintf(buf, sizeof buf,
                    "deadlock: a warp operation at %s:%d with mask 0x%08x waits for %s; every lane named "
                    "in the mask must reach a warp operation with the same mask",
                    base_name(w.wfile).c_str(), w.wline, w.wmask, missing.c_str());
    fail(buf);
  }
  if (g.cluster_size > 1) {  // a block whose threads all wait at its barrier (else it waits for its others)
    release_ready_ctas();
    return;
  }
  release_barrier(at_barrier);
}

// Release the threads of one block waiting at its __syncthreads (all of them are there, or ended).
CUDASIM_RT void release_barrier(std::vector<int>& at_barrier) {
  if (at_barrier.empty()) return;
  const Thread* first = &g.threads[at_barrier[0]];
  for (int id : at_barrier) {
    const Thread& t = g.threads[id];
    if (t.bar_site != first->bar_site || t.bar_kind != first->bar_kind) {
      g.cur = &g.threads[id];
      char buf[400];
      std::snprintf(buf, sizeof buf,
                    "divergent __syncthreads: thread (%u,%u,%u) waits at %s:%d while thread (%u,%u,%u) "
                    "waits at %s:%d; every thread of a block must reach the same barrier",
                    first->idx.x, first->idx.y, first->idx.z, base_name(first->bar_file).c_str(),
                    first->bar_line, t.idx.x, t.idx.y, t.idx.z, base_name(t.bar_file).c_str(), t.bar_line);
      fail(buf);
    }
  }
  int count = 0;
  for (int id : at_barrier) count += g.threads[id].bar_pred != 0;
  int n = static_cast<int>(at_barrier.size());
  int result = first->bar_kind == BarKind::Count ? count
             : first->bar_kind == BarKind::And   ? (count == n)
             : first->bar_kind == BarKind::Or    ? (count > 0) : 0;
  for (int id : at_barrier) g.threads[id].bar_result = result;
  g.idle_yields = 0;
  g.progress += 1;
  CUDASIM_EVENT(barrier_released());  // every access before it is ordered before every access after it
  queue_in_order(at_barrier);
}

// ---------------------------------------------------------------------------------------------
// Warp operations: the lanes named in the mask meet; the last to arrive computes every lane's
// result. Lanes that have exited or do not exist (a partial last warp) are not waited for: votes,
// __reduce_*_sync and __syncwarp count only the lanes that take part, as PTX defines them. A
// shuffle in which a lane reads a lane that has exited, does not exist or is outside the mask is an
// error: what it reads from there is undefined on a GPU.
CUDASIM_INTERNAL inline int lane_id() { return g.cur->linear & 31; }

// The translator puts this in front of every `return;` in a kernel's body, so that an error
// about an exited lane can say where it left.
CUDASIM_RT void exiting(const char* file, int line) {
  if (g.cur) {
    g.cur->exit_file = file;
    g.cur->exit_line = line;
  }
}

CUDASIM_RT const char* shuffle_name(WarpOp op) {
  switch (op) {
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    default: return "__shfl_xor_sync";
  }
}

// Where a lane that has exited left the kernel, for messages.
CUDASIM_RT std::string exit_place(const Thread& o) {
  if (!o.exit_file) return "reached the end of the kernel";
  return "returned at " + base_name(o.exit_file) + ":" + std::to_string(o.exit_line);
}

// The lane a shuffle's lane reads: the same lane when the source falls outside its segment of
// `width` lanes (the value is then the lane's own, as on a GPU).
CUDASIM_INTERNAL inline int shuffle_source(WarpOp op, int lane, int arg, int width) {
  const int base = lane & ~(width - 1);
  switch (op) {
    case WarpOp::ShflIdx: return base + (arg & (width - 1));
    case WarpOp::ShflUp: return lane - arg >= base ? lane - arg : lane;
    case WarpOp::ShflDown: return lane + arg < base + width ? lane + arg : lane;
    default: return (lane ^ arg) < base + width ? (lane ^ arg) : lane;
  }
}

// What a shuffle reads must be defined: a lane that exists, is still running and is in the mask. A
// mask may name lanes that have exited or do not exist (a partial last warp) as long as no lane reads
// them: they are not waited for, as PTX defines it.
CUDASIM_RT void check_shuffle_lanes(int warp, unsigned present) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!(present >> lane & 1u)) continue;
    const Thread& t = g.threads[warp * 32 + lane];
    const int src = shuffle_source(t.wop, lane, t.warg, t.wwidth);
    if (src == lane) continue;
    const int id = warp * 32 + src;
    char buf[700];
    if (!slot_exists(id)) {
      const int w = warp * 32 % g.cta_stride / 32;  // the warp in its block
      std::snprintf(buf, sizeof buf,
                    "%s at %s:%d: lane %d reads lane %d of warp %d, which does not exist: the block has %d threads, "
                    "so its last warp has %d lanes. What a shuffle reads from a lane that does not exist is "
                    "undefined on a GPU; keep the source inside the warp's lanes (check the offset against the "
                    "number of lanes) or give the block a multiple of 32 threads",
                    shuffle_name(t.wop), base_name(t.wfile).c_str(), t.wline, lane, src, w, g.cta_threads,
                    g.cta_threads - w * 32);
      g.cur = &g.threads[warp * 32 + lane];
      fail(buf);
    }
    const Thread& o = g.threads[id];
    if (o.state == State::Done) {
      std::string exit_at = exit_place(o);
      std::snprintf(buf, sizeof buf,
                    "%s at %s:%d with mask 0x%08x: lane %d reads lane %d (thread (%u,%u,%u)), which has exited (%s). "
                    "What a shuffle reads from an exited lane is undefined on a GPU; leave exited lanes out of the "
                    "mask (take it with __ballot_sync before the return) or keep every lane until the shuffle",
                    shuffle_name(t.wop), base_name(t.wfile).c_str(), t.wline, t.wmask, lane, src, o.idx.x, o.idx.y,
                    o.idx.z, exit_at.c_str());
      g.cur = &g.threads[warp * 32 + lane];
      fail(buf);
    }
    if (!(t.wmask >> src & 1u)) {
      std::snprintf(buf, sizeof buf,
                    "%s at %s:%d with mask 0x%08x: lane %d reads lane %d (thread (%u,%u,%u)), which is not in the "
                    "mask. What a shuffle reads from a lane outside its mask is undefined on a GPU (that lane need "
                    "not take part), even when the value goes unused; put every lane that is read in the mask, or "
                    "shuffle only from lanes in it",
                    shuffle_name(t.wop), base_name(t.wfile).c_str(), t.wline, t.wmask, lane, src, o.idx.x, o.idx.y,
                    o.idx.z);
      g.cur = &g.threads[warp * 32 + lane];
      fail(buf);
    }
  }
}

// A warp-wide call (the WMMA API): every lane of the warp passes a WarpJob; when the last one
// arrives, `run` is called once with all 32 in lane order, before any lane goes on. That is when
// the whole warp's load, store or multiply happens, as one step, like the hardware's instruction.
struct WarpJob {
  void (*run)(WarpJob* const* lanes);
  const char* name;  // the CUDA function, for messages
  Thread* self = nullptr;
};

// All 32 lanes must exist, be running and make the same call (same line, same instantiation).
CUDASIM_RT void check_collective(int warp, const Thread& t, WarpJob* const* jobs) {
  char buf[600];
  for (int lane = 0; lane < 32; ++lane) {
    int id = warp * 32 + lane;
    if (!slot_exists(id)) {
      const int w = warp * 32 % g.cta_stride / 32;  // the warp in its block
      std::snprintf(buf, sizeof buf,
                    "%s at %s:%d is a warp-wide call, but warp %d has only %d lanes: the block has %d threads. "
                    "All 32 lanes of a warp must make it; give the block a multiple of 32 threads",
                    t.wname, base_name(t.wfile).c_str(), t.wline, w, g.cta_threads - w * 32, g.cta_threads);
      fail(buf);
    }
    const Thread& o = g.threads[id];
    if (o.state == State::Done) {
      std::snprintf(buf, sizeof buf,
                    "%s at %s:%d is a warp-wide call, but lane %d (thread (%u,%u,%u)) has exited (%s). All 32 "
                    "lanes of the warp must make it together: keep every lane until the call and guard only "
                    "what the lane does with its own data",
                    t.wname, base_name(t.wfile).c_str(), t.wline, lane, o.idx.x, o.idx.y, o.idx.z,
                    exit_place(o).c_str());
      fail(buf);
    }
    if (o.wfile != t.wfile || o.wline != t.wline || o.wname != t.wname || jobs[lane]->run != jobs[0]->run) {
      g.cur = &g.threads[id];
      std::snprintf(buf, sizeof buf,
                    "lanes of one warp reached different warp-wide calls: lane 0 at %s (%s:%d), lane %d at %s "
                    "(%s:%d); all 32 lanes must make the same call together",
                    jobs[0]->name, base_name(t.wfile).c_str(), t.wline, lane, o.wname, base_name(o.wfile).c_str(),
                    o.wline);
      fail(buf);
    }
  }
}

CUDASIM_RT void complete_warp(int warp, unsigned mask) {
  int ids[32];
  unsigned present = 0;
  for (int lane = 0; lane < 32; ++lane) {
    int id = warp * 32 + lane;
    ids[lane] = id;
    if ((mask >> lane & 1u) && id < g.nthreads && g.threads[id].state == State::Warp &&
        g.threads[id].wmask == mask)
      present |= 1u << lane;
  }
  const Thread& any = g.threads[ids[__builtin_ctz(present)]];
  WarpOp op = any.wop;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(present >> lane & 1u)) continue;
    const Thread& t = g.threads[ids[lane]];
    if (t.wop != op) {
      g.cur = &g.threads[ids[lane]];
      fail("lanes of one warp met in different warp operations (for example __shfl_sync and __ballot_sync) "
           "with the same mask");
    }
  }
  if (is_shuffle(op)) check_shuffle_lanes(warp, present);
  if (op == WarpOp::Collective) {
    WarpJob* jobs[32];
    for (int lane = 0; lane < 32; ++lane) {
      jobs[lane] = nullptr;
      if (present >> lane & 1u) std::memcpy(&jobs[lane], g.threads[ids[lane]].wval, sizeof(WarpJob*));
    }
    check_collective(warp, any, jobs);  // all 32 lanes are present after this
    Thread* saved = g.cur;
    CUDASIM_EVENT(warp_synced(warp));  // the lanes' accesses before the call come before the job's
    jobs[0]->run(jobs);
    g.cur = saved;
  }
  CUDASIM_EVENT(warp_synced(warp));  // and the job's (or the operation's) before the lanes' after it
  unsigned long long ballot = 0;
  int pcount = 0;
  long long radd = 0, rmin = LLONG_MAX, rmax = LLONG_MIN;
  unsigned rand_ = ~0u, ror = 0, rxor = 0, rumin = ~0u, rumax = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if (!(present >> lane & 1u)) continue;
    const Thread& t = g.threads[ids[lane]];
    int v = t.warg;
    if (v) ballot |= 1ull << lane;
    pcount += 1;
    radd += static_cast<unsigned>(v);
    rmin = std::min<long long>(rmin, v);
    rmax = std::max<long long>(rmax, v);
    rand_ &= static_cast<unsigned>(v);
    ror |= static_cast<unsigned>(v);
    rxor ^= static_cast<unsigned>(v);
    rumin = std::min(rumin, static_cast<unsigned>(v));
    rumax = std::max(rumax, static_cast<unsigned>(v));
  }
  for (int lane = 0; lane < 32; ++lane) {
    if (!(present >> lane & 1u)) continue;
    Thread& t = g.threads[ids[lane]];
    switch (op) {
      case WarpOp::Sync: break;
      case WarpOp::Ballot: t.wres = ballot; break;
      case WarpOp::Any: t.wres = ballot != 0; break;
      case WarpOp::All: t.wres = static_cast<int>(__builtin_popcountll(ballot)) == pcount; break;
      case WarpOp::ReduceAdd: t.wres = static_cast<unsigned>(radd); break;
      case WarpOp::ReduceMin: t.wres = static_cast<unsigned long long>(rmin); break;
      case WarpOp::ReduceMax: t.wres = static_cast<unsigned long long>(rmax); break;
      case WarpOp::ReduceAnd: t.wres = rand_; break;
      case WarpOp::ReduceOr: t.wres = ror; break;
      case WarpOp::ReduceXor: t.wres = rxor; break;
      case WarpOp::ReduceUMin: t.wres = rumin; break;
      case WarpOp::ReduceUMax: t.wres = rumax; break;
      default: {
        int src = shuffle_source(op, lane, t.warg, t.wwidth);
        if (src >= 0 && src < 32 && (present >> src & 1u))
          std::memcpy(t.wout, g.threads[ids[src]].wval, sizeof t.wout);
        else
          std::memset(t.wout, kPoison, sizeof t.wout);
      }
    }
  }
  g.warp_waiting[warp] &= ~present;
  int wake[32];
  size_t n = 0;
  for (int lane = 0; lane < 32; ++lane)
    if ((present >> lane & 1u) && &g.threads[ids[lane]] != g.cur) wake[n++] = ids[lane];
  queue_in_order(wake, n);
  g.progress += 1;
}

CUDASIM_RT void warp_op(WarpOp op, unsigned mask, const void* val, size_t size, int arg, int width,
                    const char* file, int line) {
  SimScope scope;
  Thread* t = g.cur;
  if (!t) fail("warp operation called outside a kernel");
  int lane = t->linear & 31;
  if (!(mask >> lane & 1u)) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "warp operation at %s:%d: the calling lane %d is not in its mask 0x%08x",
                  base_name(file).c_str(), line, lane, mask);
    fail(buf);
  }
  if (width <= 0 || width > 32 || (width & (width - 1))) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "shuffle at %s:%d: width %d must be a power of two from 1 to 32",
                  base_name(file).c_str(), line, width);
    fail(buf);
  }
  t->wop = op;
  t->wmask = mask;
  t->warg = arg;
  t->wwidth = width;
  t->wfile = file;
  t->wline = line;
  std::memset(t->wval, 0, sizeof t->wval);
  if (val) std::memcpy(t->wval, val, size);
  t->state = State::Warp;
  if (op == WarpOp::Active) {  // resolved by complete_pending_warps once nothing else can run
    t->wmask = 0;              // a mask no real warp operation has, so none waits on this lane
    to_scheduler();
    return;
  }
  // Have all lanes of the mask that are still alive arrived (with this mask)?
  int warp = t->linear / 32;
  g.warp_waiting[warp] |= 1u << lane;
  const int in_warp = std::min(32, g.nthreads - warp * 32);
  const unsigned exist = in_warp == 32 ? ~0u : (1u << in_warp) - 1u;
  const unsigned need = mask & exist & ~g.warp_done[warp];
  bool all = (need & ~g.warp_waiting[warp]) == 0;
  for (unsigned rest = need; all && rest; rest &= rest - 1)
    all = g.threads[warp * 32 + __builtin_ctz(rest)].wmask == mask;
  if (all) {
    complete_warp(warp, mask);
    t->state = State::Ready;
    g.idle_yields = 0;
    return;
  }
  to_scheduler();
}

// Make a warp-wide call: wait for the other 31 lanes, then the last to arrive runs the job for all.
CUDASIM_RT void warp_collective(WarpJob& job, const char* file, int line) {
  Thread* t = g.cur;
  if (!t) fail(std::string(job.name) + " called outside a kernel");
  job.self = t;
  t->wname = job.name;
  WarpJob* p = &job;
  warp_op(WarpOp::Collective, 0xffffffffu, &p, sizeof p, 0, 32, file, line);
}

// Called by the scheduler before it gives up: lanes that exited may have been the last ones
// a warp operation was waiting for.
CUDASIM_RT bool complete_pending_warps() {
  bool progress = false;
  // __activemask: when nothing else can run, the lanes of a warp that wait at the same
  // __activemask call are the active ones; the others took another branch or exited.
  for (auto& t : g.threads) {
    if (t.state != State::Warp || t.wop != WarpOp::Active) continue;
    int warp = t.linear / 32;
    unsigned m = 0;
    std::vector<int> lanes;
    for (int l = 0; l < 32 && warp * 32 + l < g.nthreads; ++l) {
      const Thread& o = g.threads[warp * 32 + l];
      if (o.state == State::Warp && o.wop == WarpOp::Active && o.wline == t.wline && o.wfile == t.wfile) {
        m |= 1u << l;
        lanes.push_back(warp * 32 + l);
      }
    }
    for (int id : lanes) g.threads[id].wres = m;
    queue_in_order(lanes);
    progress = true;
  }
  if (progress) return true;
  for (auto& t : g.threads) {
    if (t.state != State::Warp) continue;
    int warp = t.linear / 32;
    bool all = true;
    for (int l = 0; l < 32 && all; ++l) {
      int id = warp * 32 + l;
      if (!(t.wmask >> l & 1u) || id >= g.nthreads) continue;
      const Thread& o = g.threads[id];
      if (o.state == State::Done) continue;
      if (!(o.state == State::Warp && o.wmask == t.wmask)) all = false;
    }
    if (all) {
      Thread* saved = g.cur;
      g.cur = &t;
      complete_warp(warp, t.wmask);
      g.cur = saved;
      make_ready(t.linear);
      progress = true;
    }
  }
  return progress;
}

// A thread that spins (a failed atomicCAS, __nanosleep) lets the others run.
CUDASIM_RT void yield_thread() {
  SimScope scope;
  Thread* t = g.cur;
  if (!t) return;
  if (++g.idle_yields > 20'000'000ull)
    fail("the kernel seems to spin forever: no thread has finished or passed a barrier in 20 million "
         "yields (is it waiting for another block? blocks run one at a time here)");
  t->state = State::Yield;
  to_scheduler();
}

// barrier.cluster.arrive and .wait (cooperative_groups' cluster.sync() is both): a phase completes when every
// thread of the cluster has arrived for it or ended. Without a cluster the block is a cluster of one, and a completed
// phase is then a barrier of the block for the race check, as __syncthreads is.
CUDASIM_RT bool cluster_phase_done() {
  int ended = 0;
  for (unsigned r = 0; r < g.cluster_size; ++r) ended += g.cta_done[r];
  if (g.cluster_size == 1)
    for (int i = 0; i < g.nthreads; ++i) ended += g.threads[i].state == State::Done;
  if (g.cluster_arrivals + ended < g.cta_threads * static_cast<int>(g.cluster_size)) return false;  // a quick no
  for (int i = 0; i < g.nthreads; ++i) {
    const Thread& t = g.threads[i];
    if (t.local < g.cta_threads && t.state != State::Done && !(t.cluster_pending && t.cluster_arrived > g.cluster_phase))
      return false;
  }
  g.cluster_phase += 1;
  g.cluster_arrivals = 0;
  g.progress += 1;
  if (g.cluster_size == 1) CUDASIM_EVENT(barrier_released());  // every access before it comes before every one after
  return true;
}

CUDASIM_RT std::string cluster_where(const char* file, int line) {
  return "barrier.cluster at " + base_name(file) + ":" + std::to_string(line);
}

CUDASIM_RT void cluster_arrive(const char* file, int line) {
  SimScope scope;
  Thread* t = g.cur;
  if (!t) fail("barrier.cluster (cluster.sync()) called outside a kernel");
  if (t->cluster_pending)
    fail(cluster_where(file, line) + ": this thread arrives a second time without a barrier.cluster.wait after its "
         "first arrival, which PTX leaves undefined: each arrive needs its wait before the next arrive");
  t->cluster_pending = true;
  t->cluster_arrived = g.cluster_phase + 1;
  g.cluster_arrivals += 1;
  g.progress += 1;
  g.idle_yields = 0;
  cluster_phase_done();
}

CUDASIM_RT void cluster_wait(const char* file, int line) {
  SimScope scope;
  Thread* t = g.cur;
  if (!t) fail("barrier.cluster (cluster.sync()) called outside a kernel");
  if (!t->cluster_pending)
    fail(cluster_where(file, line) + ": barrier.cluster.wait without a barrier.cluster.arrive before it in this "
         "thread, which PTX leaves undefined");
  unsigned long long seen = g.progress;
  int idle = 0;
  while (g.cluster_phase < t->cluster_arrived && !cluster_phase_done()) {
    yield_thread();
    if (g.progress != seen) {
      seen = g.progress;
      idle = 0;
    } else if (++idle > kIdleRounds) {
      std::string missing;
      for (unsigned r = 0; r < g.cluster_size; ++r) {
        int n = 0;
        for (int i = 0; i < g.cta_threads; ++i) {
          const Thread& o = g.threads[r * g.cta_stride + i];
          n += o.state != State::Done && !(o.cluster_pending && o.cluster_arrived > g.cluster_phase);
        }
        if (n) missing += (missing.empty() ? "" : ", ") + std::to_string(n) + " of block rank " + std::to_string(r);
      }
      fail("deadlock: " + cluster_where(file, line) + " waits for every thread of the cluster to arrive, and " +
           missing + " never will (a thread that skips cluster.sync() in a branch, or waits for something that "
           "comes after it, looks like this)");
    }
  }
  t->cluster_pending = false;
}

// An atomic that left memory unchanged may be a poll (a failed atomicCAS on a taken lock,
// atomicAdd(p, 0) on a flag) or ordinary work (adding 0.0f). The thread keeps running through
// the first few repeats; from the fourth repeat at the same address, seeing the same value with
// nothing else in the block moving on, it lets the others run (at first every time, after 64
// repeats every 64th time). A million such repeats is a spin that can never end here.
constexpr unsigned long long kPollYieldFrom = 4;
constexpr unsigned long long kSpinLimit = 1000000;

// The segment of peer memory that holds [p, p + 1), or nullptr (memory of this process alone).
CUDASIM_INTERNAL inline const PeerSegment* peer_segment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (size_t i = 0; i < g.peer_count; ++i) {
    const PeerSegment& s = g.peer_at[i];
    if (a - s.buf < s.buf_bytes || a - s.pad < s.pad_bytes) return &s;
  }
  return nullptr;
}

CUDASIM_INTERNAL inline double wall_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A poll of peer memory: the value it waits for comes from another process (a rank that may still be compiling, or
// running blocks before this one), so the thread waits by the clock, not by counting. It lets the others of its block
// run, and sleeps a little when nothing in its block has moved on since its last poll (the other ranks need the
// cores); after CUDASIM_PEER_TIMEOUT seconds of the same value it stops with a message that says what it polls.
CUDASIM_RT void peer_poll(const PeerSegment& s, const void* p, unsigned long long seen, const char* op,
                          bool has_expected, unsigned long long expected, const char* file, int line) {
  Thread* t = g.cur;
  const double now = wall_seconds();
  if (t->spin_addr != p || t->spin_value != seen || t->spin_since == 0) {
    t->spin_addr = p;
    t->spin_value = seen;
    t->spin_progress = g.progress;
    t->spin_count = 0;
    t->spin_since = now;
  }
  if (++t->spin_count < kPollYieldFrom) return;
  if (now - t->spin_since > g.peer_timeout) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const bool pad = a - s.pad < s.pad_bytes;
    char what[200], wants[160];
    std::snprintf(what, sizeof what, "%s %zu of rank %d's %s", pad ? "slot" : "byte",
                  static_cast<size_t>(pad ? (a - s.pad) / 4 : a - s.buf), s.owner, pad ? "signal pad (uint32 slots)"
                                                                                       : "buffer");
    if (has_expected)
      std::snprintf(wants, sizeof wants, "waits for the value %llu and has read %llu", expected, seen);
    else
      std::snprintf(wants, sizeof wants, "has read %llu every time (it waits for a change)", seen);
    char buf[900];
    std::snprintf(buf, sizeof buf,
                  "rank %d waited %.0f s (CUDASIM_PEER_TIMEOUT) in %s at %s:%d, which polls %s: it %s, and no rank "
                  "wrote that value. Expected another rank to write it: check the slot index (which block and which "
                  "rank signals it), that the rank that signals runs the same kernel with the same grid, and that it "
                  "signals before it waits",
                  s.me, g.peer_timeout, op, base_name(file).c_str(), line, what, wants);
    stop_thread(buf);
  }
  if (g.progress == t->spin_progress) {  // nothing else in the block moved on: the value comes from another rank
    timespec nap{0, 200 * 1000};
    nanosleep(&nap, nullptr);
  }
  t->spin_progress = g.progress;
  t->state = State::Yield;
  to_scheduler();
}

CUDASIM_RT void unchanged_atomic(const void* p, unsigned long long seen) {
  Thread* t = g.cur;
  if (!t) return;
  if (t->spin_addr != p || t->spin_value != seen || t->spin_progress != g.progress) {
    t->spin_addr = p;
    t->spin_value = seen;
    t->spin_progress = g.progress;
    t->spin_count = 0;
  }
  unsigned long long n = ++t->spin_count;
  if (n > kSpinLimit)
    fail("the kernel seems to spin forever: this thread repeated an atomic on the same address a million times "
         "without changing it while nothing else in the block moved on (is it waiting for another block? "
         "blocks run one at a time here)");
  if (n >= kPollYieldFrom && (n < 64 || n % 64 == 0)) {
    t->state = State::Yield;
    to_scheduler();
  }
}

// After an atomic at `file:line` (`op`): one that changed memory is progress; one that did not may be a poll. An
// atomicCAS passes the value it compares with (`expected`), which a poll waits for.
template <class T>
CUDASIM_INTERNAL inline void atomic_done(const T* p, const T& before, const T& after, const char* op = "an atomic",
                                         const char* file = nullptr, int line = 0, const T* expected = nullptr) {
  if (std::memcmp(&before, &after, sizeof(T)) != 0) {
    g.progress += 1;
    return;
  }
  unsigned long long seen = 0, want = 0;
  std::memcpy(&seen, &before, sizeof(T) < 8 ? sizeof(T) : 8);
  if (g.cur && g.peer_count) {
    if (const PeerSegment* s = peer_segment(p)) {
      if (expected) std::memcpy(&want, expected, sizeof(T) < 8 ? sizeof(T) : 8);
      peer_poll(*s, p, seen, op, expected != nullptr, want, file, line);
      return;
    }
  }
  unchanged_atomic(p, seen);
}

// ---------------------------------------------------------------------------------------------
// Shared memory.
template <class T, size_t Align>
CUDASIM_INTERNAL inline T& shared_var(SharedSlot& slot, const char* name) {
  SimScope scope;
  if (!g.running) fail(std::string("__shared__ variable '") + name + "' used outside a kernel");
  if (slot.gen != g.block_gen) {
    size_t align = std::max<size_t>(Align, std::max<size_t>(alignof(T), 16));
    // aligned in the shared window (static_base is only 128-aligned): a 1024-aligned tile for a swizzle
    size_t off = (g.static_base + g.static_used + align - 1) / align * align - g.static_base;
    if (g.file_static_used + off + sizeof(T) > g.static_limit) {
      char buf[400];
      std::snprintf(buf, sizeof buf,
                    "static __shared__ memory exceeds the limit: '%s' needs %zu bytes at offset %zu, the "
                    "limit is %zu bytes (48 KB; larger tiles need dynamic shared memory and "
                    "cudaFuncSetAttribute)%s", name, sizeof(T), g.file_static_used + off, g.static_limit,
                    g.file_static_used ? "; the file-scope __shared__ variables take the first bytes" : "");
      fail(buf);
    }
    g.static_used = off + sizeof(T);
    slot.offset = g.static_base + off;
    slot.gen = g.block_gen;
    std::memset(g.smem + slot.offset, kPoison, sizeof(T));
    CUDASIM_EVENT(shared_declared(slot.offset, sizeof(T), name));
  }
  return *reinterpret_cast<T*>(g.smem + slot.offset);
}

template <class T>
CUDASIM_INTERNAL inline T* dynamic_shared() {
  if (!g.running) fail("extern __shared__ memory used outside a kernel");
  return reinterpret_cast<T*>(g.smem);
}

// File scope: `extern __shared__ T buf[];` is the start of the arena, whichever kernel runs.
template <class T>
CUDASIM_INTERNAL inline T* file_dynamic_shared() {
  g.file_dynamic_declared = true;  // bound to the first block's memory: cluster launches refuse it
  return reinterpret_cast<T*>(arena);
}

// File scope: `__shared__ T v;` gets a fixed place in the arena's file-scope region when the
// library loads (every kernel of the file counts it against its static limit, where a GPU counts
// it only for the kernels that use it). It is poisoned at every block start like the rest. This
// runs before any launch, so it must not throw: an overflow is reported at the next launch.
template <class T, size_t Align>
CUDASIM_INTERNAL inline T& file_shared(const char* name) {
  size_t align = std::max<size_t>(Align, std::max<size_t>(alignof(T), 16));
  size_t off = (g.file_static_used + align - 1) / align * align;
  if (off + sizeof(T) > kFileRegion) {
    if (!g.file_static_overflow) g.file_static_overflow = name;
    off = 0;  // never used: the first launch fails
  } else {
    g.file_static_used = off + sizeof(T);
  }
  return *reinterpret_cast<T*>(arena + kFileBase + off);
}

// ---------------------------------------------------------------------------------------------
// Launch.
struct Config {
  dim3 grid, block;
  size_t smem = 0;
  bool bad_grid = false;
  dim3 cluster{0, 0, 0};  // from cudaLaunchKernelEx's cluster attribute; 0: none given
};

template <class G>
CUDASIM_INTERNAL inline dim3 to_dim3(const G& v, bool& bad) {
  if constexpr (std::is_integral_v<G> || std::is_enum_v<G>) {
    long long x = static_cast<long long>(v);
    if (x < 0 || x > 0xFFFFFFFFll) { bad = true; return dim3(0); }
    return dim3(static_cast<unsigned>(x));
  } else {
    return dim3(v);
  }
}

template <class G, class B>
CUDASIM_INTERNAL inline Config config(const G& grid, const B& block, size_t smem = 0, cudaStream_t = nullptr) {
  Config c;
  c.grid = to_dim3(grid, c.bad_grid);
  c.block = to_dim3(block, c.bad_grid);
  c.smem = smem;
  return c;
}
// Any integer or enumerator (the CUDA samples' `enum { SHMEM_SZ = ... }`) is a byte count.
template <class G, class B, class S>
CUDASIM_INTERNAL inline Config config(const G& grid, const B& block, S smem, cudaStream_t stream = nullptr) {
  static_assert(std::is_enum_v<S> || std::is_convertible_v<S, size_t>,
                "the third value of <<<...>>> is the dynamic shared memory size, a number of bytes");
  return config<G, B>(grid, block, static_cast<size_t>(smem), stream);
}

CUDASIM_RT std::string strip_name(const std::string& s) {
  std::string out;
  int depth = 0;
  for (char ch : s) {
    if (ch == '<') ++depth;
    else if (ch == '>') --depth;
    else if (depth == 0 && ch != ' ' && ch != '\n' && ch != '\t') out += ch;
  }
  size_t colon = out.rfind("::");
  return colon == std::string::npos ? out : out.substr(colon + 2);
}

// __cluster_dims__(x, y, z) on a kernel: the translator registers it by the kernel's name when the library loads.
CUDASIM_RT bool register_cluster_dims(const char* kernel, unsigned x, unsigned y, unsigned z) {
  g.cluster_dims.emplace_back(strip_name(kernel), dim3(x, y, z));
  return true;
}

// A kernel's cluster shape, given a launch's cluster attribute `given` (x 0: none): __cluster_dims__ or the
// attribute (both: they must agree); {1, 1, 1} without either. A shape CUDA refuses gives false
// (cudaErrorInvalidClusterSize): an empty one, or more than 8 blocks (16 with
// cudaFuncAttributeNonPortableClusterSizeAllowed). cudaOccupancyMaxActiveClusters checks the same.
CUDASIM_RT bool cluster_shape(const char* kernel, dim3 given, dim3& out) {
  const std::string k = strip_name(kernel);
  const dim3* fixed = nullptr;
  for (auto& e : g.cluster_dims)
    if (e.first == k) fixed = &e.second;
  bool non_portable = false;
  for (auto& e : g.non_portable)
    if (e.first == k) non_portable = e.second != 0;
  out = dim3(1, 1, 1);
  if (given.x) out = given;
  if (fixed) {
    if (given.x && (given.x != fixed->x || given.y != fixed->y || given.z != fixed->z)) return false;
    out = *fixed;
  }
  const unsigned long long n = 1ull * out.x * out.y * out.z;
  return n != 0 && n <= (non_portable ? kMaxCluster : kPortableCluster);
}

// The cluster shape of a launch (cluster_shape), which must also divide its grid.
CUDASIM_RT bool cluster_of(const char* kernel, const Config& c, dim3& out) {
  if (!cluster_shape(kernel, c.cluster, out)) return false;
  return c.grid.x % out.x == 0 && c.grid.y % out.y == 0 && c.grid.z % out.z == 0;
}

CUDASIM_RT int opt_in_limit(const char* kernel) {
  std::string k = strip_name(kernel);
  for (auto& e : g.max_dynamic_smem)
    if (e.first == k) return e.second;
  return -1;
}

// The values of CUDASIM_ORDER, in the order of Sim::order (kernels/sim's knobs module lists the same).
inline constexpr const char* kOrderNames[] = {"forward", "reverse", "random"};
// The values of CUDASIM_CLUSTER_LEAD, in the order of Sim::lead_knob (the knobs module lists the same): which block
// of each cluster runs ahead of the others. Unset, the thread order says: forward the first block (rank 0), reverse
// the last, random one drawn from the seed.
inline constexpr const char* kLeadNames[] = {"none", "first", "last", "random"};

// CUDASIM_PEERS (kernels/sim/peers.py writes it; the knobs module checks it the same way): one entry per rank's
// segment, separated by ';', each `owner:me:buf:bytes:pad:bytes:shadow:bytes` (ranks in decimal, addresses and sizes
// in hex). CUDASIM_PEER_TIMEOUT: seconds a poll of peer memory may wait, a number above 0 (default 60).
CUDASIM_RT void read_peer_knobs(unsigned long long seed) {
  const char* text = std::getenv("CUDASIM_PEERS");
  const std::string now = text ? text : "";
  if (now != g.peers_text) {
    std::vector<PeerSegment> found;
    for (size_t at = 0; at < now.size();) {
      size_t end = now.find(';', at);
      if (end == std::string::npos) end = now.size();
      const std::string one = now.substr(at, end - at);
      PeerSegment s;
      unsigned long long v[6];
      int used = 0;
      if (std::sscanf(one.c_str(), "%d:%d:%llx:%llx:%llx:%llx:%llx:%llx%n", &s.owner, &s.me, &v[0], &v[1], &v[2],
                      &v[3], &v[4], &v[5], &used) != 8 || used != static_cast<int>(one.size()) || s.owner < 0 ||
          s.me < 0)
        throw std::runtime_error("cudasim: CUDASIM_PEERS=" + now + " is not a list of peer memory segments: expected "
                                 "entries owner:me:buffer:bytes:pad:bytes:shadow:bytes separated by ';' (ranks in "
                                 "decimal, addresses and sizes in hex), as kernels/sim/peers.py writes it; the entry '" +
                                 one + "' is not one");
      s.buf = v[0], s.buf_bytes = v[1], s.pad = v[2], s.pad_bytes = v[3], s.shadow = v[4], s.shadow_bytes = v[5];
      found.push_back(s);
      at = end + 1;
    }
    g.peers = std::move(found);
    g.peer_at = g.peers.data();
    g.peer_count = g.peers.size();
    g.peers_text = now;
    g.peer_launches = 0;
  }
  const char* timeout = std::getenv("CUDASIM_PEER_TIMEOUT");
  g.peer_timeout = 60;
  if (timeout && *timeout) {
    char* end = nullptr;
    const double v = std::strtod(timeout, &end);
    if (*end || !(v > 0) || v > 1e9)
      throw std::runtime_error(std::string("cudasim: CUDASIM_PEER_TIMEOUT=") + timeout + " is not a time; use a "
                               "number of seconds above 0");
    g.peer_timeout = v;
  }
  // With peer memory every rank must run its blocks in the same order (block b of one rank waits for block b of the
  // others, and blocks run one at a time here): the shuffle is drawn from the seed and the launches since the
  // segments were set, the same in every rank that makes the same launches.
  if (!g.peers.empty()) g.rng.seed(seed * 0x9E3779B97F4A7C15ull + g.peer_launches++);
}

CUDASIM_RT void read_knobs() {
  const char* o = std::getenv("CUDASIM_ORDER");
  g.order = 0;
  if (o && *o) {
    int found = -1;
    for (int i = 0; i < 3; ++i)
      if (std::strcmp(o, kOrderNames[i]) == 0) found = i;
    if (found < 0)
      throw std::runtime_error(std::string("cudasim: CUDASIM_ORDER=") + o + " is not a thread order; use one of: " +
                               kOrderNames[0] + ", " + kOrderNames[1] + ", " + kOrderNames[2]);
    g.order = found;
  }
  const char* sb = std::getenv("CUDASIM_SHUFFLE_BLOCKS");
  if (sb && *sb && std::strcmp(sb, "0") != 0 && std::strcmp(sb, "1") != 0)
    throw std::runtime_error(std::string("cudasim: CUDASIM_SHUFFLE_BLOCKS=") + sb + " is not a switch; use 1 (blocks "
                             "in random order) or 0 (in order)");
  g.shuffle_blocks = sb && std::strcmp(sb, "1") == 0;
  const char* lead = std::getenv("CUDASIM_CLUSTER_LEAD");
  g.lead_knob = -1;
  if (lead && *lead) {
    for (int i = 0; i < 4; ++i)
      if (std::strcmp(lead, kLeadNames[i]) == 0) g.lead_knob = i;
    if (g.lead_knob < 0)
      throw std::runtime_error(std::string("cudasim: CUDASIM_CLUSTER_LEAD=") + lead + " is not a cluster lead; use "
                               "one of: " + kLeadNames[0] + ", " + kLeadNames[1] + ", " + kLeadNames[2] + ", " +
                               kLeadNames[3]);
  }
  const char* kb = std::getenv("CUDASIM_STACK_KB");
  long long stack_kb = kb && *kb ? std::strtoll(kb, nullptr, 10) : 256;
  if (stack_kb < 16 || stack_kb > 1024 * 1024)
    throw std::runtime_error("cudasim: CUDASIM_STACK_KB must be a number of KB from 16 to 1048576, got '" +
                             std::string(kb) + "'");
  g.stack_bytes = static_cast<size_t>(stack_kb) * 1024;
  const char* spin = std::getenv("CUDASIM_SPIN_SECONDS");
  if (spin && *spin) {
    char* end = nullptr;
    double seconds = std::strtod(spin, &end);
    if (*end || !(seconds >= 0.5 && seconds <= 86400))
      throw std::runtime_error(std::string("cudasim: CUDASIM_SPIN_SECONDS must be a number of seconds from 0.5 to "
                                           "86400, got '") + spin + "'");
    g.spin_seconds = seconds;
  } else {
    g.spin_seconds = 30;
  }
  const char* seed = std::getenv("CUDASIM_SEED");
  if (seed && *seed) {
    char* end = nullptr;
    std::strtoull(seed, &end, 10);
    if (*end || *seed == '-')
      throw std::runtime_error(std::string("cudasim: CUDASIM_SEED=") + seed + " is not a seed; use a whole number "
                               "from 0 up");
  }
  g.rng.seed(seed && *seed ? std::strtoull(seed, nullptr, 10) + g.launches : 0x5eed + g.launches);
  ++g.launches;
  read_peer_knobs(seed && *seed ? std::strtoull(seed, nullptr, 10) : 0x5eed);
}

CUDASIM_RT cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) g.last_error = e;
  return e;
}

// Faults in a kernel thread. Fiber stacks are small (CUDASIM_STACK_KB, 256 KB by default), and a
// deep recursion or a large local array runs into the guard below the stack; an index far out of
// range or a bad pointer reads or writes memory that is not mapped. While a launch runs, a SIGSEGV
// and SIGBUS handler (macOS raises SIGBUS for an access to a page with no access, such as the guard)
// on its own stack checks whether the running fiber faulted, in its guard or in this library's code
// (the kernel's own code, not a library it calls); if so it notes where and returns into
// leave_faulted_fiber, which abandons the fiber and switches to the scheduler, which raises the
// error. Any other fault goes to the handler that was installed before (the process dies as it
// would have). The faulting access never happened, so nothing was corrupted by it. The source line
// comes from the library's line tables (sim builds use -g1) through addr2line. The registers are
// read per CPU and OS (cudasim_platform.h); elsewhere faults are not caught.
constexpr int kFaultSignals[] = {SIGSEGV, SIGBUS};
struct FaultGuard {
  struct sigaction old_action[2] {};
  struct sigaction old_spin {};
  stack_t old_stack{};
  bool installed = false;
  uintptr_t code_lo = 0, code_hi = 0;  // this library's executable segment
};
inline FaultGuard fault_guard;
alignas(16) inline char signal_stack[64 * 1024];

// Where the handler returns to, on the top of the signal stack (free again once the handler has
// returned): the faulting fiber never runs again (it is restarted at the next block).
[[noreturn]] CUDASIM_RT void leave_faulted_fiber() {
  switch_stack(&g.cur->sp, g.sched_sp);
  __builtin_trap();
}

CUDASIM_RT void note_code_segment(uintptr_t lo, uintptr_t hi, bool executable, bool) {
  if (executable && !fault_guard.code_hi) fault_guard.code_lo = lo, fault_guard.code_hi = hi;
}

CUDASIM_RT void on_segv(int sig, siginfo_t* info, void* uctx) {
  Thread* t = g.cur;
  char* addr = static_cast<char*>(info->si_addr);
#ifdef CUDASIM_FAULT_REGS
  uintptr_t pc = platform::fault_pc(uctx);
  bool in_guard = t && t->stack && addr >= t->stack && addr < t->stack + kGuardBytes;
  if (t && g.running && (in_guard || (pc >= fault_guard.code_lo && pc < fault_guard.code_hi))) {
    g.fault_overflow = in_guard;
    g.fault_addr = addr;
    g.fault_code = info->si_code;
    g.fault_pc = reinterpret_cast<const void*>(pc);
    g.fault_sp = reinterpret_cast<const void*>(platform::fault_sp(uctx));
    g.fault_thread = t->linear;
    t->state = State::Done;
    platform::fault_resume(uctx, leave_faulted_fiber, signal_stack + sizeof signal_stack);
    return;
  }
#endif
  // not ours: hand it to the previous handler, or let the default action end the process
  const struct sigaction& old = fault_guard.old_action[sig == SIGSEGV ? 0 : 1];
  if (old.sa_flags & SA_SIGINFO) {
    if (old.sa_sigaction) { old.sa_sigaction(sig, info, uctx); return; }
  } else if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
    old.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);  // returning re-runs the faulting instruction, which now ends the process
}

// A thread that never waits. The simulator switches threads only where one waits (a barrier, a warp operation, an
// atomic, a poll it knows), so a loop on a plain or volatile load that waits for another block's store (blocks run
// one at a time here) or for a thread that never got to run would spin for ever. A watchdog thread, started with the
// first launch of a process, looks twice a second at how many times the scheduler resumed a fiber; when a launch has
// gone CUDASIM_SPIN_SECONDS (30 by default) without one, it signals the launching thread, whose handler stops the
// running fiber as the fault handler does, and the launch fails naming the thread and its line.
constexpr int kSpinSignal = SIGURG;  // ignored by default: a late one between launches does nothing
inline pid_t spin_watchdog_pid = 0;

CUDASIM_RT void on_spin(int, siginfo_t*, void* uctx) {
#ifdef CUDASIM_FAULT_REGS
  Thread* t = g.cur;
  uintptr_t pc = platform::fault_pc(uctx);
  if (!t || !g.running || g.fault_thread >= 0 || pc < fault_guard.code_lo || pc >= fault_guard.code_hi) return;
  g.fault_spin = true;
  g.fault_overflow = false;
  g.fault_addr = nullptr;
  g.fault_pc = reinterpret_cast<const void*>(pc);
  g.fault_sp = reinterpret_cast<const void*>(platform::fault_sp(uctx));
  g.fault_thread = t->linear;
  t->state = State::Done;
  platform::fault_resume(uctx, leave_faulted_fiber, signal_stack + sizeof signal_stack);
#else
  (void)uctx;
#endif
}

CUDASIM_RT void* spin_watchdog(void*) {
  unsigned long long seen = ~0ull;
  double still = 0;  // seconds the running launch has gone without a resume
  for (;;) {
    timespec half{0, 500000000};
    nanosleep(&half, nullptr);
    unsigned long long now = g.resumes.load(std::memory_order_relaxed);
    if (!g.running || now != seen) {
      seen = now;
      still = 0;
      continue;
    }
    still += 0.5;
    if (still >= g.spin_seconds) {
      pthread_kill(g.launch_thread, kSpinSignal);
      still = 0;  // once more after as long, should the thread be outside the kernel's code just now
    }
  }
  return nullptr;
}

CUDASIM_RT void start_spin_watchdog() {
#ifdef CUDASIM_FAULT_REGS
  if (spin_watchdog_pid == getpid()) return;  // one per process (a forked child starts its own)
  spin_watchdog_pid = getpid();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // the watchdog takes no signals meant for the process
  pthread_t id;
  if (pthread_create(&id, &attr, spin_watchdog, nullptr) != 0) spin_watchdog_pid = 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
#endif
}

CUDASIM_RT void install_fault_guard() {
  if (!fault_guard.code_hi) platform::image_segments(reinterpret_cast<const void*>(&on_segv), note_code_segment);
  stack_t ss{};
  ss.ss_sp = signal_stack;
  ss.ss_size = sizeof signal_stack;
  ss.ss_flags = 0;
  sigaltstack(&ss, &fault_guard.old_stack);
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  for (int i = 0; i < 2; ++i) sigaction(kFaultSignals[i], &sa, &fault_guard.old_action[i]);
  struct sigaction spin {};
  spin.sa_sigaction = on_spin;
  sigemptyset(&spin.sa_mask);
  spin.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(kSpinSignal, &spin, &fault_guard.old_spin);
  start_spin_watchdog();
  fault_guard.installed = true;
}

CUDASIM_RT void remove_fault_guard() {
  if (!fault_guard.installed) return;
  for (int i = 0; i < 2; ++i) sigaction(kFaultSignals[i], &fault_guard.old_action[i], nullptr);
  sigaction(kSpinSignal, &fault_guard.old_spin, nullptr);
  sigaltstack(&fault_guard.old_stack, nullptr);
  fault_guard.installed = false;
}

// The learner's source line of a code address in this library ("file.cu:12"), or "" when the
// library has no line tables or addr2line is missing. Lines in the simulator's own headers and in
// system headers are skipped in favour of the line they were inlined into; when every line is such a
// line (code of a header that was not inlined), `skipped` gets the first of them ("utility:96").
CUDASIM_RT std::string source_line(const void* pc, bool return_address, std::string* skipped = nullptr) {
  Dl_info info{};
  if (!dladdr(pc, &info) || !info.dli_fname || !info.dli_fbase) return "";
  uintptr_t off = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase) - return_address;
  std::string cmd = "addr2line -i -e '" + std::string(info.dli_fname) + "' 0x";
  char hex[32];
  std::snprintf(hex, sizeof hex, "%zx 2>/dev/null", static_cast<size_t>(off));
  FILE* out = popen((cmd + hex).c_str(), "r");
  if (!out) return "";
  std::string found;
  char line[1024];
  while (std::fgets(line, sizeof line, out)) {
    std::string l = line;
    while (!l.empty() && (l.back() == '\n' || l.back() == ' ')) l.pop_back();
    size_t disc = l.find(" (discriminator");
    if (disc != std::string::npos) l.erase(disc);
    bool ours = l.rfind("??", 0) != 0 && l.find("/sim/include/") == std::string::npos &&
                l.rfind("/usr/", 0) != 0 && l.find("/site-packages/") == std::string::npos &&
                l.size() > 2 && l.compare(l.size() - 2, 2, ":0") != 0 && l.back() != '?';
    if (found.empty() && ours) found = base_name(l.c_str());
    if (skipped && skipped->empty() && !l.empty() && l.rfind("??", 0) != 0 && l.back() != '?')
      *skipped = base_name(l.c_str());
  }
  pclose(out);
  return found;
}

// A code address in a message made on a fiber, whose small stack cannot run addr2line: a token that
// resolve_lines turns into the learner's line where the scheduler raises the message.
CUDASIM_RT std::string pc_token(const void* pc) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "@pc:%zx@", reinterpret_cast<size_t>(pc));
  return buf;
}

CUDASIM_RT std::string resolve_lines(std::string msg) {
  for (size_t at = msg.find("@pc:"); at != std::string::npos; at = msg.find("@pc:", at)) {
    size_t end = msg.find('@', at + 4);
    if (end == std::string::npos) break;
    const void* pc = reinterpret_cast<const void*>(std::strtoull(msg.c_str() + at + 4, nullptr, 16));
    std::string skipped;
    std::string line = source_line(pc, true, &skipped);
    if (line.empty())
      line = skipped.empty() ? "an unknown line (addr2line is missing)"
                             : "an unknown line (in a header's code, " + skipped + ")";
    msg.replace(at, end + 1 - at, line);
    at += line.size();
  }
  return msg;
}

// Where a faulting thread was: the line of the faulting instruction, else of the nearest return
// address on its stack that lies in this library (a call made from the learner's code).
CUDASIM_RT std::string fault_line(const void* pc, const void* sp, const void* top) {
  std::string at = source_line(pc, false);
  const uintptr_t* words = static_cast<const uintptr_t*>(sp);
  for (int i = 0; at.empty() && words + i + 1 <= static_cast<const uintptr_t*>(top) && i < 256; ++i) {
    uintptr_t w = words[i];
    if (w >= fault_guard.code_lo && w < fault_guard.code_hi) at = source_line(reinterpret_cast<void*>(w), true);
  }
  return at;
}

// cudaMalloc's memory. Each allocation is a mapping of its own: its size rounded up to 256 bytes (CUDA's alignment)
// ends where the mapping's pages end, with 1 MB of address space that has no access on either side. A kernel that
// reads or writes past the end of a cudaMalloc'd buffer (or before its start, past the page's slack) then faults
// there, and the fault handler above stops it with an illegal memory access at its line, where the same access into
// heap memory would corrupt a neighbour, the allocator's bookkeeping or the simulator itself (and be reported much
// later as something else). cudaFree returns the memory but keeps the addresses unmapped (the last 64 GB of them;
// address space only), so that a stale pointer faults too instead of reaching whatever is mapped there next.
// The bytes start as 0xff, not zero: CUDA does not clear what cudaMalloc gives, and a kernel that adds into memory it
// never set must not pass here by luck (floats read NaN, integers -1).
struct DeviceAllocation {
  char* p;       // what cudaMalloc gave
  size_t bytes;  // what it was asked for
  char* base;    // the mapping, guards included
  size_t mapped;
};
inline std::vector<DeviceAllocation> device_allocations;  // live ones, by p ascending
inline std::vector<DeviceAllocation> device_freed;        // given back, oldest first, still reserved
inline size_t device_freed_bytes = 0;
inline std::atomic_flag device_allocations_lock = ATOMIC_FLAG_INIT;
constexpr size_t kDeviceGuardBytes = size_t(1) << 20;
constexpr size_t kDeviceFreedReserve = size_t(64) << 30;
struct DeviceAllocationsLocked {
  DeviceAllocationsLocked() { while (device_allocations_lock.test_and_set(std::memory_order_acquire)) {} }
  ~DeviceAllocationsLocked() { device_allocations_lock.clear(std::memory_order_release); }
};
inline size_t device_rounded(size_t bytes) { return bytes ? (bytes + 255) / 256 * 256 : 256; }
inline bool device_before(const DeviceAllocation& a, const char* q) { return a.p < q; }

CUDASIM_RT void* device_malloc(size_t n) {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t data = device_rounded(n);
  if (data < n) return nullptr;  // n within 255 of SIZE_MAX
  size_t body = (data + page - 1) / page * page;
  if (body < data || body > SIZE_MAX - 2 * kDeviceGuardBytes) return nullptr;
  size_t mapped = body + 2 * kDeviceGuardBytes;
  void* m = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char* base = static_cast<char*>(m);
  if (mprotect(base + kDeviceGuardBytes, body, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, mapped);
    return nullptr;
  }
  char* p = base + kDeviceGuardBytes + body - data;
  std::memset(p, 0xff, data);
  DeviceAllocationsLocked lock;
  auto at = std::lower_bound(device_allocations.begin(), device_allocations.end(), p, device_before);
  device_allocations.insert(at, DeviceAllocation{p, n, base, mapped});
  return p;
}

// Gives back what cudaMalloc gave; false for any other pointer (freed already, from elsewhere, or into a buffer).
CUDASIM_RT bool device_release(void* p) {
  std::vector<DeviceAllocation> unmap;
  {
    DeviceAllocationsLocked lock;
    auto at = std::lower_bound(device_allocations.begin(), device_allocations.end(), static_cast<char*>(p),
                               device_before);
    if (at == device_allocations.end() || at->p != p) return false;
    DeviceAllocation a = *at;
    device_allocations.erase(at);
    madvise(a.base, a.mapped, MADV_DONTNEED);  // the memory goes back; the addresses stay reserved
    mprotect(a.base, a.mapped, PROT_NONE);
    device_freed.push_back(a);
    device_freed_bytes += a.mapped;
    size_t drop = 0;
    while (device_freed_bytes > kDeviceFreedReserve && drop < device_freed.size())
      device_freed_bytes -= device_freed[drop].mapped, unmap.push_back(device_freed[drop++]);
    device_freed.erase(device_freed.begin(), device_freed.begin() + long(drop));
  }
  for (const DeviceAllocation& a : unmap) munmap(a.base, a.mapped);
  return true;
}

// The live cudaMalloc'd allocation that holds address q, if one does.
CUDASIM_RT bool device_allocation_at(const void* q, DeviceAllocation* out) {
  const char* c = static_cast<const char*>(q);
  DeviceAllocationsLocked lock;
  auto at = std::upper_bound(device_allocations.begin(), device_allocations.end(), c,
                             [](const char* x, const DeviceAllocation& a) { return x < a.p; });
  if (at == device_allocations.begin()) return false;
  --at;
  if (c >= at->p + device_rounded(at->bytes)) return false;
  *out = *at;
  return true;
}

// A copy or memset of n bytes at q that starts inside a cudaMalloc'd allocation and runs past its end: CUDA refuses
// it with cudaErrorInvalidValue (the simulator counts the bytes that were asked for); a note on stderr says by how much.
CUDASIM_RT bool device_range_overruns(const char* what, const void* q, size_t n) {
  DeviceAllocation a{};
  if (!n) return false;
  if (!device_allocation_at(q, &a)) {  // a pointer into memory cudaFree gave back: a copy there would fault
    const char* c = static_cast<const char*>(q);
    DeviceAllocationsLocked lock;
    for (const DeviceAllocation& f : device_freed)
      if (c >= f.p && c < f.p + device_rounded(f.bytes)) {
        std::fprintf(stderr, "cudasim: %s: byte %zu of a cudaMalloc'd allocation of %zu bytes that cudaFree had given "
                     "back, a stale pointer (cudaErrorInvalidValue)\n", what, size_t(c - f.p), f.bytes);
        return true;
      }
    return false;
  }
  size_t offset = size_t(static_cast<const char*>(q) - a.p);
  if (offset + n <= a.bytes && offset + n >= offset) return false;
  std::fprintf(stderr, "cudasim: %s: %zu bytes from byte %zu of a cudaMalloc'd allocation of %zu bytes run %zu bytes "
               "past its end (cudaErrorInvalidValue)\n", what, n, offset, a.bytes, offset + n - a.bytes);
  return true;
}

// Words for a fault in the address space of a cudaMalloc'd allocation (its guards, or all of it once freed), or "".
CUDASIM_RT std::string device_fault_words(const void* q) {
  uintptr_t c = reinterpret_cast<uintptr_t>(q);
  DeviceAllocationsLocked lock;
  for (int freed = 0; freed < 2; ++freed)
    for (const DeviceAllocation& a : freed ? device_freed : device_allocations) {
      uintptr_t base = reinterpret_cast<uintptr_t>(a.base), p = reinterpret_cast<uintptr_t>(a.p);
      if (c < base || c >= base + a.mapped) continue;
      char buf[320];
      if (freed && c >= p && c < p + a.bytes)
        std::snprintf(buf, sizeof buf, "byte %zu of a cudaMalloc'd allocation of %zu bytes that cudaFree had given "
                      "back (a stale pointer: on a GPU it reads or overwrites whatever was allocated there next)",
                      size_t(c - p), a.bytes);
      else
        std::snprintf(buf, sizeof buf, "%zu bytes %s of a cudaMalloc'd allocation of %zu bytes%s (the simulator "
                      "keeps the address space around each allocation unmapped; on a GPU the access could land in "
                      "another allocation unnoticed, where compute-sanitizer's memcheck finds it)",
                      c >= p ? size_t(c - p - a.bytes) : size_t(p - c), c >= p ? "past the end" : "before the start",
                      a.bytes, freed ? " that cudaFree had given back" : "");
      return buf;
    }
  return "";
}

[[noreturn]] CUDASIM_RT void report_fault() {
  g.cur = &g.threads[g.fault_thread];
  g.fault_thread = -1;
  // the words above the stack pointer, kept inside the fiber's stack (after an overflow it points
  // into the guard, which cannot be read)
  uintptr_t lo = reinterpret_cast<uintptr_t>(g.cur->stack) + kGuardBytes, hi = lo + g.cur->stack_size;
  uintptr_t sp = std::clamp(reinterpret_cast<uintptr_t>(g.fault_sp) & ~uintptr_t(7), lo, hi);
  std::string line = fault_line(g.fault_pc, reinterpret_cast<const void*>(sp), reinterpret_cast<const void*>(hi));
  std::string at = line.empty() ? "" : " at " + line;
  char buf[800];
  if (!g.fault_spin && !g.fault_overflow) g.fail_code = cudaErrorIllegalAddress;
  if (g.fault_spin) {
    g.fault_spin = false;
    std::snprintf(buf, sizeof buf,
                  "the kernel seems to spin forever%s: this thread ran %g seconds without reaching a barrier, a warp "
                  "operation or an atomic, so no other thread could run. Either a loop that never ends (a "
                  "grid-stride loop whose stride is 0?), or a poll of a plain or volatile load for a value that "
                  "another block or thread stores: here a thread runs until it waits at one of those, and blocks run "
                  "one at a time (a GPU promises no order between blocks either). If the thread is only slow, raise "
                  "the limit with the environment variable CUDASIM_SPIN_SECONDS",
                  at.c_str(), g.spin_seconds);
  } else if (g.fault_overflow) {
    std::snprintf(buf, sizeof buf,
                  "stack overflow%s: the thread used more than its %zu KB stack (deep recursion or large local "
                  "arrays); raise it with the environment variable CUDASIM_STACK_KB, e.g. CUDASIM_STACK_KB=%zu",
                  at.c_str(), g.stack_bytes / 1024, g.stack_bytes / 1024 * 4);
  } else if (!g.fault_addr && g.fault_code == CUDASIM_NO_ADDRESS_FAULT) {
    // x86 reports a general-protection fault without the address: an aligned vector instruction at an
    // address that is not a multiple of its width, or an address outside the CPU's address space
    std::snprintf(buf, sizeof buf,
                  "illegal memory access%s: the thread's access faulted, and the CPU does not say at which address: "
                  "either a misaligned vector access (a float4, int4 or double2 at an address that is not a multiple "
                  "of 16; a GPU would stop with \"misaligned address\") or an address far outside memory (a huge or "
                  "negative index; a GPU would stop with \"an illegal memory access was encountered\")",
                  at.c_str());
  } else if (std::string words = device_fault_words(g.fault_addr); !words.empty()) {
    std::snprintf(buf, sizeof buf, "illegal memory access%s: the thread read or wrote address 0x%zx, %s", at.c_str(),
                  static_cast<size_t>(reinterpret_cast<uintptr_t>(g.fault_addr)), words.c_str());
  } else {
    std::snprintf(buf, sizeof buf,
                  "illegal memory access%s: the thread read or wrote address 0x%zx%s, which is not mapped (an index "
                  "out of range or a pointer that is not a tensor's; a GPU would stop with \"an illegal memory "
                  "access was encountered\"). The simulator catches only accesses outside mapped memory: a few "
                  "bytes past the end of a tensor can land in memory the process owns",
                  at.c_str(), static_cast<size_t>(reinterpret_cast<uintptr_t>(g.fault_addr)),
                  reinterpret_cast<uintptr_t>(g.fault_addr) < 4096 ? " (a null pointer, or an index from one)" : "");
  }
  fail(buf);
}

// Checks other headers run when a block has finished normally (cudasim_ptx.h: a wgmma still in flight).
inline std::vector<void (*)()> block_end_checks;

// What a store of the learner's code into shared memory breaks, asked by the race and bounds check
// (cudasim_instrument.h): a message, or empty when nothing. cudasim_ptx.h sets it (a bulk store still
// reading those bytes). `line(where)` says where the store is, called only for a message: most stores
// break nothing, and the words cost more than the question.
inline std::string (*shared_write_watch)(const void* p, size_t bytes, std::string (*line)(const void* where),
                                         const void* where) = nullptr;

// The rank of a cluster of `ranks` blocks that runs ahead of the others (Sim::lead): CUDASIM_CLUSTER_LEAD's, or unset
// the thread order's (forward the first, reverse the last, random one drawn from the seed); -1 for none, and
// without a cluster.
CUDASIM_RT int pick_lead(unsigned ranks) {
  if (ranks < 2) return -1;
  const int how = g.lead_knob >= 0 ? g.lead_knob : g.order + 1;
  if (how == 0) return -1;
  if (how == 1) return 0;
  if (how == 2) return static_cast<int>(ranks) - 1;
  return static_cast<int>(g.rng() % ranks);
}

// The offset of the first byte of block r's shared memory in use (dynamic, then static) that is not poison, or -1:
// a cluster's blocks are poisoned before they start and after they end, so such a byte was written by another block.
CUDASIM_RT long long first_unpoisoned(unsigned r) {
  const unsigned char* base = arena + r * kCtaStride;
  const std::pair<size_t, size_t> parts[] = {{0, g.dyn_bytes}, {g.static_base, g.static_base + g.static_used}};
  for (auto [lo, hi] : parts)
    for (size_t i = lo; i < hi; ++i)
      if (base[i] != kPoison) return static_cast<long long>(i);
  return -1;
}

// The threads held back while the lead ran alone (Sim::held) go on in the next round.
CUDASIM_RT void release_held() {
  for (int id : g.held)
    if (g.threads[id].state == State::Ready) g.runq.push_back(id);
  g.held.clear();
}

// A block of the cluster starts: its first thread is about to run (while another block runs ahead). Its shared
// memory was poisoned when the cluster began, so a byte that is not poison now was written by another block before
// this one started: on a GPU that memory is not yet this block's, and its own initialisation would overwrite it.
CUDASIM_RT void start_cta(unsigned r) {
  g.cta_started[r] = true;
  const long long i = first_unpoisoned(r);
  if (i < 0) return;
  g.cur = nullptr;
  g.block_idx = g.cta_idx[r];
  char buf[600];
  std::snprintf(buf, sizeof buf, "shared memory byte 0x%llx of the cluster's block of rank %u was written before that "
                "block started (the block of rank %d ran ahead of the others): a block of a cluster may start later "
                "than the others, so the cluster must synchronise (barrier.cluster, cluster.sync()) after its blocks "
                "start and initialise their shared memory, before a block writes into another's",
                static_cast<unsigned long long>(r * kCtaStride + i), r, g.lead);
  fail(buf);
}

// Run one block, or in a cluster launch the cluster whose first block is (bx, by, bz), to its end.
CUDASIM_RT void run_block(unsigned bx, unsigned by, unsigned bz) {
  g.block_idx = uint3{bx, by, bz};
  g.block_gen += 1;
  g.static_used = 0;
  const unsigned ranks = g.cluster_size;
  for (unsigned r = 0; r < ranks; ++r) {
    const dim3& c = g.cluster_dim;
    g.cta_idx[r] = uint3{bx + r % c.x, by + r / c.x % c.y, bz + r / (c.x * c.y)};
    unsigned char* base = arena + r * kCtaStride;
    std::memset(base, kPoison, g.dyn_bytes + kCanary);
    if (ranks > 1) std::memset(base + g.static_base, kPoison, g.static_limit);  // each rank's static variables
    g.cta_at_barrier[r] = g.cta_done[r] = 0;
  }
  g.smem = arena;
  g.cta_release = false;
  g.cluster_phase = 0;
  g.cluster_arrivals = 0;
  g.lead = pick_lead(ranks);
  g.hold = g.lead >= 0;
  g.held.clear();
  for (unsigned r = 0; r < ranks; ++r) g.cta_started[r] = g.lead < 0 || r == static_cast<unsigned>(g.lead);
  std::memset(arena + kFileBase, kPoison, g.file_static_used);
  g.runq.clear();
  g.runq_head = 0;
  const size_t warps = (static_cast<size_t>(g.nthreads) + 31) / 32;
  g.warp_waiting.assign(warps, 0u);
  g.warp_done.assign(warps, 0u);
  std::vector<int> all;
  all.reserve(static_cast<size_t>(g.nthreads));
  for (int i = 0; i < g.nthreads; ++i) {
    Thread& t = g.threads[i];
    const int local = i % g.cta_stride;
    t.linear = i;
    t.local = local;
    t.cta = i / g.cta_stride;
    t.cluster_arrived = 0;
    t.cluster_pending = false;
    if (local >= g.cta_threads) {  // a cluster's padding between blocks: a lane that never exists
      t.state = State::Done;
      g.warp_done[i / 32] |= 1u << (i & 31);
      continue;
    }
    t.idx = uint3{local % g.block_dim.x, (local / g.block_dim.x) % g.block_dim.y,
                  local / (g.block_dim.x * g.block_dim.y)};
    start_fiber(t);
    all.push_back(i);
  }
  queue_in_order(all);
  CUDASIM_EVENT(block_begin());
  if (tracing.blocks) trace::block_begin();
  size_t round_end = 0;  // the trace's clock: where the run queue's current round ends
  // A round in which nothing moved on (only polls: an mbarrier or cluster wait, a spin) counts as "no thread can run"
  // for the warp operations that wait for their lanes' states (__activemask, lanes that exited): polling threads
  // never let the run queue empty, where complete_pending_warps would otherwise settle them.
  size_t poll_round_end = 0;
  unsigned long long round_progress = g.progress;
  for (;;) {
    while (g.runq_head < g.runq.size()) {
      if (tracing.block && g.runq_head >= round_end) {  // a round: the threads queued when it began, one turn each
        round_end = g.runq.size();
        tracing.step += 1;
      }
      if (g.runq_head >= poll_round_end) {
        const bool idle = g.progress == round_progress;
        if (!poll_round_end) {  // the first round (after the queue emptied): nothing to judge yet
        } else if (g.lead >= 0 && g.hold == idle) {
          // the lead alone moved nothing in its round: the others run the next one; after a round of all that moved
          // something, the lead runs alone again
          if (g.hold) release_held();
          g.hold = !g.hold;
        } else if (idle) {
          complete_pending_warps();
        }
        poll_round_end = g.runq.size();
        round_progress = g.progress;
      }
      int id = g.runq[g.runq_head++];
      Thread& t = g.threads[id];
      if (t.state != State::Ready) continue;
      if (g.lead >= 0) {
        if (g.hold && t.cta != g.lead) {
          g.held.push_back(id);
          continue;
        }
        if (!g.cta_started[t.cta]) start_cta(static_cast<unsigned>(t.cta));
      }
      resume(t);
      if (g.fault_thread >= 0) report_fault();
      if (g.finding_thread >= 0) {
        g.cur = &g.threads[g.finding_thread];
        g.finding_thread = -1;
        fail(resolve_lines(std::move(g.finding)));
      }
      if (g.error) return;
      if (t.state == State::Yield) make_ready(id);
      if (g.cta_release) release_ready_ctas();
    }
    g.runq.clear();
    g.runq_head = 0;
    round_end = poll_round_end = 0;
    if (!g.held.empty()) {  // the lead can go no further alone: the others run (before any warp or barrier is settled)
      release_held();
      g.hold = false;
      continue;
    }
    if (complete_pending_warps()) continue;
    bool done = true;
    for (auto& t : g.threads) done &= t.state == State::Done;
    if (done) break;
    resolve_block();
    if (g.runq.empty()) fail("deadlock: no thread can run");
  }
  CUDASIM_EVENT(block_end());
  if (tracing.block) trace::block_end();
  // A cluster's block was poisoned when its last thread ended (thread_ended): a byte that is not poison now was
  // written after that, by another block, into memory that was gone.
  for (unsigned r = 0; r < ranks && ranks > 1; ++r) {
    const long long i = first_unpoisoned(r);
    if (i < 0) continue;
    g.cur = nullptr;
    g.block_idx = g.cta_idx[r];
    char buf[300];
    std::snprintf(buf, sizeof buf, "shared memory byte 0x%llx of the cluster's block of rank %u was written after all "
                  "of that block's threads had exited: a block's shared memory goes with it, so the cluster must "
                  "synchronise (barrier.cluster, cluster.sync()) before a block that others write exits",
                  static_cast<unsigned long long>(r * kCtaStride + i), r);
    fail(buf);
  }
  for (unsigned r = 0; r < ranks; ++r) {
    const unsigned char* base = arena + r * kCtaStride;
    for (size_t i = 0; i < kCanary; ++i)
      if (base[g.dyn_bytes + i] != kPoison) {
        if (ranks > 1) g.block_idx = g.cta_idx[r];
        char buf[200];
        std::snprintf(buf, sizeof buf, "a write past the end of dynamic shared memory (%zu bytes requested at "
                      "launch) at byte %zu", g.dyn_bytes, g.dyn_bytes + i);
        fail(buf);
      }
  }
  for (auto check : block_end_checks) check();
}

template <class Body>
CUDASIM_INTERNAL inline void body_trampoline(void* ctx) { (*static_cast<Body*>(ctx))(); }

// The learner's kernel, called from the simulator's (uninstrumented) launch code through a function that is
// never inlined: clang would otherwise inline a small kernel into its uninstrumented caller, and an
// instrumented build would see none of its accesses (gcc refuses to inline across the attribute).
template <class Call, class Params>
__attribute__((noinline)) void run_kernel_body(Call& call, Params& params) { std::apply(call, params); }

inline pthread_mutex_t launch_mutex = PTHREAD_MUTEX_INITIALIZER;
struct LaunchLock {
  LaunchLock() { pthread_mutex_lock(&launch_mutex); }
  ~LaunchLock() { pthread_mutex_unlock(&launch_mutex); }
  LaunchLock(const LaunchLock&) = delete;
  LaunchLock& operator=(const LaunchLock&) = delete;
};

// Fiber stacks kept from one launch to the next: those of a block's first kPooledStacks threads. Each stack is two
// mappings (its guard and itself), and every extension a process loads keeps a pool of its own: kept for all 384 or
// 512 threads of a Hopper kernel's block, a test process that had loaded some eighty extensions passed Linux's limit
// of 65530 mappings (vm.max_map_count), and the next mapping, a stack or a cudaMalloc, failed. The rest are mapped
// again by the next launch that needs them (three system calls a thread).
constexpr size_t kPooledStacks = 128;
CUDASIM_RT void release_spare_stacks() {
  for (size_t i = kPooledStacks; i < g.threads.size(); ++i) {
    Thread& t = g.threads[i];
    if (t.stack) munmap(t.stack, kGuardBytes + t.stack_size);
    t.stack = nullptr;
  }
}

// Run a whole grid now (launches are synchronous here) and record errors as CUDA does. `body(body_ctx)` runs
// the kernel as the current thread.
CUDASIM_RT void run_grid(const char* kernel, const char* file, int line, const Config& c, void (*body)(void*),
                         void* body_ctx) {
  // An earlier launch's unread error stays until cudaGetLastError reads it, as in CUDA.
  const dim3 gr = c.grid, bl = c.block;
  unsigned long long threads = 1ull * bl.x * bl.y * bl.z;
  // An empty or too large grid or block, or too much dynamic shared memory: CUDA 13 reports each
  // as cudaErrorInvalidValue, "invalid argument" (measured on an H100; older releases said
  // "invalid configuration argument" for the grid and block shapes).
  if (c.bad_grid || gr.x == 0 || gr.y == 0 || gr.z == 0 || threads == 0 || gr.x > 0x7FFFFFFFu ||
      gr.y > 65535 || gr.z > 65535 || bl.x > 1024 || bl.y > 1024 || bl.z > 64 || threads > 1024) {
    record(cudaErrorInvalidValue);
    return;
  }
  int opt = opt_in_limit(kernel);
  size_t dyn_limit = opt >= 0 ? static_cast<size_t>(opt) : kStaticSharedLimit;
  if (c.smem > dyn_limit || c.smem > kOptinSharedLimit) {
    record(cudaErrorInvalidValue);
    return;
  }
  if (g.running && pthread_equal(g.launch_thread, pthread_self()))
    fail("a kernel launched another kernel (dynamic parallelism is not simulated)");
  // A launch from another host thread (the CUDA samples' simpleCallback launches from worker threads) waits for the
  // one running: the simulator is one device, and runs one grid at a time.
  LaunchLock launch_lock;
  g.launch_thread = pthread_self();
  dim3 cl;
  if (!cluster_of(kernel, c, cl)) {
    record(cudaErrorInvalidClusterSize);
    return;
  }
  const unsigned cluster = cl.x * cl.y * cl.z;
  if (cluster > 1) {
    const std::string at = " (the launch of " + strip_name(kernel) + " at " + base_name(file) + ":" +
                           std::to_string(line) + ")";
#ifdef CUDASIM_INSTRUMENTED
    throw std::runtime_error("cudasim: the race and bounds check and the access profiler do not run thread-block "
                             "cluster launches yet" + at + "; run the plain simulator build");
#endif
    if (tracing.blocks)
      throw std::runtime_error("cudasim: the mbarrier trace does not record thread-block cluster launches yet" + at);
    if (g.file_static_used || g.file_dynamic_declared)
      throw std::runtime_error("cudasim: a cluster launch in a file with file-scope __shared__ declarations" + at +
                               ": the simulator binds those to one block's memory; declare them inside the kernel");
  }
  read_knobs();
  g.kernel = kernel;
  g.launch_file = file;
  g.launch_line = line;
  g.grid_dim = gr;
  g.block_dim = bl;
  g.cluster_dim = cl;
  g.cta_threads = static_cast<int>(threads);
  // a block's slots start at a multiple of 512: no warp, warpgroup or tile of up to 512 threads spans two blocks
  g.cta_stride = cluster > 1 ? static_cast<int>((threads + 511) / 512 * 512) : g.cta_threads;
  g.nthreads = g.cta_stride * static_cast<int>(cluster);
  const size_t slots = static_cast<size_t>(g.nthreads);
  if (g.threads.size() < slots) g.threads.resize(slots);
  // threads beyond this launch's block may be left mid-way by an earlier launch that failed: the
  // scheduler's loops over g.threads must see them as finished
  for (size_t i = slots; i < g.threads.size(); ++i) g.threads[i].state = State::Done;
  g.dyn_bytes = (c.smem + 15) / 16 * 16;
  g.static_base = (g.dyn_bytes + kCanary + 127) / 128 * 128;
  g.static_limit = opt >= 0 ? std::max<size_t>(kStaticSharedLimit, static_cast<size_t>(opt))
                            : kStaticSharedLimit;
  g.smem = arena;
  if (g.file_static_overflow || g.file_static_used > g.static_limit) {
    char buf[400];
    std::snprintf(buf, sizeof buf, "static __shared__ memory exceeds the limit: the file-scope __shared__ "
                  "variables need more than the limit of %zu bytes%s%s%s", g.static_limit,
                  g.file_static_overflow ? " ('" : "", g.file_static_overflow ? g.file_static_overflow : "",
                  g.file_static_overflow ? "' does not fit)" : "");
    fail(buf);
  }
  g.cluster_size = cluster;  // after the checks above, which fail outside the launch's clean-up
  g.body = body;
  g.body_ctx = body_ctx;
  g.error = nullptr;
  g.idle_yields = 0;
  g.running = true;
  g.fail_code = cudaSuccess;
  std::vector<unsigned long long> blocks;
  const dim3 cg(gr.x / cl.x, gr.y / cl.y, gr.z / cl.z);  // the grid of clusters (of blocks without clusters)
  unsigned long long nblocks = 1ull * cg.x * cg.y * cg.z;
  if (g.shuffle_blocks) {
    blocks.resize(nblocks);
    for (unsigned long long i = 0; i < nblocks; ++i) blocks[i] = i;
    std::shuffle(blocks.begin(), blocks.end(), g.rng);
  }
  install_fault_guard();
  try {
    CUDASIM_EVENT(launch_begin());
    if (tracing.blocks) trace::launch();
    for (unsigned long long b = 0; b < nblocks; ++b) {
      unsigned long long lin = g.shuffle_blocks ? blocks[b] : b;
      run_block(static_cast<unsigned>(lin % cg.x) * cl.x, static_cast<unsigned>((lin / cg.x) % cg.y) * cl.y,
                static_cast<unsigned>(lin / (1ull * cg.x * cg.y)) * cl.z);
      if (g.error) break;
    }
    if (!g.error) CUDASIM_EVENT(launch_end());
  } catch (...) {
    remove_fault_guard();
    release_spare_stacks();
    g.running = false;
    g.cur = nullptr;
    g.cluster_size = 1;
    throw;
  }
  remove_fault_guard();
  release_spare_stacks();
  g.running = false;
  g.cur = nullptr;
  g.cluster_size = 1;
  std::fflush(stdout);  // kernel printf shows up by the time the launch returns, as after a sync
  if (g.error) {
    std::exception_ptr e = g.error;
    g.error = nullptr;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::string msg = ex.what();
      if (msg.rfind("cudasim:", 0) == 0) throw;  // already says where
      throw std::runtime_error("cudasim: exception in kernel " + std::string(kernel) + ": " + msg);
    }
  }
}

// A launch: the parameters copied once here (each thread copies them again), the grid run by run_grid, which
// every launch shares (compiled once, in the runtime object when there is one).
// Whether this process is a whole program (nvcc-sim's, no Python in it) rather than an extension loaded by Python.
CUDASIM_RT bool in_program() {
  static const bool program = dlsym(RTLD_DEFAULT, "Py_IsInitialized") == nullptr;
  return program;
}

// A kernel that failed (an illegal memory access, a device-side assert, __trap(), a deadlock, ...). Loaded by Python the
// error is raised where the launch is (a RuntimeError that says what and where). In a whole program it becomes what CUDA
// gives a program: the message goes to stderr, and the launch's error is sticky (cudaDeviceSynchronize, cudaMemcpy,
// cudaGetLastError and every later call return it, and no later kernel runs), so that a program's own error checks
// see it: the CUDA samples' simpleAssert expects cudaErrorAssert from its synchronisation.
CUDASIM_RT void kernel_failed(const char* what) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", what);
  // "unspecified launch failure" (as after __trap()) unless the failure named its error where it was found
  cudaError_t e = g.fail_code != cudaSuccess ? g.fail_code : cudaErrorLaunchFailure;
  g.sticky_error = e;
  g.last_error = e;
}

// The error a call returns once a kernel has failed in a whole program, or cudaSuccess.
inline cudaError_t sticky() {
  if (g.sticky_error != cudaSuccess) g.last_error = g.sticky_error;
  return g.sticky_error;
}

template <class K, class... Args>
CUDASIM_INTERNAL void launch(const char* kernel, const char* file, int line, const Config& c, K&& call, Args&&... args) {
  if (sticky() != cudaSuccess) return;  // the context is lost: nothing more runs
  auto packed = std::make_tuple(std::decay_t<Args>(args)...);
  auto body = [&]() CUDASIM_INTERNAL {
    SimScope scope;      // copying the parameters is the simulator's work
    auto mine = packed;  // every thread gets its own copy of the parameters, as on the GPU
    scope.end();         // the kernel is the learner's
    run_kernel_body(call, mine);
  };
  try {
    run_grid(kernel, file, line, c, &body_trampoline<decltype(body)>, &body);
  } catch (const std::runtime_error& e) {
    if (!in_program()) throw;
    kernel_failed(e.what());
  }
}

CUDASIM_RT cudaError_t func_set_attribute(const char* name, int attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) > kOptinSharedLimit) return record(cudaErrorInvalidValue);
    std::string k = strip_name(name);
    for (auto& e : g.max_dynamic_smem)
      if (e.first == k) { e.second = value; return cudaSuccess; }
    g.max_dynamic_smem.emplace_back(k, value);
  }
  if (attr == cudaFuncAttributeNonPortableClusterSizeAllowed) {
    std::string k = strip_name(name);
    for (auto& e : g.non_portable)
      if (e.first == k) { e.second = value; return cudaSuccess; }
    g.non_portable.emplace_back(k, value);
  }
  return cudaSuccess;
}

// `text` is the macro's whole argument list as written; the kernel's name is what precedes
// the last two top-level commas.
template <class F>
CUDASIM_INTERNAL inline cudaError_t func_set_attribute_(const char* text, F&&, cudaFuncAttribute attr, int value) {
  std::string all = text;
  int depth = 0, commas = 0;
  size_t cut = all.size();
  for (size_t i = all.size(); i-- > 0;) {
    char ch = all[i];
    if (ch == ')' || ch == '>' || ch == ']') ++depth;
    else if (ch == '(' || ch == '<' || ch == '[') --depth;
    else if (ch == ',' && depth == 0 && ++commas == 2) { cut = i; break; }
  }
  return func_set_attribute(all.substr(0, cut).c_str(), attr, value);
}

// Reinterpret helpers for warp operations on any 1- to 16-byte value.
template <class T>
CUDASIM_INTERNAL inline T shuffle(WarpOp op, unsigned mask, T var, int arg, int width, const char* file, int line) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>, "shuffles move values of at most 16 bytes");
  warp_op(op, mask, &var, sizeof(T), arg, width, file, line);
  T out;
  std::memcpy(&out, g.cur->wout, sizeof(T));
  return out;
}

}  // namespace cudasim

// ---------------------------------------------------------------------------------------------
// Built-in variables.
// Real names, not macros, so that host code may declare its own (`dim3 gridDim(...)`, a parameter
// named blockDim). Each is a constant reference to the runtime's copy: threadIdx reads a value
// that the scheduler refreshes at every switch to a fiber, so `threadIdx.x` is one load.
inline constexpr const uint3& threadIdx = ::cudasim::g.thread_idx;
inline constexpr const uint3& blockIdx = ::cudasim::g.block_idx;
inline constexpr const dim3& blockDim = ::cudasim::g.block_dim;
inline constexpr const dim3& gridDim = ::cudasim::g.grid_dim;
constexpr int warpSize = 32;

// Barriers and warp operations carry their source line for error messages.
#define __syncthreads() ::cudasim::barrier(::cudasim::BarKind::Plain, 0, __FILE__, __LINE__, __COUNTER__)
#define __syncthreads_count(p) ::cudasim::barrier(::cudasim::BarKind::Count, (p) != 0, __FILE__, __LINE__, __COUNTER__)
#define __syncthreads_and(p) ::cudasim::barrier(::cudasim::BarKind::And, (p) != 0, __FILE__, __LINE__, __COUNTER__)
#define __syncthreads_or(p) ::cudasim::barrier(::cudasim::BarKind::Or, (p) != 0, __FILE__, __LINE__, __COUNTER__)
// A functor, not `, ##__VA_ARGS__`: in strict -std=c++17 GCC keeps that comma for `__syncwarp()`.
#define __syncwarp(...) ::cudasim::SyncwarpAt{__FILE__, __LINE__}(__VA_ARGS__)
#define __shfl_sync(m, v, s, ...) ::cudasim::shfl_(::cudasim::WarpOp::ShflIdx, m, v, s, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_up_sync(m, v, d, ...) ::cudasim::shfl_(::cudasim::WarpOp::ShflUp, m, v, d, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_down_sync(m, v, d, ...) ::cudasim::shfl_(::cudasim::WarpOp::ShflDown, m, v, d, __FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_xor_sync(m, v, d, ...) ::cudasim::shfl_(::cudasim::WarpOp::ShflXor, m, v, d, __FILE__, __LINE__, ##__VA_ARGS__)
#define __ballot_sync(m, p) static_cast<unsigned>(::cudasim::vote_(::cudasim::WarpOp::Ballot, m, p, __FILE__, __LINE__))
#define __any_sync(m, p) static_cast<int>(::cudasim::vote_(::cudasim::WarpOp::Any, m, p, __FILE__, __LINE__))
#define __all_sync(m, p) static_cast<int>(::cudasim::vote_(::cudasim::WarpOp::All, m, p, __FILE__, __LINE__))
#define __reduce_add_sync(m, v) ::cudasim::reduce_(::cudasim::WarpOp::ReduceAdd, m, v, __FILE__, __LINE__)
#define __reduce_min_sync(m, v) ::cudasim::reduce_(::cudasim::WarpOp::ReduceMin, m, v, __FILE__, __LINE__)
#define __reduce_max_sync(m, v) ::cudasim::reduce_(::cudasim::WarpOp::ReduceMax, m, v, __FILE__, __LINE__)
#define __reduce_and_sync(m, v) ::cudasim::reduce_(::cudasim::WarpOp::ReduceAnd, m, v, __FILE__, __LINE__)
#define __reduce_or_sync(m, v) ::cudasim::reduce_(::cudasim::WarpOp::ReduceOr, m, v, __FILE__, __LINE__)
#define __reduce_xor_sync(m, v) ::cudasim::reduce_(::cudasim::WarpOp::ReduceXor, m, v, __FILE__, __LINE__)
// Variadic: a template kernel's name such as k<float, 256> holds commas.
#define cudaFuncSetAttribute(...) ::cudasim::func_set_attribute_(#__VA_ARGS__, __VA_ARGS__)

namespace cudasim {
struct SyncwarpAt {
  const char* file;
  int line;
  CUDASIM_INTERNAL void operator()(unsigned mask = 0xffffffffu) const { warp_op(WarpOp::Sync, mask, nullptr, 0, 0, 32, file, line); }
};
// The shuffles take exactly the types CUDA's overloads take (int, unsigned, long, unsigned long, long
// long, unsigned long long, float, double here; __half, __half2, __nv_bfloat16 and __nv_bfloat162 in
// cuda_fp16.h and cuda_bf16.h), so a short converts to int as under nvcc and a struct is refused as
// nvcc refuses it. (A cooperative-groups tile's shfl takes any value up to 32 bytes, as CUDA's does.)
#define CUDASIM_SHFL(T)                                                                                   \
  CUDASIM_INTERNAL inline T shfl_(WarpOp op, unsigned mask, T var, int arg, const char* file, int line,   \
                                  int width = 32) {                                                       \
    return shuffle<T>(op, mask, var, arg, width, file, line);                                             \
  }
CUDASIM_SHFL(int)
CUDASIM_SHFL(unsigned int)
CUDASIM_SHFL(long)
CUDASIM_SHFL(unsigned long)
CUDASIM_SHFL(long long)
CUDASIM_SHFL(unsigned long long)
CUDASIM_SHFL(float)
CUDASIM_SHFL(double)
// Classes that CUDA's headers give shuffle overloads (cuda_fp16.h and cuda_bf16.h say which).
template <class T>
inline constexpr bool shuffle_class = false;
template <class T, std::enable_if_t<std::is_class_v<T> && !shuffle_class<T>, int> = 0>
inline T shfl_(WarpOp, unsigned, T var, int, const char*, int, int = 32) {
  static_assert(!sizeof(T*), "__shfl*_sync takes int, unsigned, long, long long, their unsigned forms, float, double, "
                "__half, __half2, __nv_bfloat16 or __nv_bfloat162, as CUDA's overloads do (nvcc refuses a struct): "
                "shuffle its members one by one, or use a cooperative-groups tile's shfl");
  return var;
}
template <class T, std::enable_if_t<shuffle_class<T>, int> = 0>
CUDASIM_INTERNAL inline T shfl_(WarpOp op, unsigned mask, T var, int arg, const char* file, int line, int width = 32) {
  return shuffle<T>(op, mask, var, arg, width, file, line);
}
CUDASIM_RT unsigned long long vote_(WarpOp op, unsigned mask, int pred, const char* file, int line) {
  warp_op(op, mask, nullptr, 0, pred != 0, 32, file, line);
  return g.cur->wres;
}
// __reduce_*_sync: CUDA's overloads take int and unsigned (a short converts, a long is ambiguous, as
// under nvcc); a class is refused with a message.
template <class T>
CUDASIM_INTERNAL inline T reduce_any(WarpOp op, unsigned mask, T v, const char* file, int line) {
  if constexpr (std::is_unsigned_v<T>) {
    if (op == WarpOp::ReduceMin) op = WarpOp::ReduceUMin;
    if (op == WarpOp::ReduceMax) op = WarpOp::ReduceUMax;
  }
  warp_op(op, mask, nullptr, 0, static_cast<int>(v), 32, file, line);
  return static_cast<T>(g.cur->wres);
}
CUDASIM_RT int reduce_(WarpOp op, unsigned mask, int v, const char* file, int line) {
  return reduce_any(op, mask, v, file, line);
}
CUDASIM_RT unsigned reduce_(WarpOp op, unsigned mask, unsigned v, const char* file, int line) {
  return reduce_any(op, mask, v, file, line);
}
template <class T, std::enable_if_t<std::is_class_v<T>, int> = 0>
inline T reduce_(WarpOp, unsigned, T v, const char*, int) {
  static_assert(!sizeof(T*), "__reduce_*_sync takes int or unsigned, as CUDA's overloads do");
  return v;
}
}  // namespace cudasim

// An approximation (see the README): the lanes of the warp that reach this same __activemask
// call before the block can make no other progress.
#define __activemask() static_cast<unsigned>(::cudasim::activemask_(__FILE__, __LINE__))
namespace cudasim {
CUDASIM_RT unsigned long long activemask_(const char* file, int line) {
  warp_op(WarpOp::Active, 0xffffffffu, nullptr, 0, 0, 32, file, line);
  return g.cur->wres;
}
}  // namespace cudasim
CUDASIM_INTERNAL inline unsigned __lanemask_lt() { return (1u << (::cudasim::lane_id())) - 1u; }

// Fences order nothing in one process here (the threads see each other's stores at once), but between processes the
// race check's model of peer memory follows the system-scope ones (cudasim_peers.h): a release before a signal, an
// acquire after a wait. __threadfence() is noted too, to say so when it was used where that needed the system scope.
CUDASIM_INTERNAL inline void __threadfence() { CUDASIM_EVENT(fence(false)); }
inline void __threadfence_block() {}
CUDASIM_INTERNAL inline void __threadfence_system() { CUDASIM_EVENT(fence(true)); }
CUDASIM_INTERNAL inline void __nanosleep(unsigned) { ::cudasim::yield_thread(); }
CUDASIM_RT long long clock64() { return ::cudasim::g.clock += 1; }

// ---------------------------------------------------------------------------------------------
// Atomics: fibers never switch inside one, so a plain read-modify-write is atomic here.
// Each takes exactly the types CUDA has it for, so code that nvcc rejects (atomicMax on a
// float, atomicAdd on a long) fails to compile here too, with a hint.
// An atomic that leaves memory as it was (a failed atomicCAS, atomicAdd(p, 0), a spin lock's
// atomicExch(p, 1) on a taken lock) may be a thread polling for another: repeated at one address,
// it lets the others run (cudasim::atomic_done). A poll on a plain volatile load cannot be seen
// and spins forever.
namespace cudasim {
template <class T, class... Ts>
inline constexpr bool one_of = (std::is_same_v<T, Ts> || ...);

// atomicAdd's sum. On a float in global memory a GPU adds with RED/ATOM .ADD.F32.FTZ (the PTX ISA: atom.add.f32 on
// global memory flushes subnormal inputs and results to sign-preserving zero): a subnormal operand, a subnormal value
// in memory and a subnormal sum count as a zero of their sign (an H200 gives 0 for 0 + 1e-40 there, float2's
// REDG .ADD.F32x2.FTZ likewise); the old value returned is memory's, unflushed. In shared memory (a compare-and-swap
// loop around an ordinary add), in double and in the 1-D bulk reductions (cudasim_ptx/async.h) subnormals stay, as
// they do on the GPU.
CUDASIM_INTERNAL inline float flush_subnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
template <class T>
CUDASIM_INTERNAL inline T atomic_sum(const T* p, T old, T v) {
  if constexpr (std::is_same_v<T, float>) {
    if (!in_arena(p)) return flush_subnormal(flush_subnormal(old) + flush_subnormal(v));
  }
  return old + v;
}
}  // namespace cudasim
// Each takes the caller's file and line (defaulted, never passed: __builtin_FILE() and __builtin_LINE() are the
// call's), which a poll of another process's memory names when it waits too long (cudasim::peer_poll).
#define CUDASIM_ATOMIC(name, expr, ok, types)                                                  \
  template <class T, class U>                                                                  \
  CUDASIM_INTERNAL inline T name(T* p, U v_, const char* file_ = __builtin_FILE(),             \
                                 int line_ = __builtin_LINE()) {                               \
    static_assert(ok, #name " takes " types " (as in CUDA; see kernels/sim/README.md)");      \
    CUDASIM_EVENT(atomic_access(p, sizeof(T), __builtin_return_address(0)));                  \
    ::cudasim::SimScope scope_;                                                                \
    T v = static_cast<T>(v_);                                                                  \
    T old = *p;                                                                                \
    *p = (expr);                                                                               \
    ::cudasim::atomic_done(p, old, *p, #name, file_, line_);                                   \
    return old;                                                                                \
  }                                                                                            \
  template <class T, class U>                                                                  \
  __attribute__((always_inline)) inline T name##_block(T* p, U v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { \
    return name(p, v, f, l);                                                                   \
  }                                                                                            \
  template <class T, class U>                                                                  \
  __attribute__((always_inline)) inline T name##_system(T* p, U v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) { \
    return name(p, v, f, l);                                                                   \
  }
#define CUDASIM_INTS ::cudasim::one_of<T, int, unsigned int, unsigned long long>
CUDASIM_ATOMIC(atomicAdd, ::cudasim::atomic_sum(p, old, v), (CUDASIM_INTS || ::cudasim::one_of<T, float, double>),
               "int, unsigned int, unsigned long long, float or double")
CUDASIM_ATOMIC(atomicSub, old - v, (::cudasim::one_of<T, int, unsigned int>), "int or unsigned int")
CUDASIM_ATOMIC(atomicExch, v, (CUDASIM_INTS || ::cudasim::one_of<T, float>),
               "int, unsigned int, unsigned long long or float")
CUDASIM_ATOMIC(atomicMax, (old < v ? v : old), (CUDASIM_INTS || ::cudasim::one_of<T, long long>),
               "int, unsigned int, long long or unsigned long long; for a float use an atomicCAS loop")
CUDASIM_ATOMIC(atomicMin, (v < old ? v : old), (CUDASIM_INTS || ::cudasim::one_of<T, long long>),
               "int, unsigned int, long long or unsigned long long; for a float use an atomicCAS loop")
CUDASIM_ATOMIC(atomicAnd, old & v, CUDASIM_INTS, "int, unsigned int or unsigned long long")
CUDASIM_ATOMIC(atomicOr, old | v, CUDASIM_INTS, "int, unsigned int or unsigned long long")
CUDASIM_ATOMIC(atomicXor, old ^ v, CUDASIM_INTS, "int, unsigned int or unsigned long long")
#undef CUDASIM_ATOMIC
#undef CUDASIM_INTS
// The vector forms of compute capability 9.0 (global memory): each element added atomically on its own, as there
// (CUDA does not make the vector one atomic either). Non-templates: they win over the template above.
#define CUDASIM_VECTOR_ADD(suffix)                                                                                 \
  CUDASIM_INTERNAL inline float2 atomicAdd##suffix(float2* p, float2 v) {                                         \
    return make_float2(atomicAdd(&p->x, v.x), atomicAdd(&p->y, v.y));                                             \
  }                                                                                                               \
  CUDASIM_INTERNAL inline float4 atomicAdd##suffix(float4* p, float4 v) {                                         \
    return make_float4(atomicAdd(&p->x, v.x), atomicAdd(&p->y, v.y), atomicAdd(&p->z, v.z), atomicAdd(&p->w, v.w)); \
  }
CUDASIM_VECTOR_ADD()
CUDASIM_VECTOR_ADD(_block)
CUDASIM_VECTOR_ADD(_system)
#undef CUDASIM_VECTOR_ADD
CUDASIM_RT unsigned atomicInc(unsigned* p, unsigned v) {
  CUDASIM_EVENT(atomic_access(p, sizeof *p, __builtin_return_address(0)));
  ::cudasim::SimScope scope;
  unsigned o = *p;
  *p = (o >= v) ? 0 : o + 1;
  ::cudasim::atomic_done(p, o, *p);
  return o;
}
CUDASIM_RT unsigned atomicDec(unsigned* p, unsigned v) {
  CUDASIM_EVENT(atomic_access(p, sizeof *p, __builtin_return_address(0)));
  ::cudasim::SimScope scope;
  unsigned o = *p;
  *p = (o == 0 || o > v) ? v : o - 1;
  ::cudasim::atomic_done(p, o, *p);
  return o;
}
// Their scoped forms (the CUDA samples' systemWideAtomics uses the _system ones): one memory here, the same operation.
__attribute__((always_inline)) inline unsigned atomicInc_block(unsigned* p, unsigned v) { return atomicInc(p, v); }
__attribute__((always_inline)) inline unsigned atomicInc_system(unsigned* p, unsigned v) { return atomicInc(p, v); }
__attribute__((always_inline)) inline unsigned atomicDec_block(unsigned* p, unsigned v) { return atomicDec(p, v); }
__attribute__((always_inline)) inline unsigned atomicDec_system(unsigned* p, unsigned v) { return atomicDec(p, v); }
template <class T, class U, class V>
CUDASIM_INTERNAL inline T atomicCAS(T* p, U compare_, V val_, const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  static_assert(::cudasim::one_of<T, int, unsigned int, unsigned long long, unsigned short>,
                "atomicCAS takes int, unsigned int, unsigned long long or unsigned short (as in CUDA)");
  CUDASIM_EVENT(atomic_access(p, sizeof(T), __builtin_return_address(0)));
  ::cudasim::SimScope scope;
  T compare = static_cast<T>(compare_), val = static_cast<T>(val_);
  T old = *p;
  if (old == compare) *p = val;
  ::cudasim::atomic_done(p, old, *p, "atomicCAS", file, line, &compare);  // a failed swap, repeated, is a poll
  return old;
}
// The scoped forms: one memory here, so the same operation (the race check's model of peer memory reads the
// system-scope fences around them, not the scope of the atomic).
template <class T, class U, class V>
__attribute__((always_inline)) inline T atomicCAS_block(T* p, U c, V v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return atomicCAS(p, c, v, f, l);
}
template <class T, class U, class V>
__attribute__((always_inline)) inline T atomicCAS_system(T* p, U c, V v, const char* f = __builtin_FILE(), int l = __builtin_LINE()) {
  return atomicCAS(p, c, v, f, l);
}

// ---------------------------------------------------------------------------------------------
// Math: the float library comes from <math.h>; these are CUDA's intrinsics and extras.
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
#if !defined(__APPLE__)  // macOS's <math.h> defines the same function (one call, both results)
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
#endif
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float v) { int i; std::memcpy(&i, &v, 4); return i; }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float v) { unsigned i; std::memcpy(&i, &v, 4); return i; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double v) { long long i; std::memcpy(&i, &v, 8); return i; }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((1ull * a * b) >> 32); }
inline int __mulhi(int a, int b) { return static_cast<int>((1ll * a * b) >> 32); }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
// The stores take T from the pointer alone and convert the value to it, as CUDA's overloads for each type do
// (__stwt(bf16_ptr, 1.0f)): where the value named T too, a value of another type would fail to compile.
namespace cudasim {
template <class T> struct type_identity { using type = T; };  // C++20's std::type_identity; sim builds may be C++17
}  // namespace cudasim
template <class T> inline void __stcg(T* p, typename ::cudasim::type_identity<T>::type v) { *p = v; }
template <class T> inline void __stcs(T* p, typename ::cudasim::type_identity<T>::type v) { *p = v; }
template <class T> inline void __stwt(T* p, typename ::cudasim::type_identity<T>::type v) { *p = v; }

// CUDA's min/max overloads for integers and floats (the device math library has these).
#define CUDASIM_MINMAX(T)                                           \
  inline T min(T a, T b) { return b < a ? b : a; }                  \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDASIM_MINMAX(int)
CUDASIM_MINMAX(unsigned int)
CUDASIM_MINMAX(long)
CUDASIM_MINMAX(unsigned long)
CUDASIM_MINMAX(long long)
CUDASIM_MINMAX(unsigned long long)
#undef CUDASIM_MINMAX
// Mixed signedness, as CUDA's math headers have it: the result is unsigned (min(n, blockDim.x)).
#define CUDASIM_MINMAX_MIXED(S, U)                                                    \
  inline U min(S a, U b) { return min(static_cast<U>(a), b); }                       \
  inline U min(U a, S b) { return min(a, static_cast<U>(b)); }                       \
  inline U max(S a, U b) { return max(static_cast<U>(a), b); }                       \
  inline U max(U a, S b) { return max(a, static_cast<U>(b)); }
CUDASIM_MINMAX_MIXED(int, unsigned int)
CUDASIM_MINMAX_MIXED(long, unsigned long)
CUDASIM_MINMAX_MIXED(long long, unsigned long long)
#undef CUDASIM_MINMAX_MIXED
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

// ---------------------------------------------------------------------------------------------
// The host API subset.
inline cudaError_t cudaGetLastError() {
  cudaError_t e = ::cudasim::g.last_error;
  ::cudasim::g.last_error = ::cudasim::g.sticky_error;  // a lost context's error stays
  return e;
}
inline cudaError_t cudaPeekAtLastError() { return ::cudasim::g.last_error; }
inline cudaError_t cudaDeviceSynchronize() { return ::cudasim::sticky(); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return ::cudasim::sticky(); }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }

inline cudaError_t cudaMalloc(void** p, size_t n) {
  if (cudaError_t lost = ::cudasim::sticky()) return lost;
  *p = ::cudasim::device_malloc(n);
  if (!*p) return ::cudasim::record(cudaErrorMemoryAllocation);
  CUDASIM_EVENT(device_alloc(*p, n));  // memory a kernel may use (the bounds check)
  return cudaSuccess;
}
template <class T> inline cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc(reinterpret_cast<void**>(p), n); }
inline cudaError_t cudaFree(void* p) {
  if (cudaError_t lost = ::cudasim::sticky()) return lost;
  if (!p) return cudaSuccess;  // as CUDA: freeing nullptr does nothing
  if (!::cudasim::device_release(p)) return ::cudasim::record(cudaErrorInvalidValue);
  CUDASIM_EVENT(device_free(p));
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  if (cudaError_t lost = ::cudasim::sticky()) return lost;
  if (::cudasim::device_range_overruns("cudaMemcpy's destination", d, n) ||
      ::cudasim::device_range_overruns("cudaMemcpy's source", s, n))
    return ::cudasim::record(cudaErrorInvalidValue);
  std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t = nullptr) {
  return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
  if (cudaError_t lost = ::cudasim::sticky()) return lost;
  if (::cudasim::device_range_overruns("cudaMemset", d, n)) return ::cudasim::record(cudaErrorInvalidValue);
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t = nullptr) { return cudaMemset(d, v, n); }
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T& sym, const void* src, size_t n, size_t off = 0,
                                      cudaMemcpyKind = cudaMemcpyHostToDevice) {
  std::memcpy(reinterpret_cast<char*>(&sym) + off, src, n);
  return cudaSuccess;
}

#include "cudasim_runtime.h"  // the rest of the runtime API: devices, streams, events, host memory, ...
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include "cudasim_torch.h"

#ifdef CUDASIM_INSTRUMENTED
#include "cudasim_instrument.h"  // an instrumented build: the profiler's and the race and bounds check's hooks
#endif
