/**
 * The tokenizer: GGUF vocabulary -> token ids and back, reproducing llama.cpp's llama_tokenize /
 * llama_token_to_piece / llama_detokenize.
 */
import { BpeEncoder } from "./bpe.js";
import { SpmEncoder } from "./spm.js";
import { wellFormed } from "./unicode.js";
import {
  loadVocab,
  TokenAttr,
  TokenizerError,
  TokenType,
  type TokenizerMetadataSource,
  type Vocab,
  type VocabKind,
} from "./vocab.js";

export interface EncodeOptions {
  /** Put the BOS token first (default false; `tokenizer.addBos` says what the model wants). */
  addBos?: boolean;
  /** Put the EOS token last (default false; `tokenizer.addEos` says what the model wants). */
  addEos?: boolean;
  /**
   * Turn the text of control tokens ("<s>", "<|im_start|>") into their ids (default false).
   * User-defined tokens are always matched, as in llama.cpp.
   */
  parseSpecial?: boolean;
}

export interface DecodeOptions {
  /**
   * Drop one leading space from the first token's piece when the model adds a space prefix
   * (SentencePiece), as llama.cpp's detokenizer does (default false). A BOS or other control
   * token in first position uses up the strip, as there.
   */
  removeLeadingSpace?: boolean;
  /** Render control and unknown tokens as their text instead of nothing (default false). */
  special?: boolean;
}

const SPACE = 0x20;
const EMPTY = new Uint8Array(0);
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

export class Tokenizer {
  readonly vocabSize: number;
  readonly kind: VocabKind;
  /** BOS / EOS / EOT / unknown / padding ids; -1 when the model has none. */
  readonly bosId: number;
  readonly eosId: number;
  readonly eotId: number;
  readonly unkId: number;
  readonly padId: number;
  /** Newline token (SPM: <0x0A>; BPE: the first token of "\n"), -1 when there is none. */
  readonly nlId: number;
  /** Whether the model wants BOS first (metadata, else llama.cpp's default for the type). */
  readonly addBos: boolean;
  readonly addEos: boolean;
  /** SentencePiece's leading space before text (and after each special token). */
  readonly addSpacePrefix: boolean;

  private readonly vocab: Vocab;
  private readonly spm: SpmEncoder | null;
  private readonly bpe: BpeEncoder | null;

  private constructor(vocab: Vocab) {
    this.vocab = vocab;
    this.vocabSize = vocab.tokens.length;
    this.kind = vocab.kind;
    this.bosId = vocab.bosId;
    this.eosId = vocab.eosId;
    this.eotId = vocab.eotId;
    this.unkId = vocab.unkId;
    this.padId = vocab.padId;
    this.nlId = vocab.nlId;
    this.addBos = vocab.addBos;
    this.addEos = vocab.addEos;
    this.addSpacePrefix = vocab.addSpacePrefix;
    this.spm = vocab.kind === "spm" ? new SpmEncoder(vocab) : null;
    this.bpe = vocab.kind === "bpe" ? new BpeEncoder(vocab) : null;
    if (vocab.nlFromText) {
      const ids = this.encode("\n");
      this.nlId = ids.length > 0 ? ids[0] : vocab.padId;
    }
  }

  /**
   * Build from a GGUF file's `tokenizer.ggml.*` metadata (or any object with such a metadata
   * Map). Throws a TokenizerError naming the missing or malformed key.
   */
  static fromGGUF(file: TokenizerMetadataSource): Tokenizer {
    return new Tokenizer(loadVocab(file));
  }

  /** `tokenizer.ggml.pre` ("" when absent). */
  get pre(): string {
    return this.vocab.pre;
  }

  /** Text to token ids, exactly as llama.cpp's llama_tokenize(add_special, parse_special). */
  encode(text: string, opts: EncodeOptions = {}): number[] {
    if (typeof text !== "string") throw new TypeError(`Tokenizer.encode: text must be a string, got ${typeof text}`);
    const v = this.vocab;
    const out: number[] = [];
    if (opts.addBos) {
      if (v.bosId < 0) throw new TokenizerError("encode({ addBos: true }): this model has no BOS token");
      out.push(v.bosId);
    }
    const fragments = text.length > 0 ? this.partition(wellFormed(text), opts.parseSpecial === true) : [];
    if (this.spm) {
      // The space prefix goes before the first text and before text that follows a special token.
      let prevSpecial = true;
      for (const f of fragments) {
        if (typeof f === "number") {
          out.push(f);
          prevSpecial = true;
        } else {
          const t = v.addSpacePrefix && prevSpecial ? " " + f : f;
          this.spm.encode(t.replaceAll(" ", "\u2581"), out);
          prevSpecial = false;
        }
      }
    } else {
      for (const f of fragments) {
        if (typeof f === "number") out.push(f);
        else this.bpe!.encode(f, out);
      }
    }
    if (opts.addEos) {
      if (v.eosId < 0) throw new TokenizerError("encode({ addEos: true }): this model has no EOS token");
      out.push(v.eosId);
    }
    return out;
  }

  /**
   * Cut out special tokens, longest first, leaving raw text fragments (strings) and token ids.
   * Control and unknown tokens only when parseSpecial; user-defined ones always. A token marked
   * to strip spaces (Phi-3's) takes the ASCII whitespace next to it on that side.
   */
  private partition(text: string, parseSpecial: boolean): (string | number)[] {
    const v = this.vocab;
    let frags: (string | number)[] = [text];
    for (const id of v.specialTokens) {
      const a = v.attrs[id];
      if (!parseSpecial && a & (TokenAttr.Control | TokenAttr.Unknown)) continue;
      const st = v.tokens[id];
      let found = false;
      for (const f of frags)
        if (typeof f === "string" && f.includes(st)) {
          found = true;
          break;
        }
      if (!found) continue;
      const lstrip = (a & TokenAttr.LStrip) !== 0,
        rstrip = (a & TokenAttr.RStrip) !== 0;
      const next: (string | number)[] = [];
      for (const f of frags) {
        if (typeof f === "number") {
          next.push(f);
          continue;
        }
        let from = 0;
        for (let at = f.indexOf(st); at >= 0; at = f.indexOf(st, from)) {
          let left = at;
          if (lstrip) while (left > from && isCSpace(f.charCodeAt(left - 1))) left--;
          if (left > from) next.push(f.substring(from, left));
          next.push(id);
          from = at + st.length;
          if (rstrip) while (from < f.length && isCSpace(f.charCodeAt(from))) from++;
        }
        if (from < f.length) next.push(from === 0 ? f : f.substring(from));
      }
      frags = next;
    }
    return frags;
  }

  private check(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new RangeError(
        `token id ${id} is out of range: the vocabulary has ${this.vocabSize} tokens (ids 0..${this.vocabSize - 1})`,
      );
    }
  }

  /**
   * Raw UTF-8 bytes of a token: byte tokens give their byte, U+2581 becomes a space, control
   * and unknown tokens give nothing. The array is shared: do not modify it.
   */
  piece(id: number): Uint8Array {
    this.check(id);
    return this.hidden(id) ? EMPTY : this.vocab.pieces.get(id);
  }

  /** piece() with control/unknown tokens rendered as their text. Shared: do not modify. */
  specialPiece(id: number): Uint8Array {
    this.check(id);
    return this.vocab.pieces.get(id);
  }

  /** The token's vocabulary string, for inspection ("▁the", "<0x0A>", "<s>"). */
  tokenText(id: number): string {
    this.check(id);
    return this.vocab.tokens[id];
  }

  /**
   * The type the token behaves as (normal, control, byte, ...): its GGUF type, changed where
   * llama.cpp changes it by name (an end-of-turn token is control, gpt-oss's "<|channel|>" is
   * user-defined, ...).
   */
  tokenType(id: number): TokenType {
    this.check(id);
    return this.vocab.types[id] as TokenType;
  }

  /** llama.cpp's attributes of the token (TokenAttr bits), which decide how it is parsed and rendered. */
  tokenAttributes(id: number): number {
    this.check(id);
    return this.vocab.attrs[id];
  }

  /** End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by text. */
  isEog(id: number): boolean {
    return this.vocab.eogIds.has(id);
  }

  /** All end-of-generation ids. */
  get eogIds(): number[] {
    return [...this.vocab.eogIds].sort((a, b) => a - b);
  }

  /**
   * Token ids to text, as llama.cpp's llama_detokenize(remove_special = false): pieces joined,
   * optional first-token space strip, then (BPE models whose pre-tokenizer asks for it) the
   * clean-up of spaces before punctuation. Invalid UTF-8 becomes U+FFFD.
   */
  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    const pieces = this.vocab.pieces;
    const special = opts.special === true;
    let total = 0;
    for (let i = 0; i < ids.length; i++) {
      this.check(ids[i]);
      if (special || !this.hidden(ids[i])) total += pieces.length(ids[i]);
    }
    const buf = new Uint8Array(total);
    let n = 0;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!special && this.hidden(id)) continue;
      const skip = i === 0 && opts.removeLeadingSpace && this.addSpacePrefix && pieces.firstByte(id) === SPACE ? 1 : 0;
      n += pieces.copyTo(id, buf, n, skip);
    }
    const len = this.vocab.cleanSpaces ? cleanSpaces(buf, n) : n;
    return decoder.decode(buf.subarray(0, len));
  }

  /** Control and unknown tokens render nothing unless special tokens are asked for. */
  private hidden(id: number): boolean {
    return (this.vocab.attrs[id] & (TokenAttr.Control | TokenAttr.Unknown)) !== 0;
  }
}

/** C's isspace() in the "C" locale, which is what llama.cpp strips next to special tokens. */
function isCSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d);
}

/**
 * llama.cpp's clean_up_tokenization_spaces, in place on bytes; returns the new length.
 * Three passes: drop the space before ? ! . , ; drop the spaces around a lone apostrophe
 * (" ' " -> "'"); drop the space before 's 'm 're 've (but not 't 'd 'll).
 */
function cleanSpaces(t: Uint8Array, n: number): number {
  const Q = 0x27;
  // 1: " ?", " !", " .", " ,"
  let total = n > 0 ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = t[i];
    if (t[i - 1] === SPACE && (x === 0x3f || x === 0x21 || x === 0x2e || x === 0x2c)) total--;
    t[total++] = x;
  }
  // 2: " ' " -> "'" (the following space is blanked to NUL and then dropped by the next write)
  n = total;
  total = n > 0 ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = t[i];
    if (x === Q && i + 1 < n && t[i - 1] === SPACE && t[i + 1] === SPACE) {
      total--;
      t[++i] = 0;
    }
    t[total++] = x;
  }
  // 3: " 's", " 'm", " 're", " 've"
  n = total;
  total = n > 0 ? 1 : 0;
  for (let i = 1; i < n; i++) {
    const x = t[i];
    if (t[i - 1] === SPACE && x === Q && i + 1 < n) {
      const x1 = t[i + 1];
      if (x1 === 0x73 || x1 === 0x6d) total--;
      else if (i + 2 < n) {
        const x2 = t[i + 2];
        if ((x1 === 0x72 && x2 === 0x65) || (x1 === 0x76 && x2 === 0x65)) total--;
      }
    }
    t[total++] = x;
  }
  return total;
}
