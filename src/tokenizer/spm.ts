/**
 * SentencePiece-style tokenization as llama.cpp does it for `tokenizer.ggml.model = "llama"`.
 *
 * The text (spaces already written as U+2581) starts as one symbol per character. Every adjacent
 * pair whose concatenation is a vocabulary entry is a candidate; the candidate whose token has
 * the highest score is merged first (ties: leftmost), and the new symbol's pairs with its
 * neighbours become candidates. No pre-splitting: the whole fragment is one sequence.
 * Afterwards each symbol is its token, or, when the single character is not in the vocabulary,
 * its UTF-8 bytes as `<0xNN>` byte tokens.
 *
 * llama.cpp also keeps a map to re-split unknown merged symbols, but a merge only ever happens
 * when the merged text is a token, so only single characters can be unknown and the byte
 * fallback is all that is needed.
 *
 * Speed: one merge queue over a whole 2 MB text is slow (a heap of millions of candidates, and
 * superlinear). Since every merged symbol is a token, no symbol can ever span two adjacent
 * characters that appear next to each other in no token; the text is cut at such places and
 * the pieces, which evolve independently under the same merge order, are encoded one at a time
 * (and cached: they are mostly words). The result is exactly that of the single queue.
 */
import { MergeHeap } from "./heap.js";
import { TokenizerError, type Vocab } from "./vocab.js";
import { detach, pushUtf8 } from "./unicode.js";

/** Pieces seen often are cached; the cache is dropped whole when it fills up. */
const CACHE_LIMIT = 1 << 16;
const CACHE_MAX_KEY = 64;
const CP_SPAN = 0x110000;

export class SpmEncoder {
  private readonly heap = new MergeHeap();
  /** Adjacent code point pairs (a * CP_SPAN + b) found inside some token; built on first use. */
  private pairs: Set<number> | null = null;
  private readonly cache = new Map<string, number[]>();
  // Symbols: start offset and length in UTF-16 code units, and the linked list of live symbols.
  private start = new Int32Array(256);
  private len = new Int32Array(256);
  private prev = new Int32Array(256);
  private next = new Int32Array(256);
  private readonly bytes: number[] = [];

  constructor(private readonly vocab: Vocab) {}

  private ensure(n: number): void {
    if (this.start.length >= n) return;
    let cap = this.start.length;
    while (cap < n) cap *= 2;
    this.start = new Int32Array(cap);
    this.len = new Int32Array(cap);
    this.prev = new Int32Array(cap);
    this.next = new Int32Array(cap);
  }

  private buildPairs(): Set<number> {
    const pairs = new Set<number>();
    for (const t of this.vocab.tokens) {
      let prev = -1;
      for (let i = 0; i < t.length; i++) {
        const cp = t.codePointAt(i)!;
        if (cp > 0xffff) i++;
        if (prev >= 0) pairs.add(prev * CP_SPAN + cp);
        prev = cp;
      }
    }
    return pairs;
  }

  /** Tokenize `text` (whitespace already escaped to U+2581, well-formed UTF-16) onto `out`. */
  encode(text: string, out: number[]): void {
    const pairs = (this.pairs ??= this.buildPairs());
    let from = 0;
    let prev = -1;
    for (let i = 0; i < text.length; i++) {
      const cp = text.codePointAt(i)!;
      if (prev >= 0 && !pairs.has(prev * CP_SPAN + cp)) {
        this.encodePiece(text.substring(from, i), out);
        from = i;
      }
      if (cp > 0xffff) i++;
      prev = cp;
    }
    this.encodePiece(from === 0 ? text : text.substring(from), out);
  }

  private encodePiece(text: string, out: number[]): void {
    let ids = this.cache.get(text);
    if (ids === undefined) {
      ids = [];
      this.merge(text, ids);
      if (text.length <= CACHE_MAX_KEY) {
        if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
        this.cache.set(detach(text), ids);
      }
    }
    for (let i = 0; i < ids.length; i++) out.push(ids[i]);
  }

  /** The merge queue over one piece. */
  private merge(text: string, out: number[]): void {
    const n = text.length;
    if (n === 0) return;
    this.ensure(n);
    const { start, len, prev, next, heap } = this;
    let count = 0;
    for (let i = 0; i < n;) {
      const c = text.charCodeAt(i);
      const l = c >= 0xd800 && c <= 0xdbff && i + 1 < n ? 2 : 1;
      start[count] = i;
      len[count] = l;
      prev[count] = count - 1;
      next[count] = count + 1;
      count++;
      i += l;
    }
    next[count - 1] = -1;

    heap.clear();
    for (let i = 1; i < count; i++) this.tryAdd(text, i - 1, i);

    // Lengths only grow, so a candidate whose recorded size no longer equals the sum of its two
    // symbols is stale (llama.cpp checks byte sizes the same way).
    while (heap.length > 0) {
      heap.pop();
      const l = heap.topLeft,
        r = heap.topRight;
      if (len[l] === 0 || len[r] === 0 || len[l] + len[r] !== heap.topSize) continue;
      len[l] += len[r];
      len[r] = 0;
      next[l] = next[r];
      if (next[r] >= 0) prev[next[r]] = l;
      this.tryAdd(text, prev[l], l);
      this.tryAdd(text, l, next[l]);
    }

    const { tokenToId, byteToToken, unkId } = this.vocab;
    for (let i = 0; i !== -1; i = next[i]) {
      const piece = text.substr(start[i], len[i]);
      const id = tokenToId.get(piece);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      const bytes = this.bytes;
      bytes.length = 0;
      pushUtf8(piece.codePointAt(0)!, bytes);
      let missing = -1;
      for (const b of bytes) if (byteToToken[b] < 0) missing = b;
      if (missing < 0) {
        for (const b of bytes) out.push(byteToToken[b]);
      } else if (unkId >= 0) {
        // llama.cpp would throw here (no byte token); SentencePiece without byte fallback emits
        // one <unk> for the character, which is the useful behaviour.
        out.push(unkId);
      } else {
        throw new TokenizerError(
          `cannot encode ${JSON.stringify(piece)}: the vocabulary has no byte token <0x${missing.toString(16).toUpperCase().padStart(2, "0")}> and no unknown token`,
        );
      }
    }
  }

  private tryAdd(text: string, left: number, right: number): void {
    if (left < 0 || right < 0) return;
    const size = this.len[left] + this.len[right];
    if (size > this.vocab.maxTokenLength) return;
    const id = this.vocab.tokenToId.get(text.substr(this.start[left], size));
    if (id === undefined) return;
    this.heap.push(this.vocab.scores[id], left, right, size);
  }
}
