/**
 * How the flash reader's physical reads reach the kernel, kept apart from the reader
 * (flash-reader.ts), which queues, coalesces, verifies and counts them. Two backends:
 * aio-backend.ts (batches through an AioBinding: Linux native AIO in Node, OPFS reader workers in
 * the browser) and thread-pool-backend.ts (one fs.read per read on libuv's thread pool).
 */

/** One physical read as a backend sees it: bytes [fileOffset + done, fileOffset + length) to memory at dst + done. */
export interface ReadOp {
  fileOffset: number;
  length: number;
  dst: number;
  /** bytes already read (a short read continues from here) */
  done: number;
  /** its AIO request id while in flight */
  slot: number;
  /** the I/O thread found a checksum mismatch in it (the reader's verify describes it) */
  badChecksum: boolean;
  /** how the backend reports the read: an error, or the bytes that landed (0 at end of file) */
  cb: (err: NodeJS.ErrnoException | null, bytesRead: number) => void;
}

/** What a backend may ask of the reader it serves. */
export interface ReadHost {
  /** a view over the reader's whole memory, re-taken after the memory grew */
  view(): Uint8Array;
  /** reads issued and not yet reported */
  inFlight(): number;
  /** physical reads issued so far (the reader's stats) */
  readsIssued(): number;
  /** issue queued reads while the queue depth allows */
  pump(): void;
}

export interface ReadBackend {
  readonly kind: "aio" | "threads";
  /**
   * Whether the backend checks the reader's checksums itself (the AIO I/O thread does, off the
   * computing thread); the reader's verify then runs only to describe a mismatch, or on a read that
   * landed in pieces, which the backend never saw whole.
   */
  readonly checksChecksums: boolean;
  /**
   * True while the backend reports a batch of completions: the reader issues nothing meanwhile,
   * and the backend pumps once at the end rather than once per completion.
   */
  readonly reporting: boolean;
  /** Start reading what is left of op; reported through op.cb. May be held until flush(). */
  start(op: ReadOp): void;
  /** Hand over the reads start() held (the reader calls it at the end of each pump). */
  flush(): void;
  /**
   * Report the reads that have finished (waiting up to waitMs for the first) and submit queued ones
   * in their place; a no-op where completions arrive on their own.
   */
  service(waitMs: number): void;
  /** Release what the backend holds, once no read is in flight (the reader then closes the file). */
  close(): void;
}
