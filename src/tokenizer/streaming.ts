/**
 * Streaming detokenization: token ids in, text out, never splitting a UTF-8 character.
 *
 * Byte-fallback tokens carry one byte each, so a character like "é" or "😀" may arrive over
 * several tokens; the decoder holds the incomplete tail until the character completes. What it
 * prints is the concatenation of llama.cpp's token_to_piece for each token, which is what
 * llama.cpp's own streaming prints.
 */
import type { Tokenizer } from "./tokenizer.js";

export interface StreamingDecoderOptions {
  /**
   * Drop one leading space from the first token when the model adds a space prefix, as
   * llama.cpp's detokenizer does for the first token (default false: streaming a continuation
   * after a prompt keeps the space).
   */
  removeLeadingSpace?: boolean;
  /** Render control and unknown tokens as their text (default false: they print nothing). */
  special?: boolean;
}

export class StreamingDecoder {
  private decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  private first = true;
  private readonly strip: boolean;
  private readonly special: boolean;

  constructor(
    private readonly tokenizer: Tokenizer,
    opts: StreamingDecoderOptions = {},
  ) {
    this.strip = opts.removeLeadingSpace === true && tokenizer.addSpacePrefix;
    this.special = opts.special === true;
  }

  /** The text this token completes ("" while a multi-byte character is still incomplete). */
  push(id: number): string {
    let p = this.special ? this.tokenizer.specialPiece(id) : this.tokenizer.piece(id);
    if (this.first) {
      this.first = false;
      if (this.strip && p.length > 0 && p[0] === 0x20) p = p.subarray(1);
    }
    if (p.length === 0) return "";
    return this.decoder.decode(p, { stream: true });
  }

  /** Whatever is still held (an incomplete character becomes U+FFFD). */
  flush(): string {
    return this.decoder.decode();
  }
}
