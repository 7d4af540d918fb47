import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { GGMLType, typeName } from "../src/format/ggml-types.js";
import { GGUFFile } from "../src/format/gguf.js";
import { bf16ThroughF32, bf16ToF32, f16ToF32, f32ToBF16, f32ToF16, f32ToF16Array } from "../src/format/half.js";
import { e8m0Half } from "../src/format/mxfp4.js";
import { gaussians, rng, SHARED } from "./helpers.js";
import {
  dequantize,
  dequantizeRow,
  prepareActivation,
  quantize,
  quantizeRow,
  rowBytes,
  vecDot,
  vecDotType,
} from "../src/format/quant.js";

const fr = Math.fround;

test("f16: exact values, rounding to nearest even, subnormals, inf and NaN", () => {
  assert.equal(f32ToF16(1), 0x3c00);
  assert.equal(f32ToF16(-2), 0xc000);
  assert.equal(f32ToF16(0.5), 0x3800);
  assert.equal(f32ToF16(-0), 0x8000);
  assert.equal(f32ToF16(65504), 0x7bff);
  assert.equal(f32ToF16(65519), 0x7bff); // below the midpoint to 65536
  assert.equal(f32ToF16(65520), 0x7c00); // the midpoint rounds to even: infinity
  assert.equal(f32ToF16(1e6), 0x7c00);
  assert.equal(f32ToF16(-Infinity), 0xfc00);
  assert.equal(f32ToF16(NaN) & 0x7c00, 0x7c00);
  assert.notEqual(f32ToF16(NaN) & 0x3ff, 0);
  assert.equal(f32ToF16(1 + 2 ** -11), 0x3c00); // tie, 1.0 is even
  assert.equal(f32ToF16(1 + 3 * 2 ** -11), 0x3c02); // tie, rounds up to even 0x3c02
  assert.equal(f32ToF16(1 + 2 ** -11 + 2 ** -20), 0x3c01); // just above the tie
  assert.equal(f32ToF16(2 ** -24), 0x0001); // smallest subnormal
  assert.equal(f32ToF16(2 ** -25), 0x0000); // tie with 0 rounds to even 0
  assert.equal(f32ToF16(3 * 2 ** -25), 0x0002); // tie between 1 and 2 units -> 2
  assert.equal(f32ToF16(2 ** -25 * 1.0001), 0x0001);
  assert.equal(f32ToF16(2 ** -14 - 2 ** -25), 0x0400); // rounds up into the smallest normal
  assert.equal(f32ToF16(2 ** -30), 0x0000);
  assert.equal(f16ToF32(0x3c00), 1);
  assert.equal(f16ToF32(0xc000), -2);
  assert.equal(f16ToF32(0x0001), 2 ** -24);
  assert.equal(f16ToF32(0x7bff), 65504);
  assert.equal(f16ToF32(0x7c00), Infinity);
  assert.equal(f16ToF32(0xfc00), -Infinity);
  assert.ok(Number.isNaN(f16ToF32(0x7e00)));
  // every finite or infinite half survives the round trip bit for bit
  for (let h = 0; h < 65536; h++) {
    if ((h & 0x7c00) === 0x7c00 && h & 0x3ff) continue;
    assert.equal(f32ToF16(f16ToF32(h)), h, `half 0x${h.toString(16)}`);
  }
});

test("f16: every boundary between two halves rounds to the nearer, a tie to the even one", () => {
  // the midpoint of two adjacent halves (12 significant bits: exact in f32) and the f32s on
  // either side of it, for every pair of adjacent finite halves of both signs and the step
  // from 65504 to infinity; the array conversion gives what the scalar one gives
  const f32 = new Float32Array(3);
  const u32 = new Uint32Array(f32.buffer);
  const got = new Uint16Array(3);
  for (let h = 0; h < 0x7c00; h++)
    for (const sign of [0, 0x8000]) {
      const lo = f16ToF32(h),
        hi = h + 1 === 0x7c00 ? 65536 : f16ToF32(h + 1);
      f32[1] = (lo + hi) / 2;
      u32[0] = u32[1] - 1;
      u32[2] = u32[1] + 1;
      if (sign) for (let i = 0; i < 3; i++) f32[i] = -f32[i];
      const want = [h, h & 1 ? h + 1 : h, h + 1].map((w) => w | sign);
      f32ToF16Array(f32, got);
      for (let i = 0; i < 3; i++) {
        assert.equal(f32ToF16(f32[i]), want[i], `${f32[i]} between halves 0x${h.toString(16)} and the next`);
        assert.equal(got[i], want[i], `array: ${f32[i]}`);
      }
    }
});

test("bf16: exact values, rounding to nearest even, inf and NaN", () => {
  assert.equal(f32ToBF16(1), 0x3f80);
  assert.equal(f32ToBF16(-2), 0xc000);
  assert.equal(bf16ToF32(0x3f80), 1);
  assert.equal(bf16ToF32(0xc000), -2);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1)
  assert.equal(f32ToBF16(1 + 2 ** -8), 0x3f80);
  assert.equal(f32ToBF16(1 + 3 * 2 ** -8), 0x3f82);
  assert.equal(f32ToBF16(1 + 2 ** -8 + 2 ** -20), 0x3f81);
  assert.equal(f32ToBF16(Infinity), 0x7f80);
  assert.equal(f32ToBF16(3.4e38), 0x7f80); // rounds up past the largest bf16 into infinity
  assert.ok(Number.isNaN(bf16ToF32(f32ToBF16(NaN))));
  for (let h = 0; h < 65536; h += 7) {
    if ((h & 0x7f80) === 0x7f80 && h & 0x7f) continue;
    assert.equal(f32ToBF16(bf16ToF32(h)), h);
  }
  // the converter's bf16 -> bf16 copy is the round trip through f32, NaNs (quieted) included
  const all = Uint16Array.from({ length: 65536 }, (_, h) => h);
  const copied = new Uint16Array(65536);
  bf16ThroughF32(all, copied);
  for (let h = 0; h < 65536; h++) assert.equal(copied[h], f32ToBF16(bf16ToF32(h)), `bf16 0x${h.toString(16)}`);
});

// ------------------------------------------------------------------------------------------
// Hand-built blocks: bytes written one by one, expected floats worked out in the test.

function bytes(...parts: (number | number[])[]): Uint8Array {
  return Uint8Array.from(parts.flat());
}
const H = (v: number) => [f32ToF16(v) & 0xff, f32ToF16(v) >> 8];

function deq(type: GGMLType, b: Uint8Array, n: number): number[] {
  return Array.from(dequantize(type, b, n));
}

test("dequantize F32, F16, BF16 by hand", () => {
  const f = new Float32Array([1.5, -2.25, 0]);
  assert.deepEqual(deq(GGMLType.F32, new Uint8Array(f.buffer), 3), [1.5, -2.25, 0]);
  assert.deepEqual(deq(GGMLType.F16, bytes(0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38), 3), [1, -2, 0.5]);
  assert.deepEqual(deq(GGMLType.BF16, bytes(0x80, 0x3f, 0x40, 0xc0), 2), [1, -3]);
});

test("dequantize Q4_0 and Q4_1 by hand", () => {
  // d = 0.5; byte j holds value j (low nibble) and value j+16 (high nibble)
  const qs = Array.from({ length: 16 }, (_, j) => (j & 15) | ((15 - j) << 4));
  const q40 = bytes(0x00, 0x38, qs);
  const want40 = [
    ...Array.from({ length: 16 }, (_, j) => (j - 8) * 0.5),
    ...Array.from({ length: 16 }, (_, j) => (15 - j - 8) * 0.5),
  ];
  assert.deepEqual(deq(GGMLType.Q4_0, q40, 32), want40);
  // d = 2, m = -1
  const q41 = bytes(0x00, 0x40, 0x00, 0xbc, qs);
  const want41 = [
    ...Array.from({ length: 16 }, (_, j) => j * 2 - 1),
    ...Array.from({ length: 16 }, (_, j) => (15 - j) * 2 - 1),
  ];
  assert.deepEqual(deq(GGMLType.Q4_1, q41, 32), want41);
});

test("dequantize Q5_0 and Q5_1 by hand (fifth bits from qh)", () => {
  // qh = 0x80000001: value 0 and value 31 get their fifth bit
  const qs = new Array(16).fill(0x21); // low nibble 1, high nibble 2
  const q50 = bytes(0x00, 0x3c, [0x01, 0x00, 0x00, 0x80], qs); // d = 1
  const want50: number[] = [];
  for (let j = 0; j < 16; j++) want50.push((1 | (j === 0 ? 16 : 0)) - 16);
  for (let j = 0; j < 16; j++) want50.push((2 | (j === 15 ? 16 : 0)) - 16);
  assert.deepEqual(deq(GGMLType.Q5_0, q50, 32), want50);
  // d = 0.25, m = 10, qh = 0x00010002: value 1 and value 16 get 16 added
  const q51 = bytes(0x00, 0x34, H(10), [0x02, 0x00, 0x01, 0x00], qs);
  const want51: number[] = [];
  for (let j = 0; j < 16; j++) want51.push((1 + (j === 1 ? 16 : 0)) * 0.25 + 10);
  for (let j = 0; j < 16; j++) want51.push((2 + (j === 0 ? 16 : 0)) * 0.25 + 10);
  assert.deepEqual(deq(GGMLType.Q5_1, q51, 32), want51);
});

test("dequantize Q8_0 by hand", () => {
  const qs = Array.from({ length: 32 }, (_, j) => (j * 7 - 110) & 0xff);
  const b = bytes(0x00, 0x3a, qs); // d = 0.75
  assert.deepEqual(
    deq(GGMLType.Q8_0, b, 32),
    Array.from({ length: 32 }, (_, j) => (j * 7 - 110) * 0.75),
  );
});

/** Pack 8 six-bit scales and 8 six-bit mins the way Q4_K/Q5_K store them in 12 bytes. */
function packScalesK(sc: number[], mn: number[]): number[] {
  const b = new Array(12).fill(0);
  for (let j = 0; j < 8; j++) {
    if (j < 4) {
      b[j] = sc[j] & 63;
      b[j + 4] = mn[j] & 63;
    } else {
      b[j + 4] = (sc[j] & 15) | ((mn[j] & 15) << 4);
      b[j - 4] |= (sc[j] >> 4) << 6;
      b[j] |= (mn[j] >> 4) << 6;
    }
  }
  return b;
}

test("dequantize Q4_K by hand (six-bit scales and mins, nibble order)", () => {
  const sc = [1, 2, 3, 63, 17, 40, 5, 33],
    mn = [0, 7, 63, 1, 20, 48, 9, 2];
  // the packing by hand for scale 4 (17 = 0b010001) and min 4 (20 = 0b010100):
  const packed = packScalesK(sc, mn);
  assert.equal(packed[8], (17 & 15) | ((20 & 15) << 4));
  assert.equal(packed[0] >> 6, 17 >> 4);
  assert.equal(packed[4] >> 6, 20 >> 4);
  const qs: number[] = [];
  for (let i = 0; i < 128; i++) qs.push(((i * 7) & 15) | (((i * 3 + 5) & 15) << 4));
  const d = 0.5,
    dmin = 0.125;
  const b = bytes(H(d), H(dmin), packed, qs);
  assert.equal(b.length, 144);
  const want: number[] = [];
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) want.push(d * sc[2 * c] * (((32 * c + l) * 7) & 15) - dmin * mn[2 * c]);
    for (let l = 0; l < 32; l++) want.push(d * sc[2 * c + 1] * (((32 * c + l) * 3 + 5) & 15) - dmin * mn[2 * c + 1]);
  }
  assert.deepEqual(deq(GGMLType.Q4_K, b, 256), want.map(fr));
});

test("dequantize Q5_K by hand (qh bit 2c / 2c+1 is the fifth bit)", () => {
  const sc = [3, 1, 4, 1, 5, 9, 2, 6],
    mn = [2, 7, 1, 8, 2, 8, 1, 8];
  const qh: number[] = [];
  for (let l = 0; l < 32; l++) qh.push((l * 37 + 11) & 0xff);
  const qs: number[] = [];
  for (let i = 0; i < 128; i++) qs.push((i * 13 + 1) & 0xff);
  const d = 0.25,
    dmin = 1;
  const b = bytes(H(d), H(dmin), packScalesK(sc, mn), qh, qs);
  assert.equal(b.length, 176);
  const want: number[] = [];
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) {
      const q = (qs[32 * c + l] & 15) + ((qh[l] >> (2 * c)) & 1 ? 16 : 0);
      want.push(d * sc[2 * c] * q - dmin * mn[2 * c]);
    }
    for (let l = 0; l < 32; l++) {
      const q = (qs[32 * c + l] >> 4) + ((qh[l] >> (2 * c + 1)) & 1 ? 16 : 0);
      want.push(d * sc[2 * c + 1] * q - dmin * mn[2 * c + 1]);
    }
  }
  assert.deepEqual(deq(GGMLType.Q5_K, b, 256), want.map(fr));
});

test("dequantize Q6_K by hand (4 low bits in ql, 2 high in qh, signed 16-value scales)", () => {
  // Build from chosen 6-bit quants q[i] in 0..63 following the layout rules, then check.
  const q: number[] = [];
  for (let i = 0; i < 256; i++) q.push((i * 29 + 3) & 63);
  const scales = [-128, -3, 0, 1, 7, 127, -64, 5, 9, -9, 33, 2, -1, 100, 60, -20];
  const ql = new Array(128).fill(0),
    qh = new Array(64).fill(0);
  for (let half = 0; half < 2; half++) {
    for (let l = 0; l < 32; l++) {
      const base = 128 * half;
      const a = q[base + l],
        b2 = q[base + l + 32],
        c = q[base + l + 64],
        e = q[base + l + 96];
      ql[64 * half + l] = (a & 15) | ((c & 15) << 4);
      ql[64 * half + l + 32] = (b2 & 15) | ((e & 15) << 4);
      qh[32 * half + l] = (a >> 4) | ((b2 >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
    }
  }
  const d = 0.0625;
  const b = bytes(
    ql,
    qh,
    scales.map((s) => s & 0xff),
    H(d),
  );
  assert.equal(b.length, 210);
  const want = q.map((qi, i) => d * scales[i >> 4] * (qi - 32));
  assert.deepEqual(deq(GGMLType.Q6_K, b, 256), want.map(fr));
});

test("dequantize Q8_K by hand", () => {
  const b = new Uint8Array(292);
  new DataView(b.buffer).setFloat32(0, 0.125, true);
  for (let j = 0; j < 256; j++) b[4 + j] = (j - 128) & 0xff;
  assert.deepEqual(
    deq(GGMLType.Q8_K, b, 256),
    Array.from({ length: 256 }, (_, j) => (j - 128) * 0.125),
  );
});

test("dequantizeRow writes at an offset and rejects short buffers with clear errors", () => {
  const b = bytes(0x00, 0x3c, new Array(32).fill(2));
  const dst = new Float32Array(40).fill(-1);
  dequantizeRow(GGMLType.Q8_0, b, 32, dst, 5);
  assert.equal(dst[4], -1);
  assert.equal(dst[5], 2);
  assert.equal(dst[36], 2);
  assert.equal(dst[37], -1);
  assert.throws(() => dequantizeRow(GGMLType.Q8_0, b.subarray(0, 30), 32, dst), /Q8_0.*30 bytes/);
  assert.throws(() => dequantizeRow(GGMLType.Q4_K, new Uint8Array(144), 100, dst), /not a whole number/);
  assert.throws(() => dequantizeRow(GGMLType.Q8_0, b, 32, new Float32Array(10)), /room for 10/);
  assert.throws(
    () => quantizeRow(GGMLType.Q4_K, new Float32Array(256), new Uint8Array(144)),
    /Q4_K is not implemented/,
  );
});

// ------------------------------------------------------------------------------------------
// Quantizers: exact bytes on a hand-worked block, then error bounds on random data.

test("Q8_0 quantization of a hand-worked block", () => {
  // amax = 12.7 -> d = 0.1 (f32), id = 10; 0.25 * 10 = 2.5 rounds away from zero to 3
  const x = new Float32Array(32);
  x[0] = 12.7;
  x[1] = -12.7;
  x[2] = 0.25;
  x[3] = -0.25;
  x[4] = 0.04;
  x[5] = 1;
  const out = new Uint8Array(34);
  quantizeRow(GGMLType.Q8_0, x, out);
  assert.equal(out[0] | (out[1] << 8), f32ToF16(fr(fr(12.7) / 127)));
  const q = Array.from(new Int8Array(out.buffer, 2, 6));
  assert.deepEqual(q, [127, -127, 3, -3, 0, 10]);
});

test("MXFP4: ggml's half E8M0 scale, a hand-worked block both ways, and ggml's nearest-code rule", () => {
  // 2^(e - 128); e = 0 and 1 are f32 subnormals
  assert.equal(e8m0Half(128), 1);
  assert.equal(e8m0Half(127), 0.5);
  assert.equal(e8m0Half(130), 4);
  assert.equal(e8m0Half(1), 2 ** -127);
  assert.equal(e8m0Half(0), 2 ** -128);
  assert.equal(e8m0Half(255), 2 ** 127);
  // amax 6 -> e = floor(log2 6) - 2 + 127 = 127, d = 0.5: the codes' doubled values times 0.5
  const x = new Float32Array(32);
  x.set([6, -6, 0.5, -0.5, 1.4, 1.6, 2.5, 0.2, 0.3, -3.1]);
  x[16] = 4;
  x[17] = -0.74; // nearer -0.5 (code 9) than -1 (code 10)
  x[18] = 0.75; // a tie between 0.5 and 1: the first code wins (code 1)
  const out = new Uint8Array(17);
  quantizeRow(GGMLType.MXFP4, x, out);
  assert.equal(out[0], 127);
  const lo = Array.from(out.subarray(1, 11), (b) => b & 15);
  assert.deepEqual(lo, [7, 15, 1, 9, 3, 3, 4, 0, 1, 13]); // 1.4 -> 1.5 (code 3), 2.5 -> 2 (first of the tie with 3)
  assert.deepEqual([out[1] >> 4, out[2] >> 4, out[3] >> 4], [6, 9, 1]);
  const back = dequantize(GGMLType.MXFP4, out, 32);
  assert.deepEqual(Array.from(back.subarray(0, 10)), [6, -6, 0.5, -0.5, 1.5, 1.5, 2, 0, 0.5, -3]);
  assert.deepEqual(Array.from(back.subarray(16, 19)), [4, -0.5, 0.5]);
  // a zero block: exponent 0, every code 0
  quantizeRow(GGMLType.MXFP4, new Float32Array(32), out);
  assert.deepEqual(Array.from(out), new Array(17).fill(0));
  assert.equal(rowBytes(GGMLType.MXFP4, 64), 34);
});

test("Q4_0 quantization of a hand-worked block", () => {
  // the largest magnitude is -4 -> d = -4 / -8 = 0.5, id = 2; q = trunc(x * 2 + 8.5), max 15
  const x = new Float32Array(32);
  x[0] = -4;
  x[1] = 3.9;
  x[2] = 0.2;
  x[16] = 1;
  x[17] = -1.3;
  const out = new Uint8Array(18);
  quantizeRow(GGMLType.Q4_0, x, out);
  assert.equal(out[0] | (out[1] << 8), 0x3800); // 0.5
  // x0 = -4 -> 0.5 -> 0; x1 = 3.9 -> 16.3 -> 16, clamped to 15; x2 = 0.2 -> 8.9 -> 8
  // x16 = 1 -> 10.5 -> 10; x17 = -1.3 -> 5.9 -> 5; zeros -> 8
  assert.equal(out[2], 0 | (10 << 4));
  assert.equal(out[3], 15 | (5 << 4));
  assert.equal(out[4], 8 | (8 << 4));
});

test("Q4_1 and Q5_1 quantization of a hand-worked block", () => {
  // min 0, max 15 -> d = 1 (Q4_1) and min 0, max 31 -> d = 1 (Q5_1): q equals the value
  const x = new Float32Array(32);
  for (let j = 0; j < 32; j++) x[j] = j & 15;
  const o41 = new Uint8Array(20);
  quantizeRow(GGMLType.Q4_1, x, o41);
  assert.deepEqual([o41[0], o41[1], o41[2], o41[3]], [0x00, 0x3c, 0x00, 0x00]);
  for (let j = 0; j < 16; j++) assert.equal(o41[4 + j], j | (j << 4));
  for (let j = 0; j < 32; j++) x[j] = j;
  const o51 = new Uint8Array(24);
  quantizeRow(GGMLType.Q5_1, x, o51);
  assert.deepEqual([o51[0], o51[1]], [0x00, 0x3c]);
  // values 16..31 are the high halves: all fifth bits 16..31 set, 0..15 clear
  assert.deepEqual(Array.from(o51.subarray(4, 8)), [0x00, 0x00, 0xff, 0xff]);
  for (let j = 0; j < 16; j++) assert.equal(o51[8 + j], j | (j << 4));
});

test("Q5_0 quantization of a hand-worked block", () => {
  // max magnitude 16 (positive) -> d = 16 / -16 = -1, id = -1: q = trunc(-x + 16.5), max 31
  const x = new Float32Array(32);
  x[0] = 16;
  x[1] = -15;
  x[2] = 0.4;
  x[16] = -16;
  const out = new Uint8Array(22);
  quantizeRow(GGMLType.Q5_0, x, out);
  assert.equal(out[0] | (out[1] << 8), 0xbc00); // -1
  // x0 = 16 -> 0.5 -> 0; x1 = -15 -> 31.5 -> 31; x2 = 0.4 -> 16.1 -> 16; x16 = -16 -> 32.5 -> 32 -> 31
  const v = dequantize(GGMLType.Q5_0, out, 32);
  assert.equal(v[0], 16);
  assert.equal(v[1], -15);
  assert.equal(Math.abs(v[2]), 0);
  assert.equal(v[16], -15);
  assert.equal(Math.abs(v[3]), 0);
});

test("Q8_1 and Q8_K activation quantization of hand-worked blocks", () => {
  const x = new Float32Array(32);
  x[0] = 1.27;
  x[1] = 0.5;
  x[2] = -0.015;
  const o = new Uint8Array(36);
  quantizeRow(GGMLType.Q8_1, x, o);
  const d = fr(fr(1.27) / 127);
  // q = [127, 50, -2 (round(-1.5) away from zero)]; s = d * 175
  assert.deepEqual(Array.from(new Int8Array(o.buffer, 4, 3)), [127, 50, -2]);
  assert.equal(o[0] | (o[1] << 8), f32ToF16(d));
  assert.equal(o[2] | (o[3] << 8), f32ToF16(fr(175 * d)));

  const xk = new Float32Array(256);
  xk[0] = -2;
  xk[1] = 1;
  xk[17] = 0.5;
  const k = new Uint8Array(292);
  quantizeRow(GGMLType.Q8_K, xk, k);
  const dv = new DataView(k.buffer);
  // max = -2 -> iscale = -127 / -2 = 63.5, d = 1/63.5; -2 -> -127; 1 -> 63.5 -> 64 (even)
  assert.equal(dv.getFloat32(0, true), fr(1 / fr(63.5)));
  assert.equal(dv.getInt8(4), -127);
  assert.equal(dv.getInt8(5), 64);
  const q17 = dv.getInt8(4 + 17);
  assert.equal(q17, 32); // 63.5 * 0.5 = 31.75
  assert.equal(dv.getInt16(260, true), -127 + 64);
  assert.equal(dv.getInt16(262, true), q17);
  for (let g = 2; g < 16; g++) assert.equal(dv.getInt16(260 + 2 * g, true), 0);
  // an all-zero block: scale 0, quants 0
  const z = new Uint8Array(292).fill(7);
  quantizeRow(GGMLType.Q8_K, new Float32Array(256), z);
  assert.ok(z.every((v) => v === 0));
});

test("Q8_K rounds halves to even (ggml's nearest_int), Q8_0 rounds them away from zero", () => {
  // amax 127 -> scales 1: 2.5 -> 2 in Q8_K (even) but 3 in Q8_0 (away from zero)
  const x = new Float32Array(256);
  x[0] = 127;
  x[1] = 2.5;
  x[2] = -3.5;
  const k = new Uint8Array(292);
  quantizeRow(GGMLType.Q8_K, x, k);
  // iscale = -127/127 = -1: 2.5 -> -2.5 -> -2; -3.5 -> 3.5 -> 4
  assert.deepEqual([(k[5] << 24) >> 24, (k[6] << 24) >> 24], [-2, 4]);
  const q = new Uint8Array(34);
  quantizeRow(GGMLType.Q8_0, x.subarray(0, 32), q);
  assert.deepEqual([(q[3] << 24) >> 24, (q[4] << 24) >> 24], [3, -4]);
});

/**
 * ggml's reference quantizers (ggml-quants.c, quantize_row_*_ref) transcribed line for line, in
 * f32 arithmetic and with C's roundf and truncation, for quantizeRow to equal byte for byte.
 */
function ggmlReference(type: GGMLType, x: Float32Array): Uint8Array {
  const roundf = (v: number) => (v >= 0 ? Math.floor(v + 0.5) : -Math.floor(-v + 0.5));
  const toInt = (v: number) => (v < 0 ? Math.ceil(v) : Math.floor(v));
  const out = new Uint8Array(rowBytes(type, x.length));
  const put16 = (o: number, h: number) => {
    out[o] = h & 0xff;
    out[o + 1] = h >>> 8;
  };
  const put32 = (o: number, v: number) => {
    put16(o, v & 0xffff);
    put16(o + 2, v >>> 16);
  };
  const bs = rowBytes(type, 32);
  for (let b = 0, o = 0; b < x.length; b += 32, o += bs) {
    const v = x.subarray(b, b + 32);
    if (type === GGMLType.Q8_0) {
      let amax = 0;
      for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(v[j]));
      const d = fr(amax / 127);
      const id = d ? fr(1 / d) : 0;
      put16(o, f32ToF16(d));
      for (let j = 0; j < 32; j++) out[o + 2 + j] = roundf(fr(v[j] * id)) & 0xff;
    } else if (type === GGMLType.Q4_0 || type === GGMLType.Q5_0) {
      const five = type === GGMLType.Q5_0;
      const half = five ? 16 : 8;
      let amax = 0,
        max = 0;
      for (let j = 0; j < 32; j++)
        if (amax < Math.abs(v[j])) {
          amax = Math.abs(v[j]);
          max = v[j];
        }
      const d = fr(max / -half);
      const id = d ? fr(1 / d) : 0;
      put16(o, f32ToF16(d));
      let qh = 0;
      for (let j = 0; j < 16; j++) {
        const q0 = Math.min(five ? 31 : 15, toInt(fr(fr(v[j] * id) + half + 0.5)));
        const q1 = Math.min(five ? 31 : 15, toInt(fr(fr(v[16 + j] * id) + half + 0.5)));
        out[o + (five ? 6 : 2) + j] = (q0 & 15) | ((q1 & 15) << 4);
        qh |= (((q0 >> 4) & 1) << j) | (((q1 >> 4) & 1) << (j + 16));
      }
      if (five) put32(o + 2, qh);
    } else {
      const five = type === GGMLType.Q5_1;
      const levels = five ? 31 : 15;
      let min = Infinity,
        max = -Infinity;
      for (let j = 0; j < 32; j++) {
        if (v[j] < min) min = v[j];
        if (v[j] > max) max = v[j];
      }
      const d = fr(fr(max - min) / levels);
      const id = d ? fr(1 / d) : 0;
      put16(o, f32ToF16(d));
      put16(o + 2, f32ToF16(min));
      let qh = 0;
      for (let j = 0; j < 16; j++) {
        const q0 = Math.min(levels, toInt(fr(fr(fr(v[j] - min) * id) + 0.5)));
        const q1 = Math.min(levels, toInt(fr(fr(fr(v[16 + j] - min) * id) + 0.5)));
        out[o + (five ? 8 : 4) + j] = (q0 & 15) | ((q1 & 15) << 4);
        qh |= (((q0 >> 4) & 1) << j) | (((q1 >> 4) & 1) << (j + 16));
      }
      if (five) put32(o + 4, qh);
    }
  }
  return out;
}

test("Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 rows equal ggml's reference quantizers byte for byte", () => {
  const r = rng(77);
  const odd = [NaN, Infinity, -Infinity, 0, -0, 1e-45, -1e-40, 65504, 70000, -1e38, 2 ** -20];
  const x = new Float32Array(32 * 4096);
  for (let i = 0; i < x.length; i++) {
    const k = r();
    // weights of many scales, exact quantization ties (halves at scale 1), rare odd values
    x[i] =
      k < 0.01
        ? odd[Math.floor(r() * odd.length)]
        : k < 0.1
          ? (Math.floor(r() * 255) - 127) / 2
          : (r() - 0.5) * 10 ** (r() * 12 - 8);
  }
  // whole blocks of ties, of subnormals, of zeros of both signs, of one NaN among ones
  const blocks = [
    (j: number) => (j - 16) / 2,
    (j: number) => 1e-40 * j,
    (j: number) => (j % 2 ? -0 : 0),
    (j: number) => (j === 3 ? NaN : 1),
  ];
  blocks.forEach((f, k) => {
    for (let j = 0; j < 32; j++) x[32 * k + j] = f(j);
  });
  for (const type of [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1]) {
    const got = new Uint8Array(rowBytes(type, x.length));
    quantizeRow(type, x, got);
    const want = ggmlReference(type, x);
    const at = got.findIndex((b, i) => b !== want[i]);
    assert.equal(at, -1, `${typeName(type)}: byte ${at} (block ${Math.floor(at / rowBytes(type, 32))})`);
  }
});

const BOUNDS: [GGMLType, number][] = [
  // max |x - dequant(quant(x))| relative to the block's max |x|
  [GGMLType.F16, 2 ** -11],
  [GGMLType.BF16, 2 ** -8],
  [GGMLType.Q8_0, 0.5 / 127 + 2 ** -10],
  [GGMLType.Q8_1, 0.5 / 127 + 2 ** -10],
  [GGMLType.Q8_K, 0.5 / 127 + 1e-6],
  [GGMLType.Q5_0, 0.5 / 16 + 2 ** -10],
  [GGMLType.Q4_0, 0.5 / 8 + 2 ** -10],
];

test("quantizer round trips stay within half a quantization step", () => {
  const n = 1024;
  const x = gaussians(n, 12345, 0.7);
  x[100] = 0;
  x[37] = -3.1;
  for (const [type, rel] of BOUNDS) {
    const q = quantize(type, x);
    const y = dequantize(type, q, n);
    const block = type === GGMLType.Q8_K ? 256 : 32;
    for (let b = 0; b < n; b += block) {
      let amax = 0,
        max = 0;
      for (let j = 0; j < block; j++)
        if (Math.abs(x[b + j]) > amax) {
          amax = Math.abs(x[b + j]);
          max = x[b + j];
        }
      for (let j = 0; j < block; j++) {
        const err = Math.abs(x[b + j] - y[b + j]);
        let bound = type === GGMLType.F16 || type === GGMLType.BF16 ? Math.abs(x[b + j]) * rel + 1e-7 : amax * rel;
        // Q4_0/Q5_0 map the largest magnitude to -8/-16 steps: the other side ends at +7/+15
        const half = type === GGMLType.Q4_0 ? 8 : type === GGMLType.Q5_0 ? 16 : 0;
        if (half && Math.sign(x[b + j]) !== Math.sign(max))
          bound = Math.max(bound, Math.abs(x[b + j]) - ((half - 1) * amax) / half + amax * 2 ** -10);
        assert.ok(
          err <= bound,
          `${typeName(type)} value ${b + j}: ${x[b + j]} came back as ${y[b + j]} (error ${err} > ${bound})`,
        );
      }
    }
  }
  // min/max types: half a step of (max - min) / levels
  for (const [type, levels] of [
    [GGMLType.Q4_1, 15],
    [GGMLType.Q5_1, 31],
  ] as const) {
    const q = quantize(type, x);
    const y = dequantize(type, q, n);
    for (let b = 0; b < n; b += 32) {
      let mn = Infinity,
        mx = -Infinity;
      for (let j = 0; j < 32; j++) {
        mn = Math.min(mn, x[b + j]);
        mx = Math.max(mx, x[b + j]);
      }
      // f16 rounding of d and of the min add a little to the half step
      const bound = ((mx - mn) / levels) * (0.5 + levels * 2 ** -11) + Math.abs(mn) * 2 ** -11 + 1e-6;
      for (let j = 0; j < 32; j++) {
        const err = Math.abs(x[b + j] - y[b + j]);
        assert.ok(err <= bound, `${typeName(type)} value ${b + j}: error ${err} > ${bound}`);
      }
    }
  }
});

test("Q8_1 stores s = d * sum(q) and Q8_K stores the 16-value sums", () => {
  const x = gaussians(512, 99);
  const q81 = quantize(GGMLType.Q8_1, x);
  for (let o = 0; o < q81.length; o += 36) {
    let s = 0;
    for (let j = 0; j < 32; j++) s += (q81[o + 4 + j] << 24) >> 24;
    const d = f16ToF32(q81[o] | (q81[o + 1] << 8));
    // s was rounded from f32 d (before its own f16 rounding): compare within f16 precision
    assert.ok(Math.abs(f16ToF32(q81[o + 2] | (q81[o + 3] << 8)) - s * d) <= Math.abs(s * d) * 2 ** -9 + 1e-6);
  }
  const q8k = quantize(GGMLType.Q8_K, x);
  const dv = new DataView(q8k.buffer);
  for (let o = 0; o < q8k.length; o += 292) {
    for (let g = 0; g < 16; g++) {
      let s = 0;
      for (let j = 0; j < 16; j++) s += dv.getInt8(o + 4 + 16 * g + j);
      assert.equal(dv.getInt16(o + 260 + 2 * g, true), s);
    }
  }
});

// ------------------------------------------------------------------------------------------
// vecDot: the integer-block reference must equal the float dot of the dequantized operands.

/** Random but valid weight bytes for any type (K-quant scales kept in range, f16 scales small). */
function randomWeights(type: GGMLType, n: number, seed: number): Uint8Array {
  const r = rng(seed);
  const b = new Uint8Array(rowBytes(type, n));
  for (let i = 0; i < b.length; i++) b[i] = Math.floor(r() * 256);
  const setF16 = (o: number, v: number) => {
    const h = f32ToF16(v);
    b[o] = h & 0xff;
    b[o + 1] = h >> 8;
  };
  const sz =
    (rowBytes(type, 256 * 32) / (256 * 32)) *
    (type === GGMLType.Q4_K || type === GGMLType.Q5_K || type === GGMLType.Q6_K ? 256 : 32);
  switch (type) {
    case GGMLType.F32: {
      const f = new Float32Array(b.buffer);
      for (let i = 0; i < n; i++) f[i] = (r() - 0.5) * 2;
      break;
    }
    case GGMLType.F16:
    case GGMLType.BF16:
      for (let i = 0; i < n; i++) {
        const h = type === GGMLType.F16 ? f32ToF16((r() - 0.5) * 2) : f32ToBF16((r() - 0.5) * 2);
        b[2 * i] = h & 0xff;
        b[2 * i + 1] = h >> 8;
      }
      break;
    case GGMLType.Q4_0:
    case GGMLType.Q5_0:
    case GGMLType.Q8_0:
      for (let o = 0; o < b.length; o += sz) setF16(o, (r() - 0.5) * 0.1);
      break;
    case GGMLType.Q4_1:
    case GGMLType.Q5_1:
      for (let o = 0; o < b.length; o += sz) {
        setF16(o, r() * 0.05);
        setF16(o + 2, (r() - 0.5) * 0.5);
      }
      break;
    case GGMLType.Q4_K:
    case GGMLType.Q5_K:
      for (let o = 0; o < b.length; o += sz) {
        setF16(o, r() * 0.01);
        setF16(o + 2, r() * 0.01);
      }
      break;
    case GGMLType.Q6_K:
      for (let o = 0; o < b.length; o += sz) setF16(o + 208, (r() - 0.5) * 0.01);
      break;
    case GGMLType.MXFP4:
      for (let o = 0; o < b.length; o += sz) b[o] = 120 + Math.floor(r() * 6); // half scales 2^-8 .. 2^-3
      break;
    default:
      throw new Error(`randomWeights: ${typeName(type)}`);
  }
  return b;
}

const DOT_TYPES = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q8_0,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.MXFP4,
];

test("vecDot equals the dot of dequantized weights and dequantized activations, every type", () => {
  const n = 768;
  for (const type of DOT_TYPES) {
    for (let trial = 0; trial < 3; trial++) {
      const w = randomWeights(type, n, 1000 + 17 * type + trial);
      const x = gaussians(n, 7 + trial, 1.5);
      const act = prepareActivation(type, x);
      const got = vecDot(type, w, act, n);
      const wf = dequantize(type, w, n);
      const at = vecDotType(type);
      const xf = at === GGMLType.F32 ? x : dequantize(at, act as Uint8Array, n);
      let want = 0,
        mag = 0;
      for (let i = 0; i < n; i++) {
        want += wf[i] * xf[i];
        mag += Math.abs(wf[i] * xf[i]);
      }
      // Q4_1/Q5_1 use the stored f16 s for the min term (not the exact sum of q): allow for it
      const tol = mag * 2e-6 + (at === GGMLType.Q8_1 ? mag * 2e-3 : 0) + 1e-9;
      assert.ok(
        Math.abs(got - want) <= tol,
        `${typeName(type)} trial ${trial}: vecDot ${got}, dequantized dot ${want}`,
      );
      // and it approximates the exact f32 dot product
      let exact = 0;
      for (let i = 0; i < n; i++) exact += wf[i] * x[i];
      assert.ok(Math.abs(got - exact) <= mag * 0.02 + 1e-6, `${typeName(type)}: ${got} vs exact ${exact}`);
    }
  }
});

test("vecDot checks its operands", () => {
  const w = randomWeights(GGMLType.Q4_K, 256, 1);
  assert.throws(() => vecDot(GGMLType.Q4_K, w, new Float32Array(256), 256), /Q8_K activation bytes/);
  assert.throws(() => vecDot(GGMLType.Q4_K, w, new Uint8Array(100), 256), /activation holds 100 bytes/);
  assert.throws(() => vecDot(GGMLType.F16, new Uint8Array(512), new Uint8Array(1024), 256), /f32 activations/);
});

// ------------------------------------------------------------------------------------------
// Real model: llama.cpp's Q8_0 file against quantizing its F32 twin here.

const F32_MODEL = `${SHARED}/models/relu-stories.gguf`;
const Q8_MODEL = `${SHARED}/models/relu-stories.Q8_0.gguf`;

test(
  "quantizing relu-stories' F32 tensors to Q8_0 gives the Q8_0 file's bytes exactly",
  { skip: !existsSync(F32_MODEL) || !existsSync(Q8_MODEL) },
  () => {
    const f32 = GGUFFile.open(F32_MODEL),
      q8 = GGUFFile.open(Q8_MODEL);
    try {
      let checked = 0,
        blocks = 0;
      for (const t of q8.tensors.values()) {
        if (t.type !== GGMLType.Q8_0) continue;
        const ft = f32.tensor(t.name);
        assert.equal(ft.type, GGMLType.F32, `${t.name} is F32 in the F32 file`);
        const raw = f32.tensorData(t.name);
        const x = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
        const mine = quantize(GGMLType.Q8_0, x, ft.dims[0]);
        const theirs = q8.tensorData(t.name);
        assert.equal(mine.length, theirs.length, t.name);
        for (let i = 0; i < mine.length; i++) {
          if (mine[i] !== theirs[i])
            assert.fail(
              `${t.name}: byte ${i} (block ${Math.floor(i / 34)}) is ${mine[i]} here, ${theirs[i]} in the file`,
            );
        }
        checked++;
        blocks += mine.length / 34;
      }
      assert.ok(checked >= 6 * 7, `expected every layer's Q8_0 matrices, found ${checked}`);
      assert.ok(blocks > 100000);
    } finally {
      f32.close();
      q8.close();
    }
  },
);
