// Internal to endor_kernels: the non-weight CPU ops (norms, elementwise, RoPE, attention).
// Shapes as in endor/kernels.h; every op runs on the Context's thread pool over tokens, heads or elements.
#pragma once

#include <cstddef>
#include <cstdint>

#include "context.h"

namespace endor::cpu::detail {

void layer_norm(Context&, const float* x, const float* gamma, const float* beta, float eps, size_t n_tokens,
                size_t dim, float* out);
void rms_norm(Context&, const float* x, const float* gamma, float eps, size_t n_tokens, size_t dim, float* out);
void add(Context&, float* x, const float* y, size_t n);
void scale(Context&, float* x, float s, size_t n);
void relu(Context&, float* x, size_t n);
void silu_mul(Context&, const float* gate, const float* up, size_t n, float* out);
void add_bias(Context&, float* x, const float* bias, size_t n_tokens, size_t dim);
void rope(Context&, float* x, size_t n_tokens, uint32_t n_heads, const int32_t* positions, const RopeParams&);
void attention(Context&, const float* q, const float* k_cache, const float* v_cache, size_t n_past,
               size_t n_tokens, const AttentionParams&, float* out);
// attention() over IEEE half caches (rows widened into Context::kv_{k,v}_scratch first).
void attention_f16(Context&, const float* q, const uint16_t* k_cache, const uint16_t* v_cache, size_t n_past,
                   size_t n_tokens, const AttentionParams&, float* out);
// Backend::attention_seqs: the queries of every sequence in one parallel region where they all take
// the decode kernel (batch invariance, or one token each); the others one call each.
void attention_seqs(Context&, const AttentionSeq* seqs, size_t n, const AttentionParams&);

}  // namespace endor::cpu::detail
