/**
 * Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) as llama.cpp does it.
 *
 * The text is cut into words by the pre-tokenizer, each word's UTF-8 bytes are written in the
 * GPT-2 byte alphabet, and within a word the adjacent pair with the lowest merge rank is merged
 * first (ties: leftmost) until no pair has a rank. Each final symbol is its token; a symbol
 * that is not in the vocabulary falls back, as in llama.cpp, to the tokens of its single ASCII
 * characters (others are dropped: a complete byte-level vocabulary never gets there).
 */
import { MergeHeap } from "./heap.js";
import { preTokenize } from "./pretokenize.js";
import { detach, gpt2ByteEncode } from "./unicode.js";
import type { Vocab } from "./vocab.js";

/** Words seen often (" the", ",") are cached; the cache is dropped whole when it fills up. */
const CACHE_LIMIT = 1 << 16;
const CACHE_MAX_KEY = 64;

export class BpeEncoder {
  private readonly heap = new MergeHeap();
  private start = new Int32Array(64);
  private len = new Int32Array(64);
  private prev = new Int32Array(64);
  private next = new Int32Array(64);
  private readonly cache = new Map<string, number[]>();

  constructor(private readonly vocab: Vocab) {
    if (!vocab.preTokenizer) throw new Error("BpeEncoder needs a vocabulary with a pre-tokenizer");
  }

  /** Tokenize one raw-text fragment (no special tokens in it) onto `out`. */
  encode(text: string, out: number[]): void {
    for (const word of preTokenize(text, this.vocab.preTokenizer!)) {
      let ids = this.cache.get(word);
      if (ids === undefined) {
        ids = [];
        this.encodeWord(gpt2ByteEncode(word), ids);
        if (word.length <= CACHE_MAX_KEY) {
          if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
          this.cache.set(detach(word), ids);
        }
      }
      for (let i = 0; i < ids.length; i++) out.push(ids[i]);
    }
  }

  private ensure(n: number): void {
    if (this.start.length >= n) return;
    let cap = this.start.length;
    while (cap < n) cap *= 2;
    this.start = new Int32Array(cap);
    this.len = new Int32Array(cap);
    this.prev = new Int32Array(cap);
    this.next = new Int32Array(cap);
  }

  /** `word` is in the byte alphabet: one UTF-16 code unit per byte. */
  private encodeWord(word: string, out: number[]): void {
    const { tokenToId } = this.vocab;
    const n = word.length;
    if (n === 0) return;
    if (this.vocab.ignoreMerges) {
      // Llama 3 style: a word that is a token is taken whole, whatever the merges would give.
      const id = tokenToId.get(word);
      if (id !== undefined) {
        out.push(id);
        return;
      }
    }
    this.ensure(n);
    const { start, len, prev, next, heap } = this;
    for (let i = 0; i < n; i++) {
      start[i] = i;
      len[i] = 1;
      prev[i] = i - 1;
      next[i] = i + 1;
    }
    next[n - 1] = -1;
    heap.clear();
    for (let i = 1; i < n; i++) this.tryAdd(word, i - 1, i);
    while (heap.length > 0) {
      heap.pop();
      const l = heap.topLeft,
        r = heap.topRight;
      // Stale candidates: one side merged away, or the right side grew (lengths only grow).
      if (len[l] === 0 || len[r] === 0 || len[l] + len[r] !== heap.topSize) continue;
      len[l] += len[r];
      len[r] = 0;
      next[l] = next[r];
      if (next[r] >= 0) prev[next[r]] = l;
      this.tryAdd(word, prev[l], l);
      this.tryAdd(word, l, next[l]);
    }
    for (let i = 0; i !== -1; i = next[i]) {
      const sym = word.substr(start[i], len[i]);
      const id = tokenToId.get(sym);
      if (id !== undefined) {
        out.push(id);
        continue;
      }
      for (let j = 0; j < sym.length; j++) {
        const c = sym.charCodeAt(j);
        if (c >= 0x80) continue;
        const b = tokenToId.get(sym[j]);
        if (b !== undefined) out.push(b);
      }
    }
  }

  private tryAdd(word: string, left: number, right: number): void {
    if (left < 0 || right < 0) return;
    const s = this.start;
    const key = word.substr(s[left], this.len[left]) + " " + word.substr(s[right], this.len[right]);
    const rank = this.vocab.mergeRanks.get(key);
    if (rank === undefined) return;
    this.heap.push(-rank, left, right, this.len[left] + this.len[right]);
  }
}
