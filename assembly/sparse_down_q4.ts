// Pieces of the Q4_0 / Q4_1 down columns (partial mode 2; the loops are sparse_down_columns.ts's):
// nibble j of each u32 lane masked in place, so slot vector j is kept x 16^j (sparse_layout.ts),
// and the block scales and constants (Q4_0: -8 d h, Q4_1: m h) gathered per group of blocks.

import { f16pairs, f16x4, pairD, pairM } from "./sparse_block_scales";
import { maskSlot } from "./sparse_down_slot";
import { NIB } from "./sparse_layout";
import { Q4_0_BS, Q4_1_BS } from "./sparse_types";

const NEG8 = memory.data<f32>([-8, -8, -8, -8], 16);

// Q4 down columns, per group of je (1..4) blocks: each column's block scales times its h,
// gathered and converted four blocks at a time (f16x4 / f16pairs), go to scratch vector k (block
// jj in lane jj) for the blocks to splat with one load each; the block constants (Q4_0: -8 h d,
// Q4_1: h m), added column by column in order, go into the group's corrections as one vector.
// Per column and block that replaces two scalar f16 conversions, two multiplies and a splat
// (whole neurons: Q4_1 ~+7%, Q4_0 +2-3%, docs/benchmarks.md; the same values in the same order of
// sums as scalar scales, so the same bits). Q8_0 columns keep their scalar scales: the same change there
// measured 0.89-0.99x.
@inline function groupScales(
  one: bool,
  sc: usize,
  corr: usize,
  je: i32,
  cols: i32,
  p0: usize,
  H0: v128,
  p1: usize,
  H1: v128,
  p2: usize,
  H2: v128,
  p3: usize,
  H3: v128,
): void {
  const BS: usize = one ? Q4_1_BS : Q4_0_BS;
  // The corrections are added column by column, in order (not summed first): four columns at
  // once then give exactly what four single columns give, so a neuron's sum does not depend on
  // how its columns were grouped (the fixed summation order, src/model/offload/fixed-order.ts).
  let acc = v128.load(corr);
  if (one) {
    const v0 = f16pairs(p0, BS, je);
    v128.store(sc, f32x4.mul(pairD(v0), H0));
    acc = f32x4.add(acc, f32x4.mul(pairM(v0), H0));
    if (cols == 4) {
      const v1 = f16pairs(p1, BS, je),
        v2 = f16pairs(p2, BS, je),
        v3 = f16pairs(p3, BS, je);
      v128.store(sc, f32x4.mul(pairD(v1), H1), 16);
      v128.store(sc, f32x4.mul(pairD(v2), H2), 32);
      v128.store(sc, f32x4.mul(pairD(v3), H3), 48);
      acc = f32x4.add(acc, f32x4.mul(pairM(v1), H1));
      acc = f32x4.add(acc, f32x4.mul(pairM(v2), H2));
      acc = f32x4.add(acc, f32x4.mul(pairM(v3), H3));
    }
  } else {
    const neg8 = v128.load(NEG8);
    const s = f32x4.mul(f16x4(p0, BS, je), H0);
    v128.store(sc, s);
    acc = f32x4.add(acc, f32x4.mul(s, neg8));
    if (cols == 4) {
      const s1 = f32x4.mul(f16x4(p1, BS, je), H1),
        s2 = f32x4.mul(f16x4(p2, BS, je), H2),
        s3 = f32x4.mul(f16x4(p3, BS, je), H3);
      v128.store(sc, s1, 16);
      v128.store(sc, s2, 32);
      v128.store(sc, s3, 48);
      acc = f32x4.add(acc, f32x4.mul(s1, neg8));
      acc = f32x4.add(acc, f32x4.mul(s2, neg8));
      acc = f32x4.add(acc, f32x4.mul(s3, neg8));
    }
  }
  // a last group of fewer than 4 blocks stores only its own corrections
  if (je == 4) v128.store(corr, acc);
  else {
    store<f32>(corr, f32x4.extract_lane(acc, 0));
    if (je > 1) store<f32>(corr, f32x4.extract_lane(acc, 1), 4);
    if (je > 2) store<f32>(corr, f32x4.extract_lane(acc, 2), 8);
  }
}

@inline function nibSlot(
  y: usize,
  j: usize,
  q0: v128,
  q1: v128,
  q2: v128,
  q3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  maskSlot(y, j << 4, NIB + (j << 4), q0, q1, q2, q3, S0, S1, S2, S3);
}

export { groupScales, nibSlot };
