// Q4_0 / Q4_1 weights times a batch of tokens (prefill): y[t * rows + r] = W[r,:] . x_t.
// Layouts as in matvec_q4.ts; x holds ntok prepared q8_i16n rows. Each weight vector is loaded
// and split into its four nibble vectors once per 4 tokens (the split is a quarter of a
// matvec's work), and the 4 tokens' per-group results are folded into one f32x4 (lane = token)
// so only 4 integer and 1 float accumulators stay live.
// Work is blocked as 8 rows x all tokens: the 8 rows' weights stay in L1/L2 while the tokens'
// activations stream past them, 4 tokens at a time (their activations stay in L1 over the 8 rows).

const Q4_0_GB: usize = 160;
const Q4_1_GB: usize = 192;
const ACT_GB: usize = 304;
// loaded, not constant: see matvec_q4.ts
const Q4_MASKS = memory.data<u16>([
  0x000f, 0x000f, 0x000f, 0x000f, 0x000f, 0x000f, 0x000f, 0x000f,
  0x00f0, 0x00f0, 0x00f0, 0x00f0, 0x00f0, 0x00f0, 0x00f0, 0x00f0,
  0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00,
], 16);

// as in matvec_q4.ts
@inline function dotw(w: v128, x0: v128, x1: v128, x2: v128, x3: v128, m0: v128, m1: v128, m2: v128): v128 {
  const a = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m0), x0), i32x4.dot_i16x8_s(v128.and(w, m1), x1));
  const b = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m2), x2), i32x4.dot_i16x8_s(i16x8.shr_u(w, 12), x3));
  return i32x4.add(a, b);
}

const ROW_BLOCK = 8;

// lanes of the result = horizontal sums of a, b, c, d
@inline function hsum4(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = f32x4.add(v128.shuffle<f32>(a, b, 0, 4, 1, 5), v128.shuffle<f32>(a, b, 2, 6, 3, 7));
  const cd = f32x4.add(v128.shuffle<f32>(c, d, 0, 4, 1, 5), v128.shuffle<f32>(c, d, 2, 6, 3, 7));
  return f32x4.add(v128.shuffle<f32>(ab, cd, 0, 1, 4, 5), v128.shuffle<f32>(ab, cd, 2, 3, 6, 7));
}

@inline function dot4(w: v128, xp: usize, m0: v128, m1: v128, m2: v128): v128 {
  return dotw(w, v128.load(xp), v128.load(xp, 16), v128.load(xp, 32), v128.load(xp, 48), m0, m1, m2);
}

// Row r against tokens whose activations start at xa..xd (xb..xd may repeat xa for a partial
// quad); returns the 4 dot products as an f32x4.
@inline function rowQuad(w: usize, ng: i32, r: i32, xa: usize, xb: usize, xc: usize, xd: usize, one: bool): v128 {
  const m0 = v128.load(Q4_MASKS), m1 = v128.load(Q4_MASKS, 16), m2 = v128.load(Q4_MASKS, 32);
  const GB = one ? Q4_1_GB : Q4_0_GB;
  let wp = w + <usize>(r >> 1) * <usize>ng * GB;
  const qo: usize = <usize>(r & 1) << 6; // this row's quants within the pair
  const so: usize = <usize>(r & 1) << 4; // and its scales
  let acc = f32x4.splat(0);
  let ao: usize = 0;
  for (let g = 0; g < ng; g++) {
    let s0 = i32x4.splat(0), s1 = i32x4.splat(0), s2 = i32x4.splat(0), s3 = i32x4.splat(0);
    for (let j: usize = 0; j < 64; j += 16) {
      const wv = v128.load(wp + qo + j);
      const xo = ao + (j << 2);
      s0 = i32x4.add(s0, dot4(wv, xa + xo, m0, m1, m2));
      s1 = i32x4.add(s1, dot4(wv, xb + xo, m0, m1, m2));
      s2 = i32x4.add(s2, dot4(wv, xc + xo, m0, m1, m2));
      s3 = i32x4.add(s3, dot4(wv, xd + xo, m0, m1, m2));
    }
    const dw = v128.load(wp + so, 128);
    let f0: v128, f1: v128, f2: v128, f3: v128;
    if (one) {
      const mw = v128.load(wp + so, 160);
      f0 = f32x4.add(f32x4.mul(f32x4.convert_i32x4_s(s0), f32x4.mul(dw, v128.load(xa + ao, 256))), f32x4.mul(mw, v128.load(xa + ao, 288)));
      f1 = f32x4.add(f32x4.mul(f32x4.convert_i32x4_s(s1), f32x4.mul(dw, v128.load(xb + ao, 256))), f32x4.mul(mw, v128.load(xb + ao, 288)));
      f2 = f32x4.add(f32x4.mul(f32x4.convert_i32x4_s(s2), f32x4.mul(dw, v128.load(xc + ao, 256))), f32x4.mul(mw, v128.load(xc + ao, 288)));
      f3 = f32x4.add(f32x4.mul(f32x4.convert_i32x4_s(s3), f32x4.mul(dw, v128.load(xd + ao, 256))), f32x4.mul(mw, v128.load(xd + ao, 288)));
    } else {
      f0 = f32x4.mul(f32x4.convert_i32x4_s(i32x4.sub(s0, v128.load(xa + ao, 272))), f32x4.mul(dw, v128.load(xa + ao, 256)));
      f1 = f32x4.mul(f32x4.convert_i32x4_s(i32x4.sub(s1, v128.load(xb + ao, 272))), f32x4.mul(dw, v128.load(xb + ao, 256)));
      f2 = f32x4.mul(f32x4.convert_i32x4_s(i32x4.sub(s2, v128.load(xc + ao, 272))), f32x4.mul(dw, v128.load(xc + ao, 256)));
      f3 = f32x4.mul(f32x4.convert_i32x4_s(i32x4.sub(s3, v128.load(xd + ao, 272))), f32x4.mul(dw, v128.load(xd + ao, 256)));
    }
    acc = f32x4.add(acc, hsum4(f0, f1, f2, f3));
    wp += GB;
    ao += ACT_GB;
  }
  return acc;
}

@inline function matmulQ4(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32, one: bool): void {
  const ng = (cols + 127) >> 7;
  const astride = <usize>ng * ACT_GB;
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
        const v = rowQuad(w, ng, r, xa, xb, xc, xd, one);
        const yp = yt + (<usize>r << 2);
        store<f32>(yp, f32x4.extract_lane(v, 0));
        if (n > 1) store<f32>(yp + ys, f32x4.extract_lane(v, 1));
        if (n > 2) store<f32>(yp + 2 * ys, f32x4.extract_lane(v, 2));
        if (n > 3) store<f32>(yp + 3 * ys, f32x4.extract_lane(v, 3));
      }
    }
  }
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q4_0, x ntok q8_i16n rows. */
export function matmul_q4_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulQ4(w, x, y, rows, cols, ntok, r0, r1, false);
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q4_1, x ntok q8_i16n rows. */
export function matmul_q4_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulQ4(w, x, y, rows, cols, ntok, r0, r1, true);
}
