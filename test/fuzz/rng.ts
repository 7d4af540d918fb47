/**
 * The fuzzer's random numbers: a small seeded generator (splitmix32 seeding a xorshift128+ style
 * state) so that a (seed, case index) pair always makes the same case, and helpers for the
 * choices mutators make.
 */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    let x = seed >>> 0 || 0x9e3779b9;
    const next = () => {
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next() | 1;
  }

  /** 32 random bits (xoshiro128**) */
  u32(): number {
    const r = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return r;
  }

  /** uniform in [0, 1) */
  float(): number {
    return this.u32() / 2 ** 32;
  }

  /** integer in [0, n) */
  int(n: number): number {
    return Math.floor(this.float() * n);
  }

  /** integer in [lo, hi] */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }

  /** an item by weight: [[weight, item], ...] */
  weighted<T>(items: readonly (readonly [number, T])[]): T {
    let total = 0;
    for (const [w] of items) total += w;
    let r = this.float() * total;
    for (const [w, item] of items) {
      r -= w;
      if (r < 0) return item;
    }
    return items[items.length - 1][1];
  }

  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.u32() & 0xff;
    return out;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** The seed of case `index` of a run seeded `seed`: each case is reproducible on its own. */
export function caseSeed(seed: number, index: number): number {
  return (Math.imul(seed >>> 0, 0x2545f491) ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0;
}
