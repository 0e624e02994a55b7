/* septran_cpu_half.h -- force-included (g++ -include) into every kernel of the CPU target, before TileLang's
 * tl_templates/cpp/common.h.
 *
 * Why: TileLang's C target prints float16 as `half`, which its common.h takes from the bundled half.hpp
 * (half_float::half): a class whose conversions g++ cannot vectorise, so every loop that reads or writes a
 * float16 tensor ran scalar (a 4096x1024 float16 softmax 8x slower than torch's, its LayerNorm 5x). g++ 12's own
 * _Float16 does not help: it converts with F16C one element at a time and vectorises no loop that converts.
 *
 * So this header defines half.hpp's include guard and gives `half_float::half` (the name common.h imports) as a
 * 16-bit value whose conversions are the branch-free integer forms below (F. Giesen's half_to_float and
 * float_to_half_fast3_rtne): g++ vectorises them, 16 elements at a time on AVX-512. Values are IEEE binary16
 * exactly as half.hpp's: float to half rounds to nearest even, overflows to inf, keeps subnormals; NaN stays NaN
 * (as a quiet NaN). One difference: arithmetic on two halves computes in float (a + b is a float, rounded to half
 * where it is stored), where half.hpp rounded after each operation; the programs SepTran emits convert to float
 * before they compute anyway (the lowering makes every conversion explicit).
 * tests/test_cpu_half.py checks the conversions against torch on every one of the 65,536 bit patterns and on
 * floats around every rounding boundary, and that half.hpp's guard is still the name defined here.
 */
#ifndef SEPTRAN_CPU_HALF_H
#define SEPTRAN_CPU_HALF_H

#include <stdint.h>
#include <string.h>

static inline float septran_f16_bits_to_f32(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = ((uint32_t)h & 0x7fffu) << 13; /* exponent and mantissa */
  uint32_t exp = o & shifted_exp;
  o += (uint32_t)(127 - 15) << 23;
  uint32_t infnan = o + ((uint32_t)(128 - 16) << 23);
  float sub;
  uint32_t sub_in = o + (1u << 23), magic_bits = 113u << 23;
  float sub_f, magic;
  memcpy(&sub_f, &sub_in, 4);
  memcpy(&magic, &magic_bits, 4);
  sub = sub_f - magic; /* zero and subnormals: renormalised by a float subtraction */
  uint32_t sub_u;
  memcpy(&sub_u, &sub, 4);
  o = exp == shifted_exp ? infnan : (exp == 0 ? sub_u : o);
  o |= ((uint32_t)h & 0x8000u) << 16;
  float f;
  memcpy(&f, &o, 4);
  return f;
}

static inline uint16_t septran_f32_to_f16_bits(float value) {
  uint32_t u;
  memcpy(&u, &value, 4);
  uint32_t sign = u & 0x80000000u;
  u ^= sign;
  const uint32_t f32_inf = 255u << 23, f16_max = (uint32_t)(127 + 16) << 23;
  const uint32_t denorm_magic_bits = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
  uint32_t infnan = u > f32_inf ? 0x7e00u : 0x7c00u;
  /* subnormal or zero: a float addition aligns the 10 mantissa bits at the bottom, rounding to nearest even */
  float f, denorm_magic;
  memcpy(&f, &u, 4);
  memcpy(&denorm_magic, &denorm_magic_bits, 4);
  float aligned = f + denorm_magic;
  uint32_t aligned_u;
  memcpy(&aligned_u, &aligned, 4);
  uint32_t small = aligned_u - denorm_magic_bits;
  /* normal: rebias the exponent and round to nearest even by adding 0xfff plus the mantissa's last kept bit */
  uint32_t normal = (u + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
  uint32_t o = u >= f16_max ? infnan : (u < (113u << 23) ? small : normal);
  return (uint16_t)(o | (sign >> 16));
}

#ifdef __cplusplus
#define HALF_HALF_HPP 1 /* tl_templates/cpp/half.hpp's include guard: common.h's #include of it is now empty */
namespace half_float {
struct half {
  uint16_t bits;
  half() = default;
  half(float f) : bits(septran_f32_to_f16_bits(f)) {}
  operator float() const { return septran_f16_bits_to_f32(bits); }
};
}  // namespace half_float
#endif

#endif
