/**
 * Opening the flash reader's file: with O_DIRECT where it is asked for and possible, so the kernel's
 * page cache never holds model weights behind the memory budget's back; else buffered, and why.
 */
import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { FlashReadError } from "./flash-read-error.js";

/** What O_DIRECT needs of every read: file offset, length and destination address in multiples of it. */
export const FLASH_ALIGN = 4096;

/** Whether v is an offset or length O_DIRECT takes: a non-negative multiple of FLASH_ALIGN. */
export function flashAligned(v: number): boolean {
  return Number.isSafeInteger(v) && v >= 0 && v % FLASH_ALIGN === 0;
}

export interface OpenedFile {
  fd: number;
  /** whether reads bypass the page cache (O_DIRECT) */
  direct: boolean;
  /** why direct I/O is off, when it is */
  reason: string | null;
  /** file size at open */
  size: number;
}

/**
 * Open `path` for reading. want: true (O_DIRECT or a thrown FlashReadError), false (buffered),
 * "auto" (O_DIRECT where possible); isWasm: the reads land in a WebAssembly.Memory, whose page
 * aligned base is what makes an aligned offset an aligned address.
 */
export function openFile(path: string, want: boolean | "auto", isWasm: boolean): OpenedFile {
  let fd = -1;
  let direct = false;
  let reason: string | null = null;
  if (want !== false) {
    const flag = (constants as { O_DIRECT?: number }).O_DIRECT;
    if (flag === undefined) reason = `this platform (${process.platform}) has no O_DIRECT`;
    else if (!isWasm)
      reason =
        "the destination is a plain ArrayBuffer/SharedArrayBuffer, whose address is not page aligned (O_DIRECT needs a WebAssembly.Memory)";
    else {
      try {
        fd = openSync(path, constants.O_RDONLY | flag);
        probeDirect(fd);
        direct = true;
      } catch (e) {
        if (fd >= 0) closeSync(fd);
        fd = -1;
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== "EINVAL" && code !== "EOPNOTSUPP" && code !== "ENOTSUP") throw openError(path, e);
        reason = `the file system refuses O_DIRECT (${code}; e.g. tmpfs before Linux 6.6, /proc, some network and FUSE file systems)`;
      }
    }
    if (!direct && want === true)
      throw new FlashReadError(path, 0, 0, `direct I/O was required but is not possible: ${reason}`);
  } else reason = "buffered reads were asked for (direct: false)";
  if (fd < 0) {
    try {
      fd = openSync(path, "r");
    } catch (e) {
      throw openError(path, e);
    }
  }
  let size: number;
  try {
    size = fstatSync(fd).size;
  } catch (e) {
    closeSync(fd);
    throw openError(path, e);
  }
  return { fd, direct, reason, size };
}

/**
 * Some file systems accept O_DIRECT at open and refuse it at read time; find out now with one
 * aligned 4 KiB read into a fresh (page-aligned) wasm page rather than on the first real read.
 */
function probeDirect(fd: number): void {
  const page = new Uint8Array(new WebAssembly.Memory({ initial: 1 }).buffer);
  readSync(fd, page, 0, FLASH_ALIGN, 0);
}

function openError(path: string, e: unknown): FlashReadError {
  return new FlashReadError(path, 0, 0, `cannot open: ${(e as Error).message}`, e);
}
