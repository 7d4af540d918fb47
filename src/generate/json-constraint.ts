/**
 * Constrained decoding of one generation: before each sample, the tokens that can come next in a
 * JSON value the grammar accepts (json-automaton.ts over the vocabulary's trie, token-trie.ts),
 * as a mask the sampler applies; after it, the parser advanced by the chosen token's bytes.
 *
 * The budget: every token allowed must leave the value completable in the tokens left
 * (minBytes, one token per byte: every byte a completion needs is a single token in SentencePiece
 * vocabularies with byte fallback and in byte-level BPE), so the answer always closes before
 * max_tokens or the context runs out, however the model rambles inside a string.
 *
 * Masks are cached per parser state (a string's inside is one state however long it runs), so a
 * long answer recomputes them only when its structure changes.
 */
import type { Tokenizer } from "../tokenizer/index.js";
import { canEnd, initialState, minBytes, stateKey, step, type Frame } from "./json-automaton.js";
import type { SchemaNode } from "./json-schema.js";
import { tokenTrie, type TokenTrie } from "./token-trie.js";

/** The tokens a state allows, and the fewest bytes each leaves to complete the value. */
interface Allowed {
  ids: Int32Array;
  after: Int32Array;
  minAfter: number;
  maxAfter: number;
}

/** Parser states whose masks are kept (a few structures and the strings inside them). */
const CACHED_STATES = 64;

export class JsonConstraint {
  private state: Frame | null;
  private ended = false;
  private readonly trie: TokenTrie;
  private readonly mask: Uint8Array;
  private readonly cache = new Map<string, Allowed>();

  constructor(
    grammar: SchemaNode,
    private readonly tokenizer: Tokenizer,
    /** end-of-generation tokens may end a top-level number or literal that could go on */
    private readonly allowEog: boolean,
  ) {
    this.state = initialState(grammar);
    this.trie = tokenTrie(tokenizer);
    this.mask = new Uint8Array(tokenizer.vocabSize);
  }

  /** The value is complete (or ended by an end-of-generation token): nothing more may be generated. */
  get finished(): boolean {
    return this.state === null || this.ended;
  }

  /** The fewest tokens that can complete the value (one per byte). */
  get minTokens(): number {
    return minBytes(this.state);
  }

  /**
   * The tokens allowed next (1 = allowed), when at most `budget` tokens, this one included, may
   * still be generated. The array is reused by the next call.
   */
  allowed(budget: number): Uint8Array {
    const a = this.allowedFrom(this.state);
    const mask = this.mask;
    mask.fill(0);
    const room = budget - 1;
    if (a.maxAfter <= room) for (const id of a.ids) mask[id] = 1;
    else {
      // Only tokens after which the value still fits; when none does (a budget below the
      // minimum), those that bring the end nearest.
      const cut = a.minAfter > room ? a.minAfter : room;
      for (let i = 0; i < a.ids.length; i++) if (a.after[i] <= cut) mask[a.ids[i]] = 1;
    }
    if (this.allowEog && canEnd(this.state)) for (const id of this.trie.eog) mask[id] = 1;
    if (a.ids.length === 0 && !(this.allowEog && canEnd(this.state)))
      throw new Error(`constrained decoding: no token of the vocabulary can continue the JSON value here`);
    return mask;
  }

  /** Advances the parser by the chosen token's bytes. */
  accept(id: number): void {
    if (this.tokenizer.isEog(id)) {
      this.ended = true;
      return;
    }
    let s: Frame | null | undefined = this.state;
    for (const b of this.tokenizer.piece(id)) {
      s = step(s!, b);
      if (s === undefined)
        throw new Error(
          `constrained decoding: token ${id} (${JSON.stringify(this.tokenizer.tokenText(id))}) does not continue the JSON value`,
        );
    }
    this.state = s!;
  }

  private allowedFrom(state: Frame | null): Allowed {
    const key = stateKey(state);
    const hit = this.cache.get(key);
    if (hit) {
      // most recently used last
      this.cache.delete(key);
      this.cache.set(key, hit);
      return hit;
    }
    const ids: number[] = [];
    const after: number[] = [];
    const { firstChild, nextSibling, byte, tokenStart, ids: tokens } = this.trie;
    const visit = (node: number, s: Frame | null) => {
      for (let child = firstChild[node]; child >= 0; child = nextSibling[child]) {
        const next = step(s, byte[child]);
        if (next === undefined) continue;
        if (tokenStart[child + 1] > tokenStart[child]) {
          // a state that cannot complete (none should be reachable) sorts last
          const m = Math.min(minBytes(next), 0x3fffffff);
          for (let i = tokenStart[child]; i < tokenStart[child + 1]; i++) {
            ids.push(tokens[i]);
            after.push(m);
          }
        }
        if (firstChild[child] >= 0) visit(child, next);
      }
    };
    visit(0, state);
    let minAfter = Infinity,
      maxAfter = 0;
    for (const m of after) {
      if (m < minAfter) minAfter = m;
      if (m > maxAfter) maxAfter = m;
    }
    const a: Allowed = { ids: Int32Array.from(ids), after: Int32Array.from(after), minAfter, maxAfter };
    if (this.cache.size >= CACHED_STATES) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(key, a);
    return a;
  }
}
