/**
 * Floats travel to the kernels as the bit patterns of their f32 (every kernel argument is an
 * i32). Through one shared box: a call allocates nothing, so the decode loop may use it.
 */
const f32Box = new Float32Array(1);
const i32Box = new Int32Array(f32Box.buffer);

/** A float as the i32 bit pattern a kernel argument carries. */
export function f32Bits(v: number): number {
  f32Box[0] = v;
  return i32Box[0];
}
