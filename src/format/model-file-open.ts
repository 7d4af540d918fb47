/**
 * Opening a model file (GGUF or neuron store) so that anything but a non-empty regular file is
 * refused with a message that says what it is, instead of hanging or failing later.
 *
 * Why not a plain open: opening a FIFO for reading blocks until a writer appears (forever, for a
 * user who typed the wrong path), a directory opens fine on Linux and fails at the first read with
 * a bare EISDIR, and a character device such as /dev/zero reports size 0 and reads zeros without
 * end. The file is opened with O_NONBLOCK, which makes opening a FIFO return at once (and changes
 * nothing for a regular file), and the kind is checked on the open descriptor, so no stat-then-open
 * race can swap in something else. Where the platform has no O_NONBLOCK (Windows) the path is
 * stat'ed first.
 */
import { closeSync, constants, fstatSync, openSync, statSync, type Stats } from "node:fs";

/** What a stat describes, in words ("a directory", "a FIFO (named pipe)", ...). */
export function fileKind(st: Stats): string {
  if (st.isFile()) return "a regular file";
  if (st.isDirectory()) return "a directory";
  if (st.isFIFO()) return "a FIFO (named pipe)";
  if (st.isCharacterDevice()) return "a character device";
  if (st.isBlockDevice()) return "a block device";
  if (st.isSocket()) return "a socket";
  return "not a regular file";
}

function refuse(st: Stats, fail: (message: string) => Error): never {
  throw fail(
    `is ${fileKind(st)}, not a regular file: a model file is read at random offsets, so give the file itself ` +
      `(not a pipe, device or directory)`,
  );
}

/**
 * Open `path` for reading: returns the descriptor and the file's size. Throws `fail(message)` when
 * it cannot be opened, is not a regular file, or is empty; the message does not repeat the path
 * (the caller's error type names the file).
 */
export function openModelFile(path: string, fail: (message: string) => Error): { fd: number; size: number } {
  const nonBlocking = (constants as { O_NONBLOCK?: number }).O_NONBLOCK;
  const cannotOpen = (e: unknown) => fail(`cannot open: ${(e as Error).message}`);
  if (nonBlocking === undefined) {
    let st: Stats;
    try {
      st = statSync(path);
    } catch (e) {
      throw cannotOpen(e);
    }
    if (!st.isFile()) refuse(st, fail);
  }
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | (nonBlocking ?? 0));
  } catch (e) {
    throw cannotOpen(e);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) refuse(st, fail);
    if (st.size === 0) throw fail("the file is empty (0 bytes)");
    return { fd, size: st.size };
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}
