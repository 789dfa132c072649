// Programs that must end with one of cuemu's fatal diagnostics (ctest matches the message):
//   cuemu_abort_cases CASE   (see main for the cases)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}

__global__ void exited_barrier(int* out) {
  if (threadIdx.x >= 32) return;  // half the block leaves before the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_exited_lane(int* out) {
  if (threadIdx.x == 1) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), 0);
}

__global__ void mismatched_collectives(int* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_sync(0xffffffffu, int(threadIdx.x), 0);
  else
    out[threadIdx.x] = int(__ballot_sync(0xffffffffu, 1));
}

__global__ void shuffle_outside_mask(int* out) {
  if (threadIdx.x % 2 == 0) out[threadIdx.x] = __shfl_sync(0x55555555u, int(threadIdx.x), 5);
}

__global__ void write_past_end(int* out, int n) { out[n + threadIdx.x] = 1; }  // 1000 bytes = 250 ints

__global__ void read_past_end(const float* in, float* out) {
  out[threadIdx.x] = in[1024 + 64 * 1024 * threadIdx.x];  // 4096 bytes = 1024 floats
}

__global__ void scale_by_two(float* x) { x[threadIdx.x] *= 2.0f; }

// An upload on one stream, a kernel on another without cudaStreamWaitEvent: a race on a GPU.
void stream_race(float* dev) {
  static float host[64];
  cudaStream_t copy_s, compute_s;
  cudaStreamCreateWithFlags(&copy_s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&compute_s, cudaStreamNonBlocking);
  cudaEvent_t done;
  cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  // Ordered: copy, record, wait, kernel — no report.
  cudaMemcpyAsync(dev, host, sizeof host, cudaMemcpyHostToDevice, copy_s);
  cudaEventRecord(done, copy_s);
  cudaStreamWaitEvent(compute_s, done, 0);
  scale_by_two<<<1, 64, 0, compute_s>>>(dev);
  cudaStreamSynchronize(compute_s);
  std::fprintf(stderr, "ordered pair passed\n");
  // Unordered: the kernel may run before the copy has landed.
  cudaMemcpyAsync(dev, host, sizeof host, cudaMemcpyHostToDevice, copy_s);
  scale_by_two<<<1, 64, 0, compute_s>>>(dev);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cuemu_abort_cases CASE\n");
    return 2;
  }
  const char* c = argv[1];
  int* d = nullptr;
  cudaMalloc(&d, 1000);
  float* f = nullptr;
  cudaMalloc(&f, 4096);
  if (!std::strcmp(c, "divergent_barrier")) divergent_barrier<<<1, 64>>>(d);
  else if (!std::strcmp(c, "exited_barrier")) exited_barrier<<<1, 64>>>(d);
  else if (!std::strcmp(c, "shuffle_exited_lane")) shuffle_exited_lane<<<1, 32>>>(d);
  else if (!std::strcmp(c, "mismatched_collectives")) mismatched_collectives<<<1, 32>>>(d);
  else if (!std::strcmp(c, "shuffle_outside_mask")) shuffle_outside_mask<<<1, 32>>>(d);
  else if (!std::strcmp(c, "oob_write")) write_past_end<<<1, 1>>>(d, 250);
  else if (!std::strcmp(c, "stream_race")) stream_race(f);
  else if (!std::strcmp(c, "oob_read")) read_past_end<<<1, 1>>>(f, reinterpret_cast<float*>(d));
  else {
    std::fprintf(stderr, "unknown case %s\n", c);
    return 2;
  }
  cudaDeviceSynchronize();
  std::printf("no diagnostic\n");
  return 0;
}
