/**
 * A shared WebAssembly.Memory that holds what the kernels touch (weights, KV cache, activations),
 * and a bump allocator over it. Buffers are laid out once at load; the decode loop allocates
 * nothing. wasm32 caps a memory at 4 GiB (ARENA_MAX_BYTES): a model larger than that is split
 * into shards of whole layers, one arena each (src/model/shards.ts).
 *
 * Huge pages: each grow asks the kernel (through the native addon, madvise MADV_HUGEPAGE) to back
 * the new memory with 2 MiB pages where Linux's transparent huge pages are set to "madvise" (the
 * default of most distributions). The kernels stream tens of MiB of weights per token: with 4 KiB
 * pages each 4 KiB read walks the page tables, and a 7B layer's matrices outrun the TLB's reach
 * many times over. Dense Q4_1 matvecs measured +6-18% with it, hot and cold, a 7B token at 3 GiB
 * a few percent (docs/benchmarks-log.md).
 * Nothing changes what is allocated or touched: the arena's bytes are the budget's either way.
 * POWERINFER_THP=0 turns it off; without the addon (the browser, no compiler) it is not asked.
 */
import { aio } from "../io/aio.js";

const PAGE = 65536;
/** Transparent huge pages: 2 MiB on x86-64 and most arm64 kernels. */
const HUGE = 2 << 20;
const MAX_PAGES = 65536;
/** The most one memory can hold: wasm32 addresses 4 GiB. */
export const ARENA_MAX_BYTES = MAX_PAGES * PAGE;
/** The kernel module's own static data and stack live below this (in every memory it is instantiated over). */
export const ARENA_START = 1 << 20;

export class Arena {
  readonly memory: WebAssembly.Memory;
  private top = ARENA_START;

  constructor(initialBytes = 4 << 20) {
    const pages = Math.max(17, Math.ceil(initialBytes / PAGE));
    this.memory = new WebAssembly.Memory({ initial: pages, maximum: MAX_PAGES, shared: true });
    adviseHugePages(this.memory.buffer, 0);
  }

  /** Bytes handed out so far (including the reserved low region). */
  get used(): number {
    return this.top;
  }

  /** Reserve `bytes` aligned to `align` (a power of two, default 64); returns the byte offset. */
  alloc(bytes: number, align = 64): number {
    const ptr = Math.ceil(this.top / align) * align;
    const end = ptr + bytes;
    if (end > ARENA_MAX_BYTES) {
      throw new Error(
        `out of WebAssembly memory: need ${(end / 2 ** 30).toFixed(2)} GiB in one memory, wasm32 allows 4 GiB`,
      );
    }
    const have = this.memory.buffer.byteLength;
    if (end > have) {
      this.memory.grow(Math.ceil((end - have) / PAGE));
      adviseHugePages(this.memory.buffer, have);
    }
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

let hugePagesOff: boolean | undefined;

/** Huge pages for [from, end of buffer): from the 2 MiB page holding `from` (see the top). */
function adviseHugePages(buffer: ArrayBufferLike, from: number): void {
  hugePagesOff ??= typeof process === "undefined" || process.env.POWERINFER_THP === "0";
  if (hugePagesOff) return;
  const advise = aio().binding?.hugePages;
  if (!advise) return;
  const start = Math.floor(from / HUGE) * HUGE;
  advise(new Uint8Array(buffer, start, buffer.byteLength - start));
}
