// cuemu.h — CUDA C++ kernels compiled by the host compiler and executed on the CPU, for tests.
//
// A .cu file goes through cu2cuemu.py (launches `k<<<g, b, smem, s>>>(args)` become
// `::cuemu::Config(g, b, smem, s).launch<k>("k", args)`, `__shared__` declarations become
// per-block storage poisoned with 0xFF bytes at the start of every block) and is then compiled as
// C++ with this header first. Host code (.cpp) compiles unchanged against the toolkit's headers and
// links cuemu_api.cpp (the CUDA runtime API), cuemu_runtime.cpp (its execution engine) and
// cublas_shim.cpp instead of cudart/cuBLAS.
//
// Execution model (cuemu_runtime.cpp): every CUDA thread is a fiber (Boost.Context fcontext); the
// threads of a block run on one OS thread until they block at __syncthreads or a warp collective,
// in the order CUEMU_ORDER selects (forward, reverse, or shuffle[:seed] — a new seeded permutation
// of the block's threads at every scheduling round, and of the grid's blocks). Warps are 32 wide;
// a warp collective waits for exactly the lanes of its mask and aborts when a lane named in it has
// exited or waits at a different collective; __syncthreads aborts unless every thread of the
// block waits at the same barrier. Streams, events and copies execute in host-call order (a legal
// CUDA schedule), and every device access is checked against the streams' ordering: an access to
// an allocation that another stream wrote (or read, for a write), with no event wait or host
// synchronization in between, aborts naming both (a missing cudaStreamWaitEvent on a GPU).
// Device allocations end at a guard page with canaries before and after; a
// kernel that writes outside an allocation is named when its launch returns.
#pragma once

#define CUEMU 1  // code built for the emulation (tests only: kernels never test it)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __align__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
// Only for headers the rewriter does not see: no per-block poisoning there.
#define __shared__ static thread_local
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

namespace cuemu {

inline constexpr int kWarp = 32;
enum WarpOp : int { kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kSyncWarp };

// Per OS thread: the thread being executed (fibers switch these).
extern thread_local uint3 t_threadIdx, t_blockIdx;
extern thread_local dim3 t_blockDim, t_gridDim;

// Launch: validates the configuration (an invalid one sets the last error and runs nothing),
// records `name` / `signature` in the coverage file, and runs body() once per CUDA thread.
// `args`/`args_bytes`: the packed kernel arguments, scanned for device pointers (stream-order check).
cudaError_t launch(dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, const char* name,
                   const char* signature, const void* args, size_t args_bytes, std::function<void()> body);

// Device-side hooks, valid only inside a kernel.
uint64_t warp_op(unsigned mask, int op, uint64_t in, int arg, int width);
uint64_t block_barrier(uint64_t predicate, const char* file, int line);
void* dynamic_smem();
void poison_shared(void* p, size_t bytes, unsigned long long* epoch);  // once per block per variable
[[noreturn]] void device_fail(const char* message);

template <auto K>
const char* kernel_signature() {
  return __PRETTY_FUNCTION__;  // "... [with auto K = kernel<args>]"
}

template <class... P, class... A>
std::tuple<std::decay_t<P>...> pack_args(void (*)(P...), A&&... a) {
  return std::tuple<std::decay_t<P>...>(std::forward<A>(a)...);
}

struct Config {
  dim3 g, b;
  size_t shm;
  cudaStream_t s;
  Config(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = nullptr)
      : g(grid), b(block), shm(smem), s(stream) {}
  // Arguments convert to the kernel's parameter types at the launch, as with <<<>>>; every thread
  // gets its own copy of the parameters.
  template <auto K, class... A>
  void launch(const char* name, A&&... a) const {
    auto args = pack_args(K, std::forward<A>(a)...);
    ::cuemu::launch(g, b, shm, s, name, kernel_signature<K>(), &args, sizeof(args), [args]() mutable {
      auto copy = args;
      std::apply(K, copy);
    });
  }
};

template <class T>
T shfl(unsigned mask, T v, int op, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type wider than 8 bytes");
  if (width <= 0 || width > kWarp || (width & (width - 1))) device_fail("shuffle width must be a power of 2 <= 32");
  uint64_t raw = 0;
  std::memcpy(&raw, &v, sizeof(T));
  raw = warp_op(mask, op, raw, arg, width);
  T r;
  std::memcpy(&r, &raw, sizeof(T));
  return r;
}

template <class T>
T atomic_rmw(T* p, T v, int kind) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4- and 8-byte types");
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  U* up = reinterpret_cast<U*>(p);
  U ou = __atomic_load_n(up, __ATOMIC_RELAXED), nu;
  T o, upd;
  do {
    std::memcpy(&o, &ou, sizeof(T));
    switch (kind) {
      case 0: upd = T(o + v); break;
      case 1: upd = o < v ? v : o; break;
      case 2: upd = v < o ? v : o; break;
      case 3: upd = v; break;
      case 4: upd = T(o - v); break;
      default:
        if constexpr (std::is_integral_v<T>) upd = kind == 5 ? T(o & v) : kind == 6 ? T(o | v) : T(o ^ v);
        else device_fail("bitwise atomic on a floating-point value");
        break;
    }
    std::memcpy(&nu, &upd, sizeof(T));
  } while (!__atomic_compare_exchange_n(up, &ou, nu, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return o;
}

}  // namespace cuemu

#define threadIdx (::cuemu::t_threadIdx)
#define blockIdx (::cuemu::t_blockIdx)
#define blockDim (::cuemu::t_blockDim)
#define gridDim (::cuemu::t_gridDim)
inline constexpr int warpSize = 32;

// ---- block barriers (the call site identifies the barrier) ----
#define __syncthreads() ((void)::cuemu::block_barrier(0, __FILE__, __LINE__))
#define __syncthreads_count(p) int(::cuemu::block_barrier(1ull | (uint64_t((p) != 0) << 1), __FILE__, __LINE__))
#define __syncthreads_or(p) (__syncthreads_count(p) != 0)
#define __syncthreads_and(p) \
  (__syncthreads_count(p) == int(::cuemu::t_blockDim.x * ::cuemu::t_blockDim.y * ::cuemu::t_blockDim.z))

// ---- warp collectives ----
inline void __syncwarp(unsigned mask = 0xffffffffu) { cuemu::warp_op(mask, cuemu::kSyncWarp, 0, 0, 32); }
template <class T>
T __shfl_sync(unsigned m, T v, int src, int w = 32) { return cuemu::shfl(m, v, cuemu::kShflIdx, src, w); }
template <class T>
T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return cuemu::shfl(m, v, cuemu::kShflUp, int(d), w); }
template <class T>
T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return cuemu::shfl(m, v, cuemu::kShflDown, int(d), w); }
template <class T>
T __shfl_xor_sync(unsigned m, T v, int lane_mask, int w = 32) { return cuemu::shfl(m, v, cuemu::kShflXor, lane_mask, w); }
inline unsigned __ballot_sync(unsigned m, int p) { return unsigned(cuemu::warp_op(m, cuemu::kBallot, p != 0, 0, 32)); }
inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
inline int __all_sync(unsigned m, int p) { return (__ballot_sync(m, !p)) == 0; }

// ---- integer and bit intrinsics ----
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)((unsigned __int128)a * b >> 64);
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  s &= 31;
  return s ? (hi << s) | (lo >> (32 - s)) : hi;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  s &= 31;
  return s ? (lo >> s) | (hi << (32 - s)) : lo;
}

// ---- float intrinsics: IEEE round-to-nearest, like the GPU's _rn forms ----
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline float __saturatef(float a) { return a != a ? 0.0f : a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
// The fast-math intrinsics are approximations on the GPU; here they are libm (tests allow ulps).
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
inline float __sinf(float a) { return std::sin(a); }
inline float __cosf(float a) { return std::cos(a); }
inline float __fdividef(float a, float b) { return a / b; }

// CUDA's unqualified min/max overloads for device code.
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(b) < C(a) ? C(b) : C(a);
}
template <class A, class B, class = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return C(a) < C(b) ? C(b) : C(a);
}

// ---- memory ----
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T>
T __ldg(const T* p) { return *p; }
template <class T>
T atomicAdd(T* p, T v) { return cuemu::atomic_rmw(p, v, 0); }
template <class T>
T atomicMax(T* p, T v) { return cuemu::atomic_rmw(p, v, 1); }
template <class T>
T atomicMin(T* p, T v) { return cuemu::atomic_rmw(p, v, 2); }
template <class T>
T atomicExch(T* p, T v) { return cuemu::atomic_rmw(p, v, 3); }
template <class T>
T atomicSub(T* p, T v) { return cuemu::atomic_rmw(p, v, 4); }
template <class T>
T atomicAnd(T* p, T v) { return cuemu::atomic_rmw(p, v, 5); }
template <class T>
T atomicOr(T* p, T v) { return cuemu::atomic_rmw(p, v, 6); }
template <class T>
T atomicXor(T* p, T v) { return cuemu::atomic_rmw(p, v, 7); }
template <class T>
T atomicCAS(T* p, T compare, T v) {
  __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
