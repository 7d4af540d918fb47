/**
 * The one shared WebAssembly.Memory that holds everything the kernels touch (weights, KV cache,
 * activations), and a bump allocator over it. Buffers are laid out once at load; the decode
 * loop allocates nothing. wasm32 caps the memory at 4 GiB.
 */
const PAGE = 65536;
const MAX_PAGES = 65536;
/** The kernel module's own static data and stack live below this. */
const ARENA_START = 1 << 20;

export class Arena {
  readonly memory: WebAssembly.Memory;
  private top = ARENA_START;

  constructor(initialBytes = 4 << 20) {
    const pages = Math.max(17, Math.ceil(initialBytes / PAGE));
    this.memory = new WebAssembly.Memory({ initial: pages, maximum: MAX_PAGES, shared: true });
  }

  /** Bytes handed out so far (including the reserved low region). */
  get used(): number {
    return this.top;
  }

  /** Reserve `bytes` aligned to `align` (a power of two, default 64); returns the byte offset. */
  alloc(bytes: number, align = 64): number {
    const ptr = Math.ceil(this.top / align) * align;
    const end = ptr + bytes;
    if (end > MAX_PAGES * PAGE) {
      throw new Error(`out of WebAssembly memory: need ${(end / 2 ** 30).toFixed(2)} GiB, wasm32 allows 4 GiB`);
    }
    const have = this.memory.buffer.byteLength;
    if (end > have) this.memory.grow(Math.ceil((end - have) / PAGE));
    this.top = end;
    return ptr;
  }

  /** Views over the current buffer (re-take them after a grow). */
  f32(ptr: number, length: number): Float32Array {
    return new Float32Array(this.memory.buffer, ptr, length);
  }
  u8(ptr: number, length: number): Uint8Array {
    return new Uint8Array(this.memory.buffer, ptr, length);
  }
  i32(ptr: number, length: number): Int32Array {
    return new Int32Array(this.memory.buffer, ptr, length);
  }
}
