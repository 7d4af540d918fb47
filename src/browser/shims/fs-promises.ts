/**
 * `node:fs/promises` in the browser build: what the store and GGUF writers use (open for
 * writing, positional writes, sync, close, rename, rm), over OPFS sync access handles. Lets the
 * converter write a store straight into OPFS, a bounded buffer at a time.
 */
import { opfsRoot, type SyncAccessHandle } from "../web-types.js";
import { opfsName } from "../opfs-paths.js";
import { constants } from "./fs.js";

class OpfsFileHandle {
  constructor(private handle: SyncAccessHandle | null) {}
  private h(): SyncAccessHandle {
    if (!this.handle) throw Object.assign(new Error("EBADF: file handle is closed"), { code: "EBADF" });
    return this.handle;
  }
  async write(
    buffer: ArrayBufferView,
    offset = 0,
    length = buffer.byteLength - offset,
    position: number | null = null,
  ): Promise<{ bytesWritten: number; buffer: ArrayBufferView }> {
    const view = new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);
    const at = position ?? this.h().getSize();
    let done = 0;
    while (done < length) done += this.h().write(view.subarray(done), { at: at + done });
    return { bytesWritten: done, buffer };
  }
  async read(buffer: ArrayBufferView, offset: number, length: number, position: number) {
    const n = this.h().read(new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length), { at: position });
    return { bytesRead: n, buffer };
  }
  async truncate(len = 0): Promise<void> {
    this.h().truncate(len);
  }
  async sync(): Promise<void> {
    this.h().flush();
  }
  async datasync(): Promise<void> {
    this.h().flush();
  }
  async stat() {
    return { size: this.h().getSize(), isFile: () => true };
  }
  async close(): Promise<void> {
    if (this.handle) {
      this.handle.flush();
      this.handle.close();
      this.handle = null;
    }
  }
}

export type FileHandle = OpfsFileHandle;

/**
 * flags as a string ("r", "r+", "w", "a"), or as Node's numbers: O_DIRECT is refused as a file
 * system without it refuses it (EINVAL), and the caller writes through the page cache instead.
 */
export async function open(path: string, flags: string | number = "r"): Promise<OpfsFileHandle> {
  if (typeof flags === "number") {
    if (flags & constants.O_DIRECT)
      throw Object.assign(new Error(`EINVAL: the private file system has no O_DIRECT, open '${path}'`), {
        code: "EINVAL",
      });
    flags = flags & constants.O_TRUNC ? "w" : flags & constants.O_CREAT ? "a" : flags & 3 ? "r+" : "r";
  }
  const root = await opfsRoot();
  const create = flags.startsWith("w") || flags.startsWith("a");
  const fh = await root.getFileHandle(opfsName(path), { create });
  const handle = await fh.createSyncAccessHandle();
  if (flags.startsWith("w")) handle.truncate(0);
  return new OpfsFileHandle(handle);
}

export async function rename(from: string, to: string): Promise<void> {
  const root = await opfsRoot();
  const src = await root.getFileHandle(opfsName(from));
  if (!src.move) throw new Error("this browser cannot rename files in its private file system (FileSystemHandle.move)");
  await root.removeEntry(opfsName(to)).catch(() => undefined);
  await src.move(opfsName(to));
}

export async function rm(path: string, options?: { force?: boolean }): Promise<void> {
  const root = await opfsRoot();
  try {
    await root.removeEntry(opfsName(path));
  } catch (e) {
    if (!options?.force) throw e;
  }
}

export async function unlink(path: string): Promise<void> {
  await rm(path);
}

export default { open, rename, rm, unlink };
