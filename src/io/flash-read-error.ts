/** The error every failed read of the flash reader (flash-reader.ts) rejects its batch with: file, offset, length and why. */
export class FlashReadError extends Error {
  /** errno code of the failed read (EIO, ...), when there was one */
  readonly code?: string;
  constructor(
    readonly file: string,
    readonly fileOffset: number,
    readonly length: number,
    what: string,
    override readonly cause?: unknown,
  ) {
    super(`${file}: ${what} (read of ${length} bytes at byte offset ${fileOffset})`);
    this.name = "FlashReadError";
    const code = (cause as { code?: unknown } | undefined)?.code;
    if (typeof code === "string") this.code = code;
  }
}
