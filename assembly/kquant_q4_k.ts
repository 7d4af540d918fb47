// Q4_K rows in GGUF's layout against Q8_K activations (the SIMD128 build's; matvec_kquant.ts says
// why the nibbles are masked in place and never widened).

import { hsumPairs } from "./lanes";
import { finishK, minsDot, Q4K, Q8K, scalesMins } from "./kquant_blocks";

/** Integer part of one Q4_K block against one Q8_K block: [256 * sum_j sc_j dot_j] lanes. */
@inline function intQ4K(wb: usize, xb: usize, sm: v128): v128 {
  let isum = i32x4.splat(0);
  let sc = sm;
  // chunk c: 32 quant bytes; low nibbles are sub-block 2c, high nibbles sub-block 2c+1
  for (let c: usize = 0; c < 4; c++) {
    const qp = wb + 16 + (c << 5),
      xp = xb + 4 + (c << 6);
    let lo = i32x4.splat(0),
      hi = i32x4.splat(0);
    for (let k: usize = 0; k < 32; k += 16) {
      const q = v128.load(qp + k),
        xl = v128.load(xp + k),
        xh = v128.load(xp + k, 32);
      lo = i32x4.add(
        lo,
        i32x4.add(
          i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x000f)), i16x8.shl(xl, 8)),
          i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x0f00)), i16x8.shr_s(xl, 8)),
        ),
      );
      hi = i32x4.add(
        hi,
        i32x4.add(
          i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00f0)), i16x8.shr_s(i16x8.shl(xh, 8), 4)),
          i32x4.dot_i16x8_s(i16x8.shr_u(q, 12), v128.and(xh, i16x8.splat(<i16>0xff00))),
        ),
      );
    }
    isum = i32x4.add(
      isum,
      i32x4.add(
        i32x4.mul(lo, i32x4.splat(i8x16.extract_lane_u(sc, 0))),
        i32x4.mul(hi, i32x4.splat(i8x16.extract_lane_u(sc, 1))),
      ),
    );
    sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
  }
  return isum;
}

@inline function dotQ4K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q4K,
      xb = x + b * Q8K;
    const sm = scalesMins(wb + 4);
    acc = finishK(acc, wb, xb, intQ4K(wb, xb, sm), minsDot(sm, xb), <f32>1.0 / 256.0);
  }
  return hsumPairs(acc);
}

/** Two rows against one activation row: each shaped activation vector serves both rows. */
@inline function dotQ4KRows2(w0: usize, w1: usize, x: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb0 = w0 + b * Q4K,
      wb1 = w1 + b * Q4K,
      xb = x + b * Q8K;
    const sm0 = scalesMins(wb0 + 4),
      sm1 = scalesMins(wb1 + 4);
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    let sc0 = sm0,
      sc1 = sm1;
    for (let c: usize = 0; c < 4; c++) {
      const qo: usize = 16 + (c << 5),
        xp = xb + 4 + (c << 6);
      let lo0 = i32x4.splat(0),
        hi0 = i32x4.splat(0),
        lo1 = i32x4.splat(0),
        hi1 = i32x4.splat(0);
      for (let k: usize = 0; k < 32; k += 16) {
        const xl = v128.load(xp + k),
          xh = v128.load(xp + k, 32);
        const le = i16x8.shl(xl, 8),
          lo = i16x8.shr_s(xl, 8);
        const he = i16x8.shr_s(i16x8.shl(xh, 8), 4),
          ho = v128.and(xh, i16x8.splat(<i16>0xff00));
        let q = v128.load(wb0 + qo + k);
        lo0 = i32x4.add(
          lo0,
          i32x4.add(
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x000f)), le),
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x0f00)), lo),
          ),
        );
        hi0 = i32x4.add(
          hi0,
          i32x4.add(i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00f0)), he), i32x4.dot_i16x8_s(i16x8.shr_u(q, 12), ho)),
        );
        q = v128.load(wb1 + qo + k);
        lo1 = i32x4.add(
          lo1,
          i32x4.add(
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x000f)), le),
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x0f00)), lo),
          ),
        );
        hi1 = i32x4.add(
          hi1,
          i32x4.add(i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00f0)), he), i32x4.dot_i16x8_s(i16x8.shr_u(q, 12), ho)),
        );
      }
      is0 = i32x4.add(
        is0,
        i32x4.add(
          i32x4.mul(lo0, i32x4.splat(i8x16.extract_lane_u(sc0, 0))),
          i32x4.mul(hi0, i32x4.splat(i8x16.extract_lane_u(sc0, 1))),
        ),
      );
      is1 = i32x4.add(
        is1,
        i32x4.add(
          i32x4.mul(lo1, i32x4.splat(i8x16.extract_lane_u(sc1, 0))),
          i32x4.mul(hi1, i32x4.splat(i8x16.extract_lane_u(sc1, 1))),
        ),
      );
      sc0 = i8x16.shuffle(sc0, sc0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
      sc1 = i8x16.shuffle(sc1, sc1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
    }
    acc0 = finishK(acc0, wb0, xb, is0, minsDot(sm0, xb), <f32>1.0 / 256.0);
    acc1 = finishK(acc1, wb1, xb, is1, minsDot(sm1, xb), <f32>1.0 / 256.0);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

/** One row against two activation rows: each masked weight vector serves both tokens. */
@inline function dotQ4KTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q4K,
      xb0 = x0 + b * Q8K,
      xb1 = x1 + b * Q8K;
    const sm = scalesMins(wb + 4);
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    let sc = sm;
    for (let c: usize = 0; c < 4; c++) {
      const qp = wb + 16 + (c << 5),
        xo: usize = 4 + (c << 6);
      let lo0 = i32x4.splat(0),
        hi0 = i32x4.splat(0),
        lo1 = i32x4.splat(0),
        hi1 = i32x4.splat(0);
      for (let k: usize = 0; k < 32; k += 16) {
        const q = v128.load(qp + k);
        const q1 = v128.and(q, i16x8.splat(0x000f)),
          q2 = v128.and(q, i16x8.splat(0x0f00));
        const q3 = v128.and(q, i16x8.splat(0x00f0)),
          q4 = i16x8.shr_u(q, 12);
        let xl = v128.load(xb0 + xo + k),
          xh = v128.load(xb0 + xo + k, 32);
        lo0 = i32x4.add(
          lo0,
          i32x4.add(i32x4.dot_i16x8_s(q1, i16x8.shl(xl, 8)), i32x4.dot_i16x8_s(q2, i16x8.shr_s(xl, 8))),
        );
        hi0 = i32x4.add(
          hi0,
          i32x4.add(
            i32x4.dot_i16x8_s(q3, i16x8.shr_s(i16x8.shl(xh, 8), 4)),
            i32x4.dot_i16x8_s(q4, v128.and(xh, i16x8.splat(<i16>0xff00))),
          ),
        );
        xl = v128.load(xb1 + xo + k);
        xh = v128.load(xb1 + xo + k, 32);
        lo1 = i32x4.add(
          lo1,
          i32x4.add(i32x4.dot_i16x8_s(q1, i16x8.shl(xl, 8)), i32x4.dot_i16x8_s(q2, i16x8.shr_s(xl, 8))),
        );
        hi1 = i32x4.add(
          hi1,
          i32x4.add(
            i32x4.dot_i16x8_s(q3, i16x8.shr_s(i16x8.shl(xh, 8), 4)),
            i32x4.dot_i16x8_s(q4, v128.and(xh, i16x8.splat(<i16>0xff00))),
          ),
        );
      }
      const sl = i32x4.splat(i8x16.extract_lane_u(sc, 0)),
        sh = i32x4.splat(i8x16.extract_lane_u(sc, 1));
      is0 = i32x4.add(is0, i32x4.add(i32x4.mul(lo0, sl), i32x4.mul(hi0, sh)));
      is1 = i32x4.add(is1, i32x4.add(i32x4.mul(lo1, sl), i32x4.mul(hi1, sh)));
      sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
    }
    acc0 = finishK(acc0, wb, xb0, is0, minsDot(sm, xb0), <f32>1.0 / 256.0);
    acc1 = finishK(acc1, wb, xb1, is1, minsDot(sm, xb1), <f32>1.0 / 256.0);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

export { dotQ4K, dotQ4KRows2, dotQ4KTokens2 };
