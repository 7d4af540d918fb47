// The reduction of the sparse kernels' partial slots into y (sparse_ffn.ts: why per-thread slots),
// undoing the quantized types' slot order and scales (sparse_layout.ts).

import { slotFloats } from "./sparse_layout";

// the 4x4 transpose of f32 vectors a..d added to the 4 vectors at p
@inline function addT(p: usize, a: v128, b: v128, c: v128, d: v128): void {
  const ab0 = v128.shuffle<f32>(a, b, 0, 4, 1, 5),
    ab1 = v128.shuffle<f32>(a, b, 2, 6, 3, 7);
  const cd0 = v128.shuffle<f32>(c, d, 0, 4, 1, 5),
    cd1 = v128.shuffle<f32>(c, d, 2, 6, 3, 7);
  v128.store(p, f32x4.add(v128.load(p), v128.shuffle<f32>(ab0, cd0, 0, 1, 4, 5)));
  v128.store(p, f32x4.add(v128.load(p, 16), v128.shuffle<f32>(ab0, cd0, 2, 3, 6, 7)), 16);
  v128.store(p, f32x4.add(v128.load(p, 32), v128.shuffle<f32>(ab1, cd1, 0, 1, 4, 5)), 32);
  v128.store(p, f32x4.add(v128.load(p, 48), v128.shuffle<f32>(ab1, cd1, 2, 3, 6, 7)), 48);
}

/**
 * y[i] += the sum over nSlots partial slots at i, for i in [i0, i1) (multiples of 32), and the
 * slots' parts there cleared. mode: 0 natural order (F32, F16, BF16), 1 permuted (Q8_0), 2 permuted
 * and scaled with block corrections (Q4_0, Q4_1), 3 Q8_0's order scaled by bytes, with block
 * corrections (Q5_0, Q5_1); see sparse_layout.ts and sparse_down_q5.ts.
 */
export function sparse_sum_partials(
  y: usize,
  partials: usize,
  nSlots: i32,
  nEmbd: i32,
  mode: i32,
  i0: i32,
  i1: i32,
): void {
  const stride = (<usize>slotFloats(nEmbd)) << 2;
  const zero = f32x4.splat(0);
  for (let b = i0 >> 5; b < (i1 + 31) >> 5; b++) {
    const o = (<usize>b) << 7;
    const yb = y + o;
    if (mode == 0) {
      for (let v: usize = 0; v < 128; v += 16) {
        let acc = v128.load(yb + v);
        for (let s = 0; s < nSlots; s++) {
          const p = partials + <usize>s * stride + o + v;
          acc = f32x4.add(acc, v128.load(p));
          v128.store(p, zero);
        }
        v128.store(yb + v, acc);
      }
      continue;
    }
    let a0 = zero,
      a1 = zero,
      a2 = zero,
      a3 = zero,
      a4 = zero,
      a5 = zero,
      a6 = zero,
      a7 = zero;
    let c: f32 = 0;
    for (let s = 0; s < nSlots; s++) {
      const p = partials + <usize>s * stride + o;
      a0 = f32x4.add(a0, v128.load(p));
      a1 = f32x4.add(a1, v128.load(p, 16));
      a2 = f32x4.add(a2, v128.load(p, 32));
      a3 = f32x4.add(a3, v128.load(p, 48));
      a4 = f32x4.add(a4, v128.load(p, 64));
      a5 = f32x4.add(a5, v128.load(p, 80));
      a6 = f32x4.add(a6, v128.load(p, 96));
      a7 = f32x4.add(a7, v128.load(p, 112));
      for (let v: usize = 0; v < 128; v += 16) v128.store(p + v, zero);
      if (mode >= 2) {
        const cp = partials + <usize>s * stride + ((<usize>nEmbd) << 2) + ((<usize>b) << 2);
        c += load<f32>(cp);
        store<f32>(cp, 0);
      }
    }
    if (mode == 2) {
      // vector j was accumulated in units of 16^-j (j < 7)
      a1 = f32x4.mul(a1, f32x4.splat(<f32>(1.0 / 16.0)));
      a2 = f32x4.mul(a2, f32x4.splat(<f32>(1.0 / 256.0)));
      a3 = f32x4.mul(a3, f32x4.splat(<f32>(1.0 / 4096.0)));
      a4 = f32x4.mul(a4, f32x4.splat(<f32>(1.0 / 65536.0)));
      a5 = f32x4.mul(a5, f32x4.splat(<f32>(1.0 / 1048576.0)));
      a6 = f32x4.mul(a6, f32x4.splat(<f32>(1.0 / 16777216.0)));
      const C = f32x4.splat(c);
      a0 = f32x4.add(a0, C);
      a1 = f32x4.add(a1, C);
      a2 = f32x4.add(a2, C);
      a3 = f32x4.add(a3, C);
      a4 = f32x4.add(a4, C);
      a5 = f32x4.add(a5, C);
      a6 = f32x4.add(a6, C);
      a7 = f32x4.add(a7, C);
    } else if (mode == 3) {
      // vector 2k + h was accumulated in units of 256^-k (k < 3)
      const C = f32x4.splat(c);
      a0 = f32x4.add(a0, C);
      a1 = f32x4.add(a1, C);
      a2 = f32x4.add(f32x4.mul(a2, f32x4.splat(<f32>(1.0 / 256.0))), C);
      a3 = f32x4.add(f32x4.mul(a3, f32x4.splat(<f32>(1.0 / 256.0))), C);
      a4 = f32x4.add(f32x4.mul(a4, f32x4.splat(<f32>(1.0 / 65536.0))), C);
      a5 = f32x4.add(f32x4.mul(a5, f32x4.splat(<f32>(1.0 / 65536.0))), C);
      a6 = f32x4.add(a6, C);
      a7 = f32x4.add(a7, C);
    }
    // vector j lane l is element 16 (j & 1) + 4 l + (j >> 1): even vectors hold elements 0..15,
    // odd ones 16..31, each group a 4x4 transpose away from natural order
    addT(yb, a0, a2, a4, a6);
    addT(yb + 64, a1, a3, a5, a7);
  }
}

/**
 * y[i] += each listed partial slot at i, one slot after the other in list order (y + s0, then
 * + s1, ...), for i in [i0, i1) (multiples of 32), and the slots' parts there cleared. `slots`: i32
 * slot indices. Adding the slots into y one at a time (not summed first) gives the same bits
 * whether the slots go in one call or in several in order: a prompt batch adds its segments as
 * their bundles come in, a decode step all at once (src/model/offload/fixed-order.ts).
 */
export function sparse_sum_segments(
  y: usize,
  partials: usize,
  slots: usize,
  nSlots: i32,
  nEmbd: i32,
  mode: i32,
  i0: i32,
  i1: i32,
): void {
  const stride = (<usize>slotFloats(nEmbd)) << 2;
  for (let b = i0 >> 5; b < (i1 + 31) >> 5; b++)
    for (let s = 0; s < nSlots; s++) {
      const slot = partials + <usize>load<i32>(slots + ((<usize>s) << 2)) * stride;
      sparse_sum_partials(y, slot, 1, nEmbd, mode, b << 5, (b + 1) << 5);
    }
}
