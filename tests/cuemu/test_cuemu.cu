// The emulation's own tests: the CUDA semantics endor's kernels rely on, each checked against
// values computed by hand on the host. Written in plain CUDA (no cuemu calls) except the
// CUEMU-only cases at the end, so the same file can be built by nvcc and run on a GPU.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

#define CK(x) REQUIRE((x) == cudaSuccess)

template <class T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) { CK(cudaMalloc(&p, n * sizeof(T))); }
  Dev(const std::vector<T>& h) : Dev(h.size()) { CK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice)); }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

// ---- kernels ----
__global__ void reverse_in_shared(const int* in, int* out) {
  __shared__ int s[1024];
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = in[blockIdx.x * n + t];
  __syncthreads();
  out[blockIdx.x * n + t] = s[n - 1 - t];
}

__global__ void barrier_predicates(const int* in, int* out) {
  const int v = in[threadIdx.x];
  const int count = __syncthreads_count(v > 0);
  const int any = __syncthreads_or(v > 5);
  const int all = __syncthreads_and(v >= 0);
  if (threadIdx.x == 0) {
    out[0] = count;
    out[1] = any;
    out[2] = all;
  }
}

// Every lane shuffles in every mode; results [mode][lane].
__global__ void shuffles(int width, int* out) {
  const int lane = threadIdx.x & 31;
  const int v = 100 + lane;
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, 3, width);
  out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, 2, width);
  out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, 3, width);
  out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, 5, width);
  out[4 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, 1, width);
}

// Only the even lanes take part: shuffles among them, a ballot over them.
__global__ void partial_mask(int* out) {
  const int lane = threadIdx.x & 31;
  const unsigned even = 0x55555555u;
  out[lane] = -1;
  out[32 + lane] = -1;
  if (lane % 2 == 0) {
    out[lane] = __shfl_sync(even, lane * 10, (lane + 2) % 32);  // from the next even lane
    out[32 + lane] = int(__ballot_sync(even, lane % 4 == 0));
  }
  __syncwarp();
  if (lane < 20) out[64 + lane] = int(__ballot_sync(0x000fffffu, lane % 3 == 0));
  if (lane >= 20) out[64 + lane] = __any_sync(0xfff00000u, lane == 31) + 2 * __all_sync(0xfff00000u, lane >= 20);
}

// A warp-level inclusive scan and butterfly sum, as the weight kernels use them.
__global__ void warp_scan_sum(const unsigned* in, unsigned* scan, float* sum) {
  const int lane = threadIdx.x & 31;
  unsigned v = in[threadIdx.x];
  for (int d = 1; d < 32; d <<= 1) {
    const unsigned o = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += o;
  }
  scan[threadIdx.x] = v;
  float f = float(in[threadIdx.x]);
  for (int d = 16; d > 0; d >>= 1) f += __shfl_xor_sync(0xffffffffu, f, d);
  sum[threadIdx.x] = f;
}

// 64-bit shuffle (two 32-bit halves on a GPU).
__global__ void shuffle_u64(unsigned long long* out) {
  const unsigned long long v = (0x1234567800000000ull | threadIdx.x) << (threadIdx.x % 4);
  out[threadIdx.x] = __shfl_sync(0xffffffffu, v, 31 - int(threadIdx.x));
}

// Block-wide exclusive prefix sum in dynamic shared memory (Hillis-Steele, two buffers).
__global__ void dynamic_prefix(const int* in, int* out) {
  extern __shared__ int buf[];  // 2 * blockDim.x ints
  const int t = threadIdx.x, n = blockDim.x;
  int* a = buf;
  int* b = buf + n;
  a[t] = t == 0 ? 0 : in[t - 1];
  __syncthreads();
  for (int d = 1; d < n; d <<= 1) {
    b[t] = t >= d ? a[t] + a[t - d] : a[t];
    __syncthreads();
    int* tmp = a;
    a = b;
    b = tmp;
  }
  out[t] = a[t];
}

__global__ void atomics(float* f, int* i, unsigned long long* u, int* mx, int* mn, int* cas_winner, unsigned* bits) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(f, 0.5f);
  atomicAdd(i, 1);
  atomicAdd(u, 1ull << 33);
  atomicMax(mx, (g * 7919) % 1000);
  atomicMin(mn, 1000 - (g * 7919) % 1000);
  atomicCAS(cas_winner, -1, g);  // exactly one thread wins
  atomicOr(bits, 1u << (g % 32));
}

__global__ void conversions(const float* in, unsigned short* h, unsigned short* b, float* back_h, float* back_b, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const __half hv = __float2half_rn(in[i]);
    const __nv_bfloat16 bv = __float2bfloat16_rn(in[i]);
    h[i] = __half_as_ushort(hv);
    b[i] = __bfloat16_as_ushort(bv);
    back_h[i] = __half2float(hv);
    back_b[i] = __bfloat162float(bv);
  }
}

__global__ void index_3d(int* out) {
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int nt = blockDim.x * blockDim.y * blockDim.z;
  out[b * nt + t] = b * 1000 + t;
}

__global__ void own_parameter_copy(int k, int* out) {
  k += threadIdx.x;  // each thread changes its own copy of the parameter
  out[threadIdx.x] = k;
}

__global__ void add_one(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

__global__ void noop() {}

}  // namespace

TEST_CASE("cuemu: shared memory and __syncthreads, full and partial warps") {
  for (int n : {256, 100, 1024, 1}) {
    CAPTURE(n);
    std::vector<int> h(size_t(3 * n));
    std::iota(h.begin(), h.end(), 0);
    Dev<int> in(h), out(h.size());
    reverse_in_shared<<<3, n>>>(in.p, out.p);
    CK(cudaGetLastError());
    const std::vector<int> r = out.get();
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < n; ++t) CHECK(r[size_t(b * n + t)] == b * n + (n - 1 - t));
  }
}

TEST_CASE("cuemu: __syncthreads_count, _or, _and") {
  std::vector<int> h(96);
  for (int i = 0; i < 96; ++i) h[size_t(i)] = (i % 3) - 1 + (i == 50 ? 10 : 0);  // -1, 0, 1, ...; one 10
  Dev<int> in(h), out(3);
  barrier_predicates<<<1, 96>>>(in.p, out.p);
  const std::vector<int> r = out.get();
  int positive = 0;
  for (int v : h) positive += v > 0;
  CHECK(r[0] == positive);
  CHECK(r[1] == 1);
  CHECK(r[2] == 0);
}

TEST_CASE("cuemu: shuffles of every kind and width") {
  for (int width : {32, 16, 8, 4}) {
    CAPTURE(width);
    Dev<int> out(5 * 32);
    shuffles<<<1, 32>>>(width, out.p);
    CK(cudaGetLastError());
    const std::vector<int> r = out.get();
    for (int l = 0; l < 32; ++l) {
      CAPTURE(l);
      const int seg = l / width * width, in_seg = l - seg;
      CHECK(r[size_t(0 * 32 + l)] == 100 + seg + 3 % width);
      CHECK(r[size_t(1 * 32 + l)] == 100 + (in_seg >= 2 ? l - 2 : l));
      CHECK(r[size_t(2 * 32 + l)] == 100 + (in_seg + 3 < width ? l + 3 : l));
      // xor: lanes of an earlier segment may be read, a later segment gives the own value
      CHECK(r[size_t(3 * 32 + l)] == 100 + ((l ^ 5) < seg + width ? (l ^ 5) : l));
      CHECK(r[size_t(4 * 32 + l)] == 100 + (l ^ 1));
    }
  }
}

TEST_CASE("cuemu: shuffles and ballots under partial masks, __syncwarp, any/all") {
  Dev<int> out(96);
  partial_mask<<<1, 32>>>(out.p);
  CK(cudaGetLastError());
  const std::vector<int> r = out.get();
  for (int l = 0; l < 32; ++l) {
    CAPTURE(l);
    if (l % 2 == 0) {
      CHECK(r[size_t(l)] == ((l + 2) % 32) * 10);
      CHECK(unsigned(r[size_t(32 + l)]) == 0x11111111u);  // lanes 0, 4, 8, ...
    } else {
      CHECK(r[size_t(l)] == -1);
      CHECK(r[size_t(32 + l)] == -1);
    }
    if (l < 20) {
      unsigned want = 0;
      for (int k = 0; k < 20; k += 3) want |= 1u << k;
      CHECK(unsigned(r[size_t(64 + l)]) == want);
    } else {
      CHECK(r[size_t(64 + l)] == 3);  // any(lane == 31) and all(lane >= 20)
    }
  }
}

TEST_CASE("cuemu: warp scan and butterfly sum over 8 warps; 64-bit shuffle") {
  std::vector<unsigned> h(256);
  for (unsigned i = 0; i < 256; ++i) h[i] = (i * 37u) % 11u;
  Dev<unsigned> in(h), scan(256);
  Dev<float> sum(256);
  warp_scan_sum<<<1, 256>>>(in.p, scan.p, sum.p);
  const std::vector<unsigned> s = scan.get();
  const std::vector<float> f = sum.get();
  for (int w = 0; w < 8; ++w) {
    unsigned run = 0, total = 0;
    for (int l = 0; l < 32; ++l) total += h[size_t(32 * w + l)];
    for (int l = 0; l < 32; ++l) {
      run += h[size_t(32 * w + l)];
      CHECK(s[size_t(32 * w + l)] == run);
      CHECK(f[size_t(32 * w + l)] == float(total));
    }
  }
  Dev<unsigned long long> o(32);
  shuffle_u64<<<1, 32>>>(o.p);
  const std::vector<unsigned long long> r = o.get();
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned src = 31 - l;
    CHECK(r[l] == (0x1234567800000000ull | src) << (src % 4));
  }
}

TEST_CASE("cuemu: dynamic shared memory") {
  for (int n : {32, 200, 512}) {
    CAPTURE(n);
    std::vector<int> h(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) h[size_t(i)] = i % 7 + 1;
    Dev<int> in(h), out(static_cast<size_t>(n));
    dynamic_prefix<<<1, n, 2 * n * sizeof(int)>>>(in.p, out.p);
    CK(cudaGetLastError());
    const std::vector<int> r = out.get();
    int run = 0;
    for (int i = 0; i < n; ++i) {
      CHECK(r[size_t(i)] == run);
      run += h[size_t(i)];
    }
  }
}

TEST_CASE("cuemu: atomics across blocks") {
  Dev<float> f(1);
  Dev<int> i(1), mx(1), mn(1), cas(1);
  Dev<unsigned long long> u(1);
  Dev<unsigned> bits(1);
  CK(cudaMemset(f.p, 0, 4));
  CK(cudaMemset(i.p, 0, 4));
  CK(cudaMemset(u.p, 0, 8));
  CK(cudaMemset(bits.p, 0, 4));
  const int m1 = -1, big = 1 << 30, zero = 0;
  CK(cudaMemcpy(cas.p, &m1, 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(mn.p, &big, 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(mx.p, &zero, 4, cudaMemcpyHostToDevice));
  atomics<<<7, 96>>>(f.p, i.p, u.p, mx.p, mn.p, cas.p, bits.p);
  CK(cudaDeviceSynchronize());
  const int n = 7 * 96;
  int want_max = 0, want_min = 1 << 30;
  for (int g = 0; g < n; ++g) {
    want_max = std::max(want_max, (g * 7919) % 1000);
    want_min = std::min(want_min, 1000 - (g * 7919) % 1000);
  }
  CHECK(f.get()[0] == 0.5f * n);
  CHECK(i.get()[0] == n);
  CHECK(u.get()[0] == (unsigned long long)n << 33);
  CHECK(mx.get()[0] == want_max);
  CHECK(mn.get()[0] == want_min);
  const int w = cas.get()[0];
  CHECK((w >= 0 && w < n));
  CHECK(bits.get()[0] == 0xffffffffu);
}

TEST_CASE("cuemu: f16 and bf16 conversions round to nearest even") {
  const float inf = __builtin_inff();
  const std::vector<float> in = {1.0f,
                                 1.0f + 0x1p-11f,      // f16 tie -> even (1.0)
                                 1.0f + 3 * 0x1p-11f,  // f16 tie -> even (1 + 2^-9)
                                 1.0f + 0x1p-8f,       // bf16 tie -> even (1.0); exact in f16
                                 1.0f + 3 * 0x1p-8f,   // bf16 tie -> even (1 + 2^-6); exact in f16
                                 65504.0f, 65520.0f,   // f16 max; rounds to inf
                                 0x1p-24f, 0x1p-25f,   // smallest f16 subnormal; tie -> 0
                                 -2.5f, inf, -inf, 0.0f, -0.0f, 3.0e38f};
  const std::vector<unsigned short> want_h = {0x3C00, 0x3C00, 0x3C02, 0x3C04, 0x3C0C, 0x7BFF, 0x7C00,
                                              0x0001, 0x0000, 0xC100, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x7C00};
  const std::vector<unsigned short> want_b = {0x3F80, 0x3F80, 0x3F80, 0x3F80, 0x3F82, 0x4780, 0x4780,
                                              0x3380, 0x3300, 0xC020, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x7F62};
  const int n = int(in.size());
  Dev<float> x(in), bh(in.size()), bb(in.size());
  Dev<unsigned short> h(in.size()), b(in.size());
  conversions<<<1, 64>>>(x.p, h.p, b.p, bh.p, bb.p, n);
  const std::vector<unsigned short> rh = h.get(), rb = b.get();
  const std::vector<float> fh = bh.get(), fb = bb.get();
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(rh[size_t(i)] == want_h[size_t(i)]);
    CHECK(rb[size_t(i)] == want_b[size_t(i)]);
  }
  CHECK(fh[2] == 1.0f + 0x1p-9f);
  CHECK(fb[4] == 1.0f + 0x1p-6f);
  CHECK(fh[7] == 0x1p-24f);
}

__global__ void mul_high(const unsigned* a, const unsigned* b, unsigned* hi, unsigned long long* hi64, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  hi[i] = __umulhi(a[i], b[i]);
  const unsigned long long a64 = (unsigned long long)a[i] << 32 | b[i], b64 = (unsigned long long)b[i] << 32 | a[i];
  hi64[i] = __umul64hi(a64, b64);
}

TEST_CASE("cuemu: __umulhi and __umul64hi are the high halves of the full products") {
  const std::vector<unsigned> a = {0u, 1u, 0xFFFFFFFFu, 0xFFFFFFFFu, 0x80000000u, 123456789u, 0x0FFFFFFFu};
  const std::vector<unsigned> b = {7u, 0xFFFFFFFFu, 0xFFFFFFFFu, 1u, 2u, 987654321u, 0x10000001u};
  const int n = int(a.size());
  Dev<unsigned> da(a), db(b), hi(a.size());
  Dev<unsigned long long> hi64(a.size());
  mul_high<<<1, 32>>>(da.p, db.p, hi.p, hi64.p, n);
  const std::vector<unsigned> got = hi.get();
  const std::vector<unsigned long long> got64 = hi64.get();
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(got[size_t(i)] == unsigned((uint64_t(a[size_t(i)]) * b[size_t(i)]) >> 32));
    const unsigned long long a64 = (unsigned long long)a[size_t(i)] << 32 | b[size_t(i)];
    const unsigned long long b64 = (unsigned long long)b[size_t(i)] << 32 | a[size_t(i)];
    CHECK(got64[size_t(i)] == (unsigned long long)((unsigned __int128)a64 * b64 >> 64));
  }
  CHECK(got[2] == 0xFFFFFFFEu);
  CHECK(got[4] == 1u);
}

TEST_CASE("cuemu: 3-d blocks and grids; parameters are per-thread copies") {
  Dev<int> out(size_t(2 * 3 * 2) * (4 * 2 * 3));
  index_3d<<<dim3(2, 3, 2), dim3(4, 2, 3)>>>(out.p);
  CK(cudaGetLastError());
  const std::vector<int> r = out.get();
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 24; ++t) CHECK(r[size_t(b * 24 + t)] == b * 1000 + t);
  Dev<int> o(64);
  own_parameter_copy<<<1, 64>>>(5, o.p);
  const std::vector<int> k = o.get();
  for (int t = 0; t < 64; ++t) CHECK(k[size_t(t)] == 5 + t);
}

TEST_CASE("cuemu: streams, async copies and events across streams") {
  const int n = 1000;
  float* host = nullptr;
  CK(cudaMallocHost(&host, n * sizeof(float)));
  for (int i = 0; i < n; ++i) host[i] = float(i);
  Dev<float> d(n);
  cudaStream_t copy_s, compute_s;
  CK(cudaStreamCreateWithFlags(&copy_s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&compute_s, cudaStreamNonBlocking));
  cudaEvent_t uploaded, t0, t1, untimed;
  CK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  CK(cudaMemcpyAsync(d.p, host, n * sizeof(float), cudaMemcpyHostToDevice, copy_s));
  CK(cudaEventRecord(uploaded, copy_s));
  CK(cudaStreamWaitEvent(compute_s, uploaded, 0));
  CK(cudaEventRecord(t0, compute_s));
  add_one<<<(n + 127) / 128, 128, 0, compute_s>>>(d.p, n);
  CK(cudaGetLastError());
  CK(cudaEventRecord(t1, compute_s));
  CK(cudaMemcpyAsync(host, d.p, n * sizeof(float), cudaMemcpyDeviceToHost, compute_s));
  CK(cudaStreamSynchronize(compute_s));
  for (int i = 0; i < n; ++i) CHECK(host[i] == float(i) + 1.0f);
  CK(cudaEventSynchronize(t1));
  CHECK(cudaEventQuery(t1) == cudaSuccess);
  float ms = -1.0f;
  CK(cudaEventElapsedTime(&ms, t0, t1));
  CHECK(ms >= 0.0f);
  // An event without timing, or never recorded, has no elapsed time.
  CHECK(cudaEventElapsedTime(&ms, uploaded, t1) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventElapsedTime(&ms, t0, untimed) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  for (cudaEvent_t e : {uploaded, t0, t1, untimed}) CK(cudaEventDestroy(e));
  CK(cudaStreamDestroy(copy_s));
  CK(cudaStreamDestroy(compute_s));
  CK(cudaFreeHost(host));
}

TEST_CASE("cuemu: an invalid launch is reported as an error and runs nothing") {
  Dev<float> d(4);
  CK(cudaMemset(d.p, 0, 4 * sizeof(float)));
  add_one<<<1, 2048>>>(d.p, 4);  // more than 1024 threads per block
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);  // reading it cleared it
  add_one<<<0, 32>>>(d.p, 4);                // empty grid
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  add_one<<<dim3(1, 70000), 32>>>(d.p, 4);  // grid y above 65535
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  add_one<<<1, dim3(1, 1, 65)>>>(d.p, 4);   // block z above 64
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  noop<<<1, 32, 200 * 1024>>>();  // 200 KiB dynamic shared memory without the opt-in
  CHECK(cudaGetLastError() != cudaSuccess);
  for (float v : d.get()) CHECK(v == 0.0f);
  add_one<<<1, 4>>>(d.p, 4);
  CK(cudaGetLastError());
  for (float v : d.get()) CHECK(v == 1.0f);
}

TEST_CASE("cuemu: copies are checked against device allocations; handles against destruction") {
  Dev<int> d(16);
  std::vector<int> h(32, 7);
  CHECK(cudaMemcpy(d.p, h.data(), 17 * sizeof(int), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(h.data(), d.p + 8, 9 * sizeof(int), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(d.p + 8, h.data(), 8 * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemset(d.p, 0, 65 * sizeof(int) / 4 + 1) == cudaErrorInvalidValue);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaStreamDestroy(s));
  cudaGetLastError();
}

#ifdef CUEMU
TEST_CASE("cuemu only: fresh device memory and shared memory are poisoned, not zero") {
  Dev<float> d(8);
  for (float v : d.get()) CHECK(v != v);  // NaN: uninitialized reads show
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  CHECK(free_b < total_b);
}

namespace {
__global__ void record_order(int* order, int* counter) { order[atomicAdd(counter, 1)] = int(threadIdx.x); }
}  // namespace

TEST_CASE("cuemu only: CUEMU_ORDER selects the order threads run in") {
  Dev<int> order(256), counter(1);
  CK(cudaMemset(counter.p, 0, 4));
  record_order<<<1, 256>>>(order.p, counter.p);
  const std::vector<int> r = order.get();
  std::vector<int> fwd(256);
  std::iota(fwd.begin(), fwd.end(), 0);
  std::vector<int> rev(fwd.rbegin(), fwd.rend());
  const char* env = std::getenv("CUEMU_ORDER");
  const std::string mode = env ? env : "forward";
  if (mode == "forward") CHECK(r == fwd);
  if (mode == "reverse") CHECK(r == rev);
  if (mode.rfind("shuffle", 0) == 0) {
    CHECK(r != fwd);
    CHECK(r != rev);
    std::vector<int> sorted = r;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == fwd);
  }
}
#endif
