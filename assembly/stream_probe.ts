// The streaming-read limit as WebAssembly sees it: how fast one thread can pull bytes from memory
// through v128 loads doing nearly nothing with them. bench/kernels.ts reports each weight kernel's
// cold GB/s beside this figure, so "memory-bound" is a measured statement rather than a guess.
//
// `streams` independent sequential walks (1, 2 or 4) over equal parts of the buffer, advancing
// together: one walk is what a kernel reading one row after another sees; several in flight are
// what a kernel walking several rows at once gets from the hardware prefetchers.

// All four vectors of a line are loaded: a kernel loads every byte it streams.
@inline function line(p: usize): v128 {
  return v128.xor(v128.xor(v128.load(p), v128.load(p, 16)), v128.xor(v128.load(p, 32), v128.load(p, 48)));
}

/** XOR of all 64-byte lines of [p, p + bytes) (bytes a multiple of 64 * streams), read as `streams` walks. */
export function stream_probe(p: usize, bytes: usize, streams: i32): i32 {
  let a = i32x4.splat(0),
    b = i32x4.splat(0),
    c = i32x4.splat(0),
    d = i32x4.splat(0);
  if (streams >= 4) {
    const part = bytes >> 2;
    for (let o: usize = 0; o < part; o += 64) {
      a = v128.xor(a, line(p + o));
      b = v128.xor(b, line(p + part + o));
      c = v128.xor(c, line(p + 2 * part + o));
      d = v128.xor(d, line(p + 3 * part + o));
    }
  } else if (streams == 2) {
    const part = bytes >> 1;
    for (let o: usize = 0; o < part; o += 64) {
      a = v128.xor(a, line(p + o));
      b = v128.xor(b, line(p + part + o));
    }
  } else {
    for (let o: usize = 0; o < bytes; o += 64) a = v128.xor(a, line(p + o));
  }
  const s = v128.xor(v128.xor(a, b), v128.xor(c, d));
  return i32x4.extract_lane(s, 0) ^ i32x4.extract_lane(s, 1) ^ i32x4.extract_lane(s, 2) ^ i32x4.extract_lane(s, 3);
}

/**
 * stream_probe over parts [i0, i1) of `part` bytes each from p: a thread pool splits the parts
 * among its threads, which gives the limit for several cores streaming at once.
 */
export function stream_probe_parts(p: usize, part: usize, streams: i32, i0: i32, i1: i32): i32 {
  let x = 0;
  for (let i = i0; i < i1; i++) x ^= stream_probe(p + <usize>i * part, part, streams);
  return x;
}
