// The relaxed build's Q4_K (src/runtime/weight-kernels/kquant.ts packs it; prepare_q8k.ts makes
// its "q8_Ki" activations): per 256-value block the nibbles of sub-blocks 4h..4h+3 sit in 4
// vectors whose bytes 4b..4b+3 belong to sub-block 4h + b (low nibbles one element run, high
// nibbles the next), the activation bytes in the same places. A relaxed dot (pmaddubsw) then
// leaves sub-block b's pair sums in i16 lanes 2b, 2b+1; a half's 8 dots add up in i16 (a lane is
// at most 8 * 2 * 15 * 128 = 30720), and one i32x4.dot_i16x8_s with the scales spread as
// [sc0, sc0, sc1, sc1, ..] (one swizzle of the block's scale bytes) gives lane b = sc_b * dot_b.
// Against GGUF's layout, where every vector is one sub-block and each needs its scale splat,
// that is about half the instructions. The mins meet the activation's sub-block sums in one more
// dot. Integer sums as ggml's; the float lanes differ from the SIMD128 build's (4 lanes of other
// sub-block mixes), so the two builds agree to rounding, not to the bit.

import { hsumPairs } from "./lanes";
import { K_NIB, Q8KI } from "./kquant_blocks";
import { dotLoHi, dotw } from "./matvec_q4_relaxed";
import { pin, pin2 } from "./schedule_pin";

// +0: selector spreading scale bytes 0..3 to i16 pairs, +16: bytes 4..7, +32: min bytes 8..15 to
// i16 lanes (0x80: a zero byte)
const Q4KI_SEL = memory.data<u8>(
  [
    0, 0x80, 0, 0x80, 1, 0x80, 1, 0x80, 2, 0x80, 2, 0x80, 3, 0x80, 3, 0x80, 4, 0x80, 4, 0x80, 5, 0x80, 5, 0x80, 6, 0x80,
    6, 0x80, 7, 0x80, 7, 0x80, 8, 0x80, 9, 0x80, 10, 0x80, 11, 0x80, 12, 0x80, 13, 0x80, 14, 0x80, 15, 0x80,
  ],
  16,
);
const Q4KI: usize = 152;

/** i16 pair sums of one half (64 weight bytes at wh, 128 activation bytes at xh) of a block. */
@inline function halfQ4Ki(wh: usize, xh: usize, m: v128): v128 {
  let h = i16x8.splat(0);
  for (let j: usize = 0; j < 64; j += 16) {
    const o = xh + (j << 1);
    h = i16x8.add(h, dotw(v128.load(wh + j), v128.load(o), v128.load(o, 16), m));
  }
  return h;
}

/** acc + one relaxed-layout Q4_K block at wb against one q8_Ki block at xb. */
@inline function blockQ4Ki(acc: v128, wb: usize, xb: usize, m: v128): v128 {
  const h0 = halfQ4Ki(wb, xb, m);
  pin(h0);
  return finishQ4Ki(acc, h0, halfQ4Ki(wb + 64, xb + 128, m), wb, xb);
}

/** The scaled integer sums and the mins term of one block from its two halves' i16 sums. */
@inline function finishQ4Ki(acc: v128, h0: v128, h1: v128, wb: usize, xb: usize): v128 {
  const sm = v128.load(wb, 128);
  const isum = i32x4.add(
    i32x4.dot_i16x8_s(h0, i8x16.relaxed_swizzle(sm, v128.load(Q4KI_SEL))),
    i32x4.dot_i16x8_s(h1, i8x16.relaxed_swizzle(sm, v128.load(Q4KI_SEL, 16))),
  );
  return finishKi(acc, isum, sm, wb + 144, xb);
}

/**
 * acc + (isum * d - mins term * dmin) * dx for a relaxed Q4_K / Q5_K block: isum its scaled
 * integer sums, sm its 8 scale then 8 min bytes, d and dmin as f32 at ds, xb its q8_Ki block.
 */
@inline function finishKi(acc: v128, isum: v128, sm: v128, ds: usize, xb: usize): v128 {
  const mi = i32x4.dot_i16x8_s(i8x16.relaxed_swizzle(sm, v128.load(Q4KI_SEL, 32)), v128.load(xb, 288));
  const dx = load<f32>(xb, 304);
  return f32x4.add(
    acc,
    f32x4.sub(
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(load<f32>(ds) * dx)),
      f32x4.mul(f32x4.convert_i32x4_s(mi), f32x4.splat(load<f32>(ds, 4) * dx)),
    ),
  );
}

/** Rows at wa and wc (two places in memory: two weight streams), each activation vector loaded once for both. */
@inline function dotQ4KiRows2(wa: usize, wc: usize, x: usize, nb: usize, ya: usize, yc: usize): void {
  const m = v128.load(K_NIB);
  let acca = f32x4.splat(0),
    accc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const ba = wa + b * Q4KI,
      bc = wc + b * Q4KI,
      xb = x + b * Q8KI;
    let ha0 = i16x8.splat(0),
      hc0 = i16x8.splat(0),
      ha1 = i16x8.splat(0),
      hc1 = i16x8.splat(0);
    // the four steps written out (a loop costs V8 a stack check and a branch per iteration:
    // 1.01-1.10x), both halves per step (one loop over all 8 vectors, branching on the half:
    // 0.96x from DRAM)
    {
      const xl = v128.load(xb),
        xh = v128.load(xb, 16);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 128),
        xh1 = v128.load(xb, 144);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 64), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 64), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    {
      const xl = v128.load(xb, 32),
        xh = v128.load(xb, 48);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba, 16), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc, 16), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 160),
        xh1 = v128.load(xb, 176);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 80), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 80), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    {
      const xl = v128.load(xb, 64),
        xh = v128.load(xb, 80);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba, 32), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc, 32), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 192),
        xh1 = v128.load(xb, 208);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 96), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 96), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    {
      const xl = v128.load(xb, 96),
        xh = v128.load(xb, 112);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba, 48), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc, 48), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 224),
        xh1 = v128.load(xb, 240);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 112), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 112), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    acca = finishQ4Ki(acca, ha0, ha1, ba, xb);
    accc = finishQ4Ki(accc, hc0, hc1, bc, xb);
  }
  store<f32>(ya, hsumPairs(acca));
  store<f32>(yc, hsumPairs(accc));
}

/** One row against two q8_Ki rows (x0, x1): each unpacked weight vector serves both tokens. */
@inline function dotQ4KiTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  const m = v128.load(K_NIB);
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q4KI,
      xa = x0 + b * Q8KI,
      xc = x1 + b * Q8KI;
    let a0 = i16x8.splat(0),
      c0 = i16x8.splat(0),
      a1 = i16x8.splat(0),
      c1 = i16x8.splat(0);
    // the 8 vectors written out (a loop costs V8 a stack check and a branch per iteration), the
    // first half (sub-blocks 0..3) then the second
    {
      const wv = v128.load(wb);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa), v128.load(xa, 16)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc), v128.load(xc, 16)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 16);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa, 32), v128.load(xa, 48)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc, 32), v128.load(xc, 48)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 32);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa, 64), v128.load(xa, 80)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc, 64), v128.load(xc, 80)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 48);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa, 96), v128.load(xa, 112)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc, 96), v128.load(xc, 112)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 64);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 128), v128.load(xa, 144)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 128), v128.load(xc, 144)));
      pin2(a1, c1);
    }
    {
      const wv = v128.load(wb, 80);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 160), v128.load(xa, 176)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 160), v128.load(xc, 176)));
      pin2(a1, c1);
    }
    {
      const wv = v128.load(wb, 96);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 192), v128.load(xa, 208)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 192), v128.load(xc, 208)));
      pin2(a1, c1);
    }
    {
      const wv = v128.load(wb, 112);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 224), v128.load(xa, 240)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 224), v128.load(xc, 240)));
      pin2(a1, c1);
    }
    acc0 = finishQ4Ki(acc0, a0, a1, wb, xa);
    acc1 = finishQ4Ki(acc1, c0, c1, wb, xc);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

@inline function dotQ4Ki(w: usize, x: usize, nb: usize): f32 {
  const m = v128.load(K_NIB);
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    acc = blockQ4Ki(acc, w + b * Q4KI, x + b * Q8KI, m);
    pin(acc);
  }
  return hsumPairs(acc);
}

export { Q4KI_SEL, Q4KI, finishKi, dotQ4KiRows2, dotQ4KiTokens2, dotQ4Ki };
