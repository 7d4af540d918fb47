import { oneLine } from "../printable.js";

/** Anything wrong with a store file: names the file and, where known, the byte offset. */
export class StoreError extends Error {
  constructor(
    readonly file: string,
    message: string,
    readonly offset?: number,
  ) {
    super(oneLine(`${file}: ${message}${offset !== undefined ? ` (at byte offset ${offset})` : ""}`));
    this.name = "StoreError";
  }
}
