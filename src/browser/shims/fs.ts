/**
 * `node:fs` in the browser build: the synchronous positional reads the GGUF and store readers
 * make, over OPFS sync access handles that the engine worker opened beforehand
 * (`registerFile`), since opening one is asynchronous. A descriptor is a handle and a path; any
 * number of descriptors share one handle (reads are positional). Anything else throws ENOSYS.
 */
import type { SyncAccessHandle } from "../web-types.js";

interface OpenFile {
  handle: SyncAccessHandle;
  mtimeMs: number;
}

const files = new Map<string, OpenFile>();
const fds = new Map<number, { path: string; file: OpenFile; pos: number }>();
let nextFd = 100;

/** Make `path` openable with openSync (the handle stays the caller's to close, after unregisterFile). */
export function registerFile(path: string, handle: SyncAccessHandle, mtimeMs = 0): void {
  files.set(path, { handle, mtimeMs });
}

export function unregisterFile(path: string): void {
  files.delete(path);
  for (const [fd, f] of fds) if (f.path === path) fds.delete(fd);
}

function errno(code: string, message: string): Error {
  return Object.assign(new Error(`${code}: ${message}`), { code });
}

function desc(fd: number) {
  const f = fds.get(fd);
  if (!f) throw errno("EBADF", `bad file descriptor ${fd}`);
  return f;
}

export const constants = { O_RDONLY: 0, O_WRONLY: 1, O_RDWR: 2, O_CREAT: 0o100, O_TRUNC: 0o1000, O_DIRECT: 0o40000 };

export function existsSync(path: string): boolean {
  return files.has(path);
}

export function openSync(path: string, flags?: number | string): number {
  const file = files.get(String(path));
  if (!file) throw errno("ENOENT", `no such file in the browser's private file system, open '${path}'`);
  if (typeof flags === "string" && flags !== "r") throw errno("EROFS", `only reads are supported, open '${path}'`);
  const fd = nextFd++;
  fds.set(fd, { path: String(path), file, pos: 0 });
  return fd;
}

/** The path a descriptor was opened with. */
export function pathOfFd(fd: number): string {
  return desc(fd).path;
}

export function closeSync(fd: number): void {
  fds.delete(fd);
}

function view(buffer: ArrayBufferView, offset: number, length: number): Uint8Array {
  return new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);
}

export function readSync(
  fd: number,
  buffer: ArrayBufferView,
  offset = 0,
  length = buffer.byteLength - offset,
  position: number | bigint | null = null,
): number {
  const f = desc(fd);
  const at = position === null || position === undefined ? f.pos : Number(position);
  const n = f.file.handle.read(view(buffer, offset, length), { at });
  if (position === null || position === undefined) f.pos += n;
  return n;
}

/** The callback read (libuv's thread pool in Node): a synchronous read reported on the next turn. */
export function read(
  fd: number,
  buffer: ArrayBufferView,
  offset: number,
  length: number,
  position: number,
  cb: (err: Error | null, bytesRead: number) => void,
): void {
  let n = 0;
  let err: Error | null = null;
  try {
    n = readSync(fd, buffer, offset, length, position);
  } catch (e) {
    err = e as Error;
  }
  setTimeout(() => cb(err, n), 0);
}

function stats(file: OpenFile, bigint: boolean) {
  const size = file.handle.getSize();
  const yes = () => true;
  const no = () => false;
  return {
    size: bigint ? BigInt(size) : size,
    mtimeMs: bigint ? BigInt(Math.floor(file.mtimeMs)) : file.mtimeMs,
    mtimeNs: BigInt(Math.floor(file.mtimeMs)) * 1000000n,
    ino: 0,
    dev: 0,
    isFile: yes,
    isDirectory: no,
    isFIFO: no,
    isCharacterDevice: no,
    isBlockDevice: no,
    isSocket: no,
    isSymbolicLink: no,
  };
}

export function fstatSync(fd: number, options?: { bigint?: boolean }) {
  return stats(desc(fd).file, options?.bigint === true);
}

export function statSync(path: string, options?: { bigint?: boolean }) {
  const file = files.get(String(path));
  if (!file) throw errno("ENOENT", `no such file in the browser's private file system, stat '${path}'`);
  return stats(file, options?.bigint === true);
}

function unsupported(name: string) {
  return (): never => {
    throw errno("ENOSYS", `fs.${name} is not available in the browser build`);
  };
}

export const readFileSync = unsupported("readFileSync");
export const writeFileSync = unsupported("writeFileSync");
export const writeSync = unsupported("writeSync");
export const mkdirSync = unsupported("mkdirSync");
export const readdirSync = unsupported("readdirSync");
export const renameSync = unsupported("renameSync");
export const rmSync = unsupported("rmSync");
export const unlinkSync = unsupported("unlinkSync");
export const createReadStream = unsupported("createReadStream");
export const createWriteStream = unsupported("createWriteStream");
export const realpathSync = unsupported("realpathSync");

export default {
  constants,
  existsSync,
  openSync,
  closeSync,
  readSync,
  read,
  fstatSync,
  statSync,
  readFileSync,
  writeFileSync,
  writeSync,
};
