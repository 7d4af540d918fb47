// One slot vector of a partial slot (sparse_layout.ts) updated by down columns: the fused or unfused
// multiply-add the down sums use, and the i32 lanes of one to four columns converted and added.

// acc + v * s. The relaxed build fuses it (one FMA where the CPU has one: the down column's
// mask, convert, multiply, add per four elements and column become mask, convert, FMA; +9% whole
// neurons in cache, +2-6% from DRAM, docs/benchmarks.md), so its down sums differ from the SIMD128
// build's in the last bits; the tests hold both to the reference, and the gate and up dots (whose
// signs decide what is computed) keep the same bits in both.
@inline function madd(acc: v128, v: v128, s: v128): v128 {
  if (ASC_FEATURE_RELAXED_SIMD) return f32x4.relaxed_madd(v, s, acc);
  return f32x4.add(acc, f32x4.mul(v, s));
}

// slot vector o of four columns: each column's lanes q and'ed with the mask vector at m (masked
// in place: a Q4 nibble j x 16^j, a Q5 byte k x 256^k), times its S
@inline function maskSlot(
  y: usize,
  o: usize,
  m: usize,
  q0: v128,
  q1: v128,
  q2: v128,
  q3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  const v = v128.load(m);
  axpySlot(y, o, v128.and(q0, v), v128.and(q1, v), v128.and(q2, v), v128.and(q3, v), S0, S1, S2, S3);
}

// one slot vector: y[o] += v0 * S0 + ... + v3 * S3 (v as i32 lanes)
@inline function axpySlot(
  y: usize,
  o: usize,
  v0: v128,
  v1: v128,
  v2: v128,
  v3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  let acc = v128.load(y + o);
  acc = madd(acc, f32x4.convert_i32x4_s(v0), S0);
  acc = madd(acc, f32x4.convert_i32x4_s(v1), S1);
  acc = madd(acc, f32x4.convert_i32x4_s(v2), S2);
  acc = madd(acc, f32x4.convert_i32x4_s(v3), S3);
  v128.store(y + o, acc);
}

@inline function axpyOne(y: usize, o: usize, v: v128, S: v128): void {
  v128.store(y + o, madd(v128.load(y + o), f32x4.convert_i32x4_s(v), S));
}

export { madd, maskSlot, axpySlot, axpyOne };
