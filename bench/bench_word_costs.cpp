// bench_word_costs: what one 64-column word of a one-token int4 GEMV costs on this CPU, the bitmap
// word's steps added one at a time beside the dense int4 word (issue 15: why int4 @ 50 % does not
// outrun Q4_0 on a CPU whose decode is bound by arithmetic, not memory).
//
// Usage: bench_word_costs [--shape RxC] [--rounds N]
//   RxC: rows x columns of the synthetic weight (default 512x2048, L2-resident: the arithmetic, not
//   the memory, is measured); columns a multiple of 128. Rounds interleave every variant; the
//   median of each is printed, in ns a word (64 columns of one row) and relative to the dense word.
//
// The loops are the one-token kernels' inner loops (kernels/cpu/weight_kernels_avx512.cpp),
// reduced to their integer part: four rows at a time, int8 x in a register, int32 sums:
//   dense int4            64 packed bytes = 128 columns: and, shift, and, two vpdpbusd
//   multiply only         one vpdpbusd a word (codes = x xor the word's mask bits): the floor
//   + mask                the word's 64 mask bits into a k register (masked move)
//   + expand              vpexpandb over the mask (of x: no code stream yet)
//   + codes, unpack pass  the kernel's: a run's nibbles unpacked to bytes, then expand-loaded
//   + codes, in register  the alternative: 32 packed bytes loaded at the word's code, nibbles
//                         spread by vpermb + vpmultishiftqb, expanded from the register
//   + float steps         per word a conversion and an fma by x's two 32-column block scales
//   + groups              the kernel's loop: groups of 128 columns, the absent code merged per
//                         group and row (zero codes), an fma by the group's scale
//   groups, int32 sums    the same with a group's two words summed as int32 and one conversion
//                         and fma a group (what x blocks of 128 columns would allow; not built)
// Every bitmap variant from "+ codes" on must give the scalar reference's sums (checked). Then the
// expand alone: a zero-masked vpexpandb waits for its destination's previous value on Zen 4.
// Needs AVX-512 F/BW/VBMI/VBMI2/VNNI at run time; says so and exits 2 where they are missing.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

enum Variant { kDense, kMultiply, kMask, kExpand, kUnpackPass, kInRegister, kFloat, kGroups, kGroupInt, kVariants };
const char* const kNames[kVariants] = {"dense int4 (per 64 columns)", "bitmap: multiply only", "+ mask",
                                       "+ expand",                     "+ codes, unpack pass",  "+ codes, in register",
                                       "+ float steps", "+ groups (the kernel)", "groups, int32 sums a group"};

struct Weight {
  uint64_t rows = 0, wpr = 0;       // words per row
  std::vector<uint64_t> bits;       // rows x wpr mask words, ~50 % set
  std::vector<uint64_t> start;      // code index of each row's first code (rows + 1)
  std::vector<uint8_t> packed;      // codes, two a byte (code k: byte k/2, low nibble when k even)
  std::vector<uint8_t> dense;       // rows x wpr/2 x 64 bytes: per 128 columns, even columns low
  std::vector<int8_t> x;            // wpr x 64, and its even/odd halves per 128 columns
  std::vector<int8_t> x_halves;
  std::vector<float> d;             // a scale per 32 columns (the float variant)
  std::vector<float> scale;         // rows x groups of 128 columns (the group variants)
  std::vector<uint8_t> zero_code;   // rows x groups: the code absent columns get
  volatile uint8_t absent_code = 0;
};

Weight make_weight(uint64_t rows, uint64_t cols) {
  Weight w;
  w.rows = rows;
  w.wpr = cols / 64;
  std::mt19937_64 rng(1);
  w.bits.resize(rows * w.wpr);
  for (auto& b : w.bits) {
    uint64_t v = 0;
    for (int j = 0; j < 64; ++j)
      if (rng() & 1) v |= uint64_t(1) << j;
    b = v;
  }
  w.start.assign(rows + 1, 0);
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < w.wpr; ++i) n += uint64_t(__builtin_popcountll(w.bits[r * w.wpr + i]));
    w.start[r + 1] = w.start[r] + n;
  }
  w.packed.resize(w.start[rows] / 2 + 128);  // + a 64-byte load past the last code
  for (auto& c : w.packed) c = uint8_t(rng());
  w.dense.resize(rows * cols / 2);
  for (auto& c : w.dense) c = uint8_t(rng());
  w.x.resize(cols);
  for (auto& v : w.x) v = int8_t(int(rng() % 255) - 127);
  w.x_halves.resize(cols);
  for (uint64_t u = 0; u < cols / 128; ++u)
    for (int j = 0; j < 64; ++j) {
      w.x_halves[128 * u + j] = w.x[128 * u + 2 * j];
      w.x_halves[128 * u + 64 + j] = w.x[128 * u + 2 * j + 1];
    }
  w.d.resize(cols / 32);
  for (auto& v : w.d) v = 1.0f;  // exact sums in f32 (|sum| < 2^24 a row)
  w.scale.assign(rows * w.wpr / 2, 1.0f);
  w.zero_code.assign(rows * w.wpr / 2, 0);
  return w;
}

// Σ over rows and present columns of code · x, in exact integers (the code variants' answer).
int64_t reference_sum(const Weight& w) {
  int64_t total = 0;
  for (uint64_t r = 0; r < w.rows; ++r) {
    uint64_t k = w.start[r];
    for (uint64_t i = 0; i < w.wpr; ++i)
      for (int j = 0; j < 64; ++j)
        if (w.bits[r * w.wpr + i] >> j & 1) {
          const int code = (w.packed[k / 2] >> (4 * (k & 1))) & 15;
          total += int64_t(code) * w.x[64 * i + j];
          ++k;
        }
  }
  return total;
}

template <int V>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,avx512vnni,popcnt")))
int64_t pass(const Weight& w, uint8_t* unpacked) {
  const __m512i fields = _mm512_set1_epi64(0x1C1814100C080400LL);  // nibble offsets 0, 4, ..., 28
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  alignas(64) uint8_t window[64], control[128];
  for (int q = 0; q < 8; ++q)
    for (int m = 0; m < 8; ++m) window[8 * q + m] = uint8_t(4 * q + m);  // qword q: bytes 4q..4q+7
  for (int odd = 0; odd < 2; ++odd)
    for (int q = 0; q < 8; ++q)
      for (int j = 0; j < 8; ++j) control[64 * odd + 8 * q + j] = uint8_t(4 * j + 4 * odd);
  const __m512i window_v = _mm512_load_si512(window);
  // Absent columns' code, as the kernel's zero_codes path merges it (0 here, unknown to the compiler):
  // merging into it, not zeroing, is what the kernel does, and it keeps each vpexpandb from waiting
  // on the previous one through a reused destination register.
  const __m512i zv = _mm512_set1_epi8(char(w.absent_code));
  int64_t total = 0;
  for (uint64_t r0 = 0; r0 + 4 <= w.rows; r0 += 4) {
    const uint8_t* p[4] = {};
    uint64_t k[4];
    if constexpr (V == kUnpackPass || V >= kFloat) {  // the kernel's unpack pass (its unpack_nibbles)
      const uint64_t k0 = w.start[r0], n_bytes = ((k0 & 1) + w.start[r0 + 4] - k0 + 1) / 2;
      const uint8_t* src = w.packed.data() + k0 / 2;
      for (uint64_t j = 0; j < n_bytes; j += 32) {
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j));
        _mm512_storeu_si512(unpacked + 2 * j, _mm512_and_si512(_mm512_multishift_epi64_epi8(fields, _mm512_cvtepu32_epi64(b)), lo4));
      }
      for (int i = 0; i < 4; ++i) p[i] = unpacked + (w.start[r0 + i] - (k0 & ~uint64_t(1)));
    }
    for (int i = 0; i < 4; ++i) k[i] = w.start[r0 + i];
    __m512i acc[4];
    __m512 facc[4];
    for (int i = 0; i < 4; ++i) {
      acc[i] = _mm512_setzero_si512();
      facc[i] = _mm512_setzero_ps();
    }
    if constexpr (V == kDense) {
      const uint8_t* row[4];
      for (int i = 0; i < 4; ++i) row[i] = w.dense.data() + (r0 + i) * w.wpr * 32;
      for (uint64_t u = 0; u < w.wpr / 2; ++u) {
        const __m512i xe = _mm512_loadu_si512(w.x_halves.data() + 128 * u), xo = _mm512_loadu_si512(w.x_halves.data() + 128 * u + 64);
        for (int i = 0; i < 4; ++i) {
          const __m512i b = _mm512_loadu_si512(row[i] + 64 * u);
          acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_and_si512(b, lo4), xe);
          acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_and_si512(_mm512_srli_epi16(b, 4), lo4), xo);
        }
      }
    } else if constexpr (V == kGroups || V == kGroupInt) {
      // The kernel's loop (dot_rows_q8_i4_1, zero-code rows, groups of 128 columns = 2 words): per
      // group and row the absent code and the scale; per word x, its block scales, then per row the
      // word's mask, expand-load, vpdpbusd and (kGroups) its conversion and fma; per group and row
      // one fma by the scale. kGroupInt: the group's two words summed as int32, one conversion and
      // one fma by d·S a group (x blocks of 128 columns).
      const uint64_t gpr = w.wpr / 2;
      for (uint64_t g = 0; g < gpr; ++g) {
        __m512 gq[4];
        __m512i gi[4], zg[4];
        for (int i = 0; i < 4; ++i) {
          gq[i] = _mm512_setzero_ps();
          gi[i] = _mm512_setzero_si512();
          zg[i] = _mm512_set1_epi8(char(w.zero_code[(r0 + i) * gpr + g]));
        }
        for (uint64_t wi = 2 * g; wi < 2 * g + 2; ++wi) {
          const __m512i xv = _mm512_loadu_si512(w.x.data() + 64 * wi);
          const __m512 dv = _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(w.d[2 * wi]), _mm512_set1_ps(w.d[2 * wi + 1]));
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const uint64_t bw = w.bits[(r0 + i) * w.wpr + wi];
            const __m512i c = _mm512_mask_expandloadu_epi8(zg[i], _cvtu64_mask64(bw), p[i]);
            p[i] += _mm_popcnt_u64(bw);
            if constexpr (V == kGroups)
              gq[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c, xv)), dv, gq[i]);
            else
              gi[i] = _mm512_dpbusd_epi32(gi[i], c, xv);
          }
        }
        for (int i = 0; i < 4; ++i) {
          const float sg = w.scale[(r0 + i) * gpr + g];
          if constexpr (V == kGroups)
            facc[i] = _mm512_fmadd_ps(gq[i], _mm512_set1_ps(sg), facc[i]);
          else
            facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(gi[i]), _mm512_set1_ps(sg * w.d[4 * g]), facc[i]);
        }
      }
    } else {
      for (uint64_t wi = 0; wi < w.wpr; ++wi) {
        const __m512i xv = _mm512_loadu_si512(w.x.data() + 64 * wi);
        const __m512 dv = _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(w.d[2 * wi]), _mm512_set1_ps(w.d[2 * wi + 1]));
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const uint64_t bw = w.bits[(r0 + i) * w.wpr + wi];
          __m512i c;
          if constexpr (V == kMultiply) {
            c = _mm512_xor_si512(xv, _mm512_set1_epi64(int64_t(bw)));
          } else if constexpr (V == kMask) {
            c = _mm512_maskz_mov_epi8(_cvtu64_mask64(bw), xv);
          } else if constexpr (V == kExpand) {
            c = _mm512_mask_expand_epi8(zv, _cvtu64_mask64(bw), xv);
          } else if constexpr (V == kUnpackPass || V == kFloat) {
            c = _mm512_mask_expandloadu_epi8(zv, _cvtu64_mask64(bw), p[i]);
            p[i] += _mm_popcnt_u64(bw);
          } else {  // kInRegister
            const __m512i raw = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.packed.data() + k[i] / 2)));
            const __m512i ctl = _mm512_load_si512(control + 64 * (k[i] & 1));
            const __m512i codes = _mm512_and_si512(_mm512_multishift_epi64_epi8(ctl, _mm512_permutexvar_epi8(window_v, raw)), lo4);
            c = _mm512_mask_expand_epi8(zv, _cvtu64_mask64(bw), codes);
            k[i] += _mm_popcnt_u64(bw);
          }
          if constexpr (V == kFloat)
            facc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c, xv)), dv, facc[i]);
          else
            acc[i] = _mm512_dpbusd_epi32(acc[i], c, xv);
        }
      }
    }
    for (int i = 0; i < 4; ++i) {
      total += _mm512_reduce_add_epi32(acc[i]);
      total += int64_t(_mm512_reduce_add_ps(facc[i]));  // a row's sums are integers below 2^24: exact
    }
  }
  return total;
}

// The expand's dependency on its destination: eight vpexpandb a loop trip, all zero-masked into one
// register, zero-masked into eight in turn, or each merged into a register a zero idiom just
// cleared (what kernels/cpu/weight_kernels_avx512.cpp's expandload_* do). Nanoseconds an expand.
#define ENDOR_X8(s) s s s s s s s s
template <int Form>
__attribute__((target("avx512f,avx512bw,avx512vbmi2"))) double expand_ns(long trips) {
  const auto t0 = std::chrono::steady_clock::now();
  asm volatile("movq $0x5555555555555555, %%rax\n kmovq %%rax, %%k1\n vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0" ::: "rax", "k1", "xmm0");
  for (long i = 0; i < trips; ++i) {
    if constexpr (Form == 0)
      asm volatile(ENDOR_X8("vpexpandb %%zmm0, %%zmm1%{%%k1%}%{z%}\n") ::: "xmm1");
    else if constexpr (Form == 1)
      asm volatile("vpexpandb %%zmm0, %%zmm1%{%%k1%}%{z%}\n vpexpandb %%zmm0, %%zmm2%{%%k1%}%{z%}\n"
                   "vpexpandb %%zmm0, %%zmm3%{%%k1%}%{z%}\n vpexpandb %%zmm0, %%zmm4%{%%k1%}%{z%}\n"
                   "vpexpandb %%zmm0, %%zmm5%{%%k1%}%{z%}\n vpexpandb %%zmm0, %%zmm6%{%%k1%}%{z%}\n"
                   "vpexpandb %%zmm0, %%zmm7%{%%k1%}%{z%}\n vpexpandb %%zmm0, %%zmm8%{%%k1%}%{z%}\n"
                   ::: "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8");
    else
      asm volatile(ENDOR_X8("vpxord %%xmm1, %%xmm1, %%xmm1\n vpexpandb %%zmm0, %%zmm1%{%%k1%}\n") ::: "xmm1");
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (8.0 * double(trips));
}
#undef ENDOR_X8

using PassFn = int64_t (*)(const Weight&, uint8_t*);
const PassFn kPasses[kVariants] = {pass<kDense>, pass<kMultiply>, pass<kMask>, pass<kExpand>,
                                   pass<kUnpackPass>, pass<kInRegister>, pass<kFloat>, pass<kGroups>, pass<kGroupInt>};

}  // namespace

int main(int argc, char** argv) {
  uint64_t rows = 512, cols = 2048;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shape" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%lux%lu", &rows, &cols) != 2 || rows < 4 || rows % 4 != 0 || cols < 128 || cols % 128 != 0) {
        std::fprintf(stderr, "bench_word_costs: --shape wants RxC, R a multiple of 4, C of 128\n");
        return 1;
      }
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_word_costs [--shape RxC] [--rounds N]\n");
      return 1;
    }
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vbmi") ||
      !__builtin_cpu_supports("avx512vbmi2") || !__builtin_cpu_supports("avx512vnni")) {
    std::fprintf(stderr, "bench_word_costs: this CPU lacks AVX-512 F/BW/VBMI/VBMI2/VNNI; nothing to measure\n");
    return 2;
  }
  const Weight w = make_weight(rows, cols);
  // Every code of 4 rows unpacked (at most 4 x cols), the pass's last 64-byte store and a load past it.
  std::vector<uint8_t> unpacked_storage(4 * cols + 256 + 64);
  uint8_t* unpacked = reinterpret_cast<uint8_t*>((uintptr_t(unpacked_storage.data()) + 63) & ~uintptr_t(63));
  const int64_t want = reference_sum(w);
  for (int v : {kUnpackPass, kInRegister, kFloat, kGroups, kGroupInt}) {
    const int64_t got = kPasses[v](w, unpacked);
    if (got != want) {
      std::fprintf(stderr, "bench_word_costs: '%s' sums to %lld, the reference to %lld\n", kNames[v], (long long)got, (long long)want);
      return 1;
    }
  }
  // Passes a round: ~50 ms per variant.
  const double words_a_pass = double(rows) * double(w.wpr);
  const int passes = std::max(1, int(50e6 / (words_a_pass * 1.5)));
  std::vector<std::vector<double>> ns(kVariants);
  int64_t sink = 0;
  for (int round = 0; round < rounds; ++round)
    for (int v = 0; v < kVariants; ++v) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < passes; ++i) sink += kPasses[v](w, unpacked);
      const auto t1 = std::chrono::steady_clock::now();
      ns[v].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / (passes * words_a_pass));
    }
  std::printf("word costs: %lu x %lu int4, 50 %% bitmap, one thread, %d rounds interleaved (median)\n", (unsigned long)rows,
              (unsigned long)cols, rounds);
  std::vector<double> med(kVariants);
  for (int v = 0; v < kVariants; ++v) {
    std::sort(ns[v].begin(), ns[v].end());
    med[v] = ns[v][ns[v].size() / 2];
  }
  for (int v = 0; v < kVariants; ++v)
    std::printf("  %-30s %6.3f ns a word  %5.2fx dense\n", kNames[v], med[v], med[v] / med[kDense]);
  std::printf("(checksum %lld)\n", (long long)(sink & 0xFFFF));
  // The expand alone, rounds interleaved as above.
  const char* const forms[3] = {"zero-masked, one register", "zero-masked, eight in turn", "zero idiom, then merged"};
  std::vector<std::vector<double>> e(3);
  for (int round = 0; round < rounds; ++round) {
    e[0].push_back(expand_ns<0>(4000000));
    e[1].push_back(expand_ns<1>(4000000));
    e[2].push_back(expand_ns<2>(4000000));
  }
  std::printf("vpexpandb zmm (register source), 8 a loop trip (median):\n");
  for (int f = 0; f < 3; ++f) {
    std::sort(e[f].begin(), e[f].end());
    std::printf("  %-30s %6.3f ns an expand\n", forms[f], e[f][e[f].size() / 2]);
  }
  return 0;
}
