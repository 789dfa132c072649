// The CUDA backend of endor/kernels.h (kernels/cuda/): weights stay device-resident in their
// compressed form; linear() multiplies straight from it for decode-time token counts (fused
// decode + GEMV) and decodes row panels into a dense 16-bit buffer for cuBLAS otherwise.
// Built only when nvcc is found (ENDOR_HAVE_CUDA); link endor_kernels_cuda.
//
// Memory: Backend::alloc returns device memory; every float*/uint16_t* argument below is a device
// pointer unless its name says host. Work is queued on the backend's compute stream; download(),
// synchronize() and the cuda:: helpers that return host values wait for it, and so do alloc()
// (memory is zeroed on return) and upload() (host_src is reusable on return, pinned or not).
// Host inputs of embed() and rope() go through pinned staging and need no wait.
// sample() picks the token on the device (greedy; temperature with top-k ≤ 1024; sampling.cu) and
// copies back only its id; with top-k off or larger it downloads the row and samples on the host.
// Errors: CUDA/cuBLAS failures throw endor::Error naming the failed statement, file and line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "endor/kernels.h"

namespace endor {

// True when the CUDA runtime sees at least one device. Otherwise false, and *why (when non-null)
// says what the runtime reported ("cudaGetDeviceCount: no CUDA-capable device is detected").
bool cuda_device_available(std::string* why = nullptr);

namespace cuda {

// How linear() multiplies by an encoded weight:
//   Fused      — decode the compressed rows in registers and multiply (each weight byte read once
//                per 8 tokens; Options::fused_kernel picks the kernels). Decode-time token counts.
//   DecodeGemm — decode row panels into a dense f16/bf16/f32 device buffer, then cublasGemmEx
//                (dense f16/bf16/f32 weights are used in place, no decode). Prefill.
enum class LinearPath : uint8_t { Auto, Fused, DecodeGemm };

// Which kernels the Fused path runs:
//   Wide16     — 16-byte, L2-evict-first weight loads; a dense block owns 1-8 rows split over 256
//                threads, a bitmap warp owns a row and stages its values through shared memory
//                (kernels/cuda/fused_linear16.cu; bench/gpu/SOL.md).
//   WarpPerRow — the previous kernels: one warp a row, one value a lane a step (fused_linear.cu),
//                kept for comparison (bench/gpu/bench_fused16.cpp).
enum class FusedKernel : uint8_t { Wide16, WarpPerRow };

struct Options {
  int device = 0;
  LinearPath linear_path = LinearPath::Auto;
  size_t fused_max_tokens = 8;     // Auto: T <= this takes Fused, larger T DecodeGemm
  FusedKernel fused_kernel = FusedKernel::Wide16;
  size_t gemm_panel_bytes = 0;     // DecodeGemm: cap of the decoded-panel buffer; 0 = 256 MiB
  // true (default): batch invariance, as cpu::Options::batch_invariant: Auto takes Fused at every
  // token count (chunks of 8 tokens, each re-reading the weight), never DecodeGemm, whose cuBLAS
  // result for a row depends on the GEMM's shape; attention is per (query, head) either way. false:
  // Auto's DecodeGemm above fused_max_tokens (faster prefill).
  bool batch_invariant = true;
};

// ---- whole-tensor decode (benchmarks, tests) ------------------------------------------------
// out[rows·cols] (device) = every element of a weight prepared by a CUDA backend, row-major:
// f32 is bit-identical to the reference decoder (decode_rows_f32); f16/bf16 are that value
// rounded to nearest even (a weight stored as f16/bf16 decodes to its own bits). Absent +0.
void decode_to_f32(Backend& cuda_backend, const Weight& w, float* out);
void decode_to_f16(Backend& cuda_backend, const Weight& w, uint16_t* out);
void decode_to_bf16(Backend& cuda_backend, const Weight& w, uint16_t* out);

// Raw device bytes (16-bit outputs, benchmark buffers); freed with the backend if not before.
void* alloc_bytes(Backend& cuda_backend, size_t n_bytes);
void free_bytes(Backend& cuda_backend, void* p);
void download_bytes(Backend& cuda_backend, void* host_dst, const void* src, size_t n_bytes);

// ---- measurement (benchmarks) ---------------------------------------------------------------
struct DeviceInfo {
  std::string name;
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  size_t global_bytes = 0, l2_bytes = 0;
};
DeviceInfo device_info(Backend& cuda_backend);

// Median device time in ms of `work` (which queues work on the backend, e.g. a linear() call),
// over n_iters timed runs after one warm-up, each timed alone with events on the compute stream.
// flush_l2: overwrite a buffer twice the L2 size before each run (outside the timed span), so
// the work reads its inputs from device memory rather than from L2.
double time_device_ms(Backend& cuda_backend, const std::function<void()>& work, int n_iters, bool flush_l2);

// Device-to-device cudaMemcpy bandwidth over a buffer of `bytes` (0 = 1 GiB), counted as bytes
// read + bytes written per second (the convention decode GB/s is reported in), median of 5 runs.
double measure_d2d_copy_gbps(Backend& cuda_backend, size_t bytes = 0);

// ---- streaming (runtime/offload) -----------------------------------------------------------
// The backend's compute stream, as a cudaStream_t: every kernel the Backend calls queue runs there
// in call order, so a copy stream can be ordered against it with events.
void* compute_stream(Backend& cuda_backend);
// The device ordinal the backend runs on (make it current before other CUDA calls).
int device_ordinal(Backend& cuda_backend);
// A Weight over compressed bytes the caller keeps at `device_blob` (device memory, 16-byte
// aligned, at least layout.total_bytes + 16 bytes readable): nothing is copied. The layout and
// bitmap index are checked on `host_view`, whose bytes the device blob must hold whenever work
// using the weight runs (a streaming slot filled before the block computes). The caller keeps the
// memory alive while the Weight exists.
std::unique_ptr<Weight> make_weight_at(Backend& cuda_backend, const TensorView& host_view, const void* device_blob);

}  // namespace cuda

// True when `backend` was made by make_cuda_backend.
bool is_cuda_backend(const Backend& backend);

// The CUDA backend on `device`. Throws endor::Error when there is no such device.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
std::unique_ptr<Backend> make_cuda_backend(const cuda::Options& options);

}  // namespace endor
