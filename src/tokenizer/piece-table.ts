/**
 * Every token's decoded bytes in one buffer, found by offset. A Uint8Array per token cost about
 * 190 bytes of heap a token for the typed array objects alone, several times the bytes they hold:
 * 29 MiB for a 152K-token vocabulary, which under a memory budget is taken from the neuron cache.
 */
export class PieceTable {
  /** token id's bytes are bytes[start[id] .. start[id + 1]) */
  private constructor(
    readonly bytes: Uint8Array,
    readonly start: Uint32Array,
  ) {}

  get size(): number {
    return this.start.length - 1;
  }

  length(id: number): number {
    return this.start[id + 1] - this.start[id];
  }

  /** The first byte of `id`, or -1 when it has none. */
  firstByte(id: number): number {
    return this.start[id + 1] > this.start[id] ? this.bytes[this.start[id]] : -1;
  }

  /** The bytes of `id` (a view into the table: do not modify). */
  get(id: number): Uint8Array {
    return this.bytes.subarray(this.start[id], this.start[id + 1]);
  }

  /** Token `id`'s bytes from its `skip`-th on, copied to dst at `at`; returns how many. */
  copyTo(id: number, dst: Uint8Array, at: number, skip = 0): number {
    const from = this.start[id] + skip;
    const to = this.start[id + 1];
    if (to <= from) return 0;
    dst.set(this.bytes.subarray(from, to), at);
    return to - from;
  }

  /** A table built token by token, in id order. */
  static builder(tokens: number): PieceTableBuilder {
    return new PieceTableBuilder(tokens);
  }

  /** @internal */
  static of(bytes: Uint8Array, start: Uint32Array): PieceTable {
    return new PieceTable(bytes, start);
  }
}

export class PieceTableBuilder {
  private bytes: Uint8Array;
  private readonly start: Uint32Array;
  private n = 0;
  private end = 0;

  constructor(tokens: number) {
    this.start = new Uint32Array(tokens + 1);
    this.bytes = new Uint8Array(Math.max(64, tokens * 8));
  }

  /** Room for `more` bytes after the end. */
  private reserve(more: number): void {
    if (this.end + more <= this.bytes.length) return;
    const grown = new Uint8Array(Math.max(this.end + more, this.bytes.length * 2));
    grown.set(this.bytes.subarray(0, this.end));
    this.bytes = grown;
  }

  /**
   * `text` in UTF-8 added to the current token's bytes, as TextEncoder writes it (a lone
   * surrogate becomes U+FFFD), written in place: a view per token for encodeInto left ~12 MiB to
   * collect on a 152K vocabulary.
   */
  text(text: string): void {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit
    this.reserve(text.length * 3);
    const b = this.bytes;
    let at = this.end;
    for (let i = 0; i < text.length; i++) {
      let c = text.charCodeAt(i);
      if (c < 0x80) {
        b[at++] = c;
        continue;
      }
      if (c < 0x800) {
        b[at++] = 0xc0 | (c >> 6);
        b[at++] = 0x80 | (c & 63);
        continue;
      }
      if (c >= 0xd800 && c <= 0xdfff) {
        const lo = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
        if (c <= 0xdbff && lo >= 0xdc00 && lo <= 0xdfff) {
          const cp = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
          b[at++] = 0xf0 | (cp >> 18);
          b[at++] = 0x80 | ((cp >> 12) & 63);
          b[at++] = 0x80 | ((cp >> 6) & 63);
          b[at++] = 0x80 | (cp & 63);
          i++;
          continue;
        }
        c = 0xfffd;
      }
      b[at++] = 0xe0 | (c >> 12);
      b[at++] = 0x80 | ((c >> 6) & 63);
      b[at++] = 0x80 | (c & 63);
    }
    this.end = at;
  }

  /** One byte added to the current token's bytes. */
  byte(b: number): void {
    this.reserve(1);
    this.bytes[this.end++] = b;
  }

  /** Ends the current token: its bytes are those added since the last endToken. */
  endToken(): void {
    this.start[++this.n] = this.end;
  }

  finish(): PieceTable {
    if (this.n !== this.start.length - 1)
      throw new Error(`piece table: ${this.n} tokens added of ${this.start.length - 1}`);
    return PieceTable.of(this.bytes.slice(0, this.end), this.start);
  }
}
