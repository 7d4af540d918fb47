/**
 * The flash reader's bridge region (FlashReaderOptions.bridge): consecutive requests near each
 * other in the file (a few KiB apart, or adjacent in the file but scattered over a cache's slots)
 * read as one read into a slot of the region, each request's bytes copied to its place as the
 * read lands. A random read costs a fixed part (~10 us on this machine's disk at queue depth 256)
 * plus its bytes (~0.5 us a KiB), so a gap of a few KiB read for nothing costs less than a second
 * read. Slots are taken when a batch is planned and given back when their read ends.
 */
import { FLASH_ALIGN, flashAligned } from "./direct-open.js";
import type { FlashReadRequest } from "./flash-reader.js";

/** The longest bridged read, and so the size of a bridge slot. */
export const BRIDGE_SLOT_BYTES = 32 << 10;
/**
 * Default FlashReaderOptions.maxGapBytes. On this machine's virtual disk at queue depth 256 a
 * random 4 KiB read costs ~12.5 us of the disk's time and a 16 KiB one ~19 us: a gap is worth
 * reading while its bytes cost less than the ~10 us a second read would add.
 */
export const BRIDGE_GAP_BYTES = 12 << 10;
/** Memory for a bridge region that keeps up with a full queue of bridged reads (fewer slots only bridge less). */
export const BRIDGE_REGION_BYTES = 64 * BRIDGE_SLOT_BYTES;

/** Memory [dst, dst + bytes) of the reader's that only bridged reads use. */
export interface BridgeRegion {
  dst: number;
  bytes: number;
}

export class ReadBridge {
  /** the most unrequested bytes a bridged read spans between two requests */
  readonly maxGap: number;
  private readonly base: number;
  /** free slots, a stack: free[0, freeCount) */
  private readonly free: Int32Array;
  private freeCount: number;

  /** No region: nothing is bridged. */
  constructor(region: BridgeRegion | undefined, maxGapBytes = BRIDGE_GAP_BYTES) {
    const slots = region ? Math.floor(region.bytes / BRIDGE_SLOT_BYTES) : 0;
    this.base = region?.dst ?? 0;
    this.free = new Int32Array(slots);
    for (let i = 0; i < slots; i++) this.free[i] = slots - 1 - i;
    this.freeCount = slots;
    this.maxGap = maxGapBytes;
  }

  /** A RangeError for a region or gap the reader cannot use in a memory of `memoryBytes`, else null. */
  static refusal(
    region: BridgeRegion | undefined,
    maxGapBytes: number | undefined,
    memoryBytes: number,
  ): RangeError | null {
    if (
      region &&
      (!flashAligned(region.dst) ||
        !flashAligned(region.bytes) ||
        region.bytes < BRIDGE_SLOT_BYTES ||
        region.dst + region.bytes > memoryBytes)
    )
      return new RangeError(
        `FlashReader: bridge [${region.dst}, ${region.dst + region.bytes}) must be ${FLASH_ALIGN}-byte aligned, hold at least ${BRIDGE_SLOT_BYTES} bytes and lie within the memory (${memoryBytes} bytes)`,
      );
    if (maxGapBytes !== undefined && !(flashAligned(maxGapBytes) && maxGapBytes < BRIDGE_SLOT_BYTES))
      return new RangeError(
        `FlashReader: maxGapBytes must be a multiple of ${FLASH_ALIGN} below ${BRIDGE_SLOT_BYTES}, got ${maxGapBytes}`,
      );
    return null;
  }

  /**
   * The end (exclusive) of the run of requests from i that one bridged read of at most `maxRead`
   * bytes serves: each after the one before in the file, at most maxGap past its end; i + 1 where
   * no slot is free.
   */
  runEnd(requests: readonly FlashReadRequest[], i: number, count: number, maxRead: number): number {
    if (this.freeCount === 0) return i + 1;
    const start = requests[i].fileOffset;
    const limit = Math.min(BRIDGE_SLOT_BYTES, maxRead);
    let end = start + requests[i].length;
    let j = i + 1;
    for (; j < count; j++) {
      const q = requests[j];
      const gap = q.fileOffset - end;
      if (gap < 0 || gap > this.maxGap || q.fileOffset + q.length - start > limit) break;
      end = q.fileOffset + q.length;
    }
    return j;
  }

  /** A free slot, taken (runEnd said there is one). */
  take(): number {
    return this.free[--this.freeCount];
  }

  give(slot: number): void {
    this.free[this.freeCount++] = slot;
  }

  /** Where slot `slot` is in the reader's memory. */
  address(slot: number): number {
    return this.base + slot * BRIDGE_SLOT_BYTES;
  }

  /** Requests [first, first + count) copied to their places from a bridged read of the file at `fileOffset` that landed at `from`. */
  static copyOut(
    view: Uint8Array,
    requests: readonly FlashReadRequest[],
    first: number,
    count: number,
    fileOffset: number,
    from: number,
  ): void {
    for (let k = first; k < first + count; k++) {
      const r = requests[k];
      const at = from + (r.fileOffset - fileOffset);
      view.copyWithin(r.dst, at, at + r.length);
    }
  }
}
