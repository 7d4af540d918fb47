// Q8_0 weights times a batch of tokens (prefill): y[t * rows + r] = W[r,:] . x_t.
// Layout as in matvec_q8_0.ts; x holds ntok prepared q8_i16 rows. Each widened weight piece
// serves 4 tokens, and the 4 tokens' per-group results fold into one f32x4 (lane = token).
// Work is blocked as 8 rows x all tokens, 4 tokens at a time (see matmul_q4.ts).

const GB: usize = 576;
const AGB: usize = 272;
const ROW_BLOCK = 8;

@inline function hsum4(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = f32x4.add(v128.shuffle<f32>(a, b, 0, 4, 1, 5), v128.shuffle<f32>(a, b, 2, 6, 3, 7));
  const cd = f32x4.add(v128.shuffle<f32>(c, d, 0, 4, 1, 5), v128.shuffle<f32>(c, d, 2, 6, 3, 7));
  return f32x4.add(v128.shuffle<f32>(ab, cd, 0, 1, 4, 5), v128.shuffle<f32>(ab, cd, 2, 3, 6, 7));
}

@inline function d2(wa: v128, wb: v128, xp: usize): v128 {
  return i32x4.add(i32x4.dot_i16x8_s(wa, v128.load(xp)), i32x4.dot_i16x8_s(wb, v128.load(xp, 16)));
}

@inline function rowQuad(w: usize, ng: i32, r: i32, xa: usize, xb: usize, xc: usize, xd: usize): v128 {
  let wp = w + <usize>(r >> 2) * <usize>ng * GB;
  const qo: usize = <usize>(r & 3) << 7;
  const so: usize = 512 + (<usize>(r & 3) << 4);
  let acc = f32x4.splat(0);
  let ao: usize = 0;
  for (let g = 0; g < ng; g++) {
    let s0 = i32x4.splat(0), s1 = i32x4.splat(0), s2 = i32x4.splat(0), s3 = i32x4.splat(0);
    for (let v: usize = 0; v < 16; v += 2) {
      const wa = v128.load8x8_s(wp + qo + (v << 3)), wb = v128.load8x8_s(wp + qo + (v << 3), 8);
      const xo = ao + (v << 4);
      s0 = i32x4.add(s0, d2(wa, wb, xa + xo));
      s1 = i32x4.add(s1, d2(wa, wb, xb + xo));
      s2 = i32x4.add(s2, d2(wa, wb, xc + xo));
      s3 = i32x4.add(s3, d2(wa, wb, xd + xo));
    }
    const dw = v128.load(wp + so);
    const f0 = f32x4.mul(f32x4.convert_i32x4_s(s0), f32x4.mul(dw, v128.load(xa + ao, 256)));
    const f1 = f32x4.mul(f32x4.convert_i32x4_s(s1), f32x4.mul(dw, v128.load(xb + ao, 256)));
    const f2 = f32x4.mul(f32x4.convert_i32x4_s(s2), f32x4.mul(dw, v128.load(xc + ao, 256)));
    const f3 = f32x4.mul(f32x4.convert_i32x4_s(s3), f32x4.mul(dw, v128.load(xd + ao, 256)));
    acc = f32x4.add(acc, hsum4(f0, f1, f2, f3));
    wp += GB;
    ao += AGB;
  }
  return acc;
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q8_0, x ntok q8_i16 rows. */
export function matmul_q8_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const ng = (cols + 127) >> 7;
  const astride = <usize>ng * AGB;
  const ys = <usize>rows << 2;
  for (let rb = r0; rb < r1; rb += ROW_BLOCK) {
    const re = min(rb + ROW_BLOCK, r1);
    for (let t = 0; t < ntok; t += 4) {
      const n = min(4, ntok - t);
      const xa = x + <usize>t * astride;
      const xb = n > 1 ? xa + astride : xa;
      const xc = n > 2 ? xa + 2 * astride : xa;
      const xd = n > 3 ? xa + 3 * astride : xa;
      const yt = y + <usize>t * ys;
      for (let r = rb; r < re; r++) {
        const v = rowQuad(w, ng, r, xa, xb, xc, xd);
        const yp = yt + (<usize>r << 2);
        store<f32>(yp, f32x4.extract_lane(v, 0));
        if (n > 1) store<f32>(yp + ys, f32x4.extract_lane(v, 1));
        if (n > 2) store<f32>(yp + 2 * ys, f32x4.extract_lane(v, 2));
        if (n > 3) store<f32>(yp + 3 * ys, f32x4.extract_lane(v, 3));
      }
    }
  }
}
