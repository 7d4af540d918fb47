/**
 * The vocabulary as a trie of the bytes each token prints (Tokenizer.piece), built once per
 * tokenizer: constrained decoding walks it from a parser state, so that tokens sharing a prefix
 * share the work of checking it, and a prefix the parser refuses prunes every token below it.
 * Control, unknown and unused tokens (which print nothing) are left out; end-of-generation tokens
 * are listed apart.
 *
 * The nodes live in typed arrays (first child, next sibling, the byte that leads to the node, the
 * tokens that end there), built from the tokens sorted by their bytes: a node of objects and Maps
 * took 105 MiB for Qwen3's vocabulary and 184 MiB for Gemma 3's, outside any memory budget; these
 * arrays take ~17 bytes a node.
 */
import { TokenType, type Tokenizer } from "../tokenizer/index.js";

export interface TokenTrie {
  /**
   * Node 0 is the root (it prints nothing). Node n's children: firstChild[n], then each child's
   * nextSibling, until -1; `byte[n]` is the byte that leads from n's parent to n.
   */
  readonly firstChild: Int32Array;
  readonly nextSibling: Int32Array;
  readonly byte: Uint8Array;
  /** the tokens whose bytes end at node n: ids[tokenStart[n] .. tokenStart[n + 1]) */
  readonly tokenStart: Int32Array;
  readonly ids: Int32Array;
  readonly vocabSize: number;
  readonly eog: readonly number[];
}

const tries = new WeakMap<Tokenizer, TokenTrie>();

export function tokenTrie(tokenizer: Tokenizer): TokenTrie {
  let t = tries.get(tokenizer);
  if (!t) tries.set(tokenizer, (t = build(tokenizer)));
  return t;
}

function build(tokenizer: Tokenizer): TokenTrie {
  const pieces: Uint8Array[] = [];
  const kept: number[] = [];
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    const type = tokenizer.tokenType(id);
    if (type !== TokenType.Normal && type !== TokenType.Byte && type !== TokenType.UserDefined) continue;
    if (tokenizer.isEog(id)) continue;
    const bytes = tokenizer.piece(id);
    if (bytes.length === 0) continue;
    kept.push(id);
    pieces.push(bytes);
  }
  // by bytes, then by id: a node's tokens come out in id order
  const order = Int32Array.from(kept.keys()).sort((a, b) => compareBytes(pieces[a], pieces[b]) || kept[a] - kept[b]);
  let bound = 1;
  for (const p of pieces) bound += p.length;
  const firstChild = new Int32Array(bound).fill(-1);
  const nextSibling = new Int32Array(bound).fill(-1);
  const lastChild = new Int32Array(bound).fill(-1);
  const byte = new Uint8Array(bound);
  const endsAt = new Int32Array(kept.length);
  // the path from the root to the previous token's node: path[d] is the node at depth d
  const path = new Int32Array(maxLength(pieces) + 1);
  let nodes = 1;
  let prev: Uint8Array | null = null;
  for (let k = 0; k < order.length; k++) {
    const p = pieces[order[k]];
    let shared = 0;
    if (prev) while (shared < p.length && shared < prev.length && p[shared] === prev[shared]) shared++;
    for (let d = shared; d < p.length; d++) {
      const parent = path[d];
      const n = nodes++;
      byte[n] = p[d];
      if (lastChild[parent] < 0) firstChild[parent] = n;
      else nextSibling[lastChild[parent]] = n;
      lastChild[parent] = n;
      path[d + 1] = n;
    }
    endsAt[k] = path[p.length];
    prev = p;
  }
  // tokens grouped by their node: sorted order already puts a node's tokens together
  const tokenStart = new Int32Array(nodes + 1);
  for (let k = 0; k < order.length; k++) tokenStart[endsAt[k] + 1]++;
  for (let n = 0; n < nodes; n++) tokenStart[n + 1] += tokenStart[n];
  const ids = new Int32Array(order.length);
  const fill = tokenStart.slice(0, nodes);
  for (let k = 0; k < order.length; k++) ids[fill[endsAt[k]]++] = kept[order[k]];
  return {
    firstChild: firstChild.slice(0, nodes),
    nextSibling: nextSibling.slice(0, nodes),
    byte: byte.slice(0, nodes),
    tokenStart,
    ids,
    vocabSize: tokenizer.vocabSize,
    eog: tokenizer.eogIds,
  };
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

function maxLength(pieces: readonly Uint8Array[]): number {
  let m = 0;
  for (const p of pieces) if (p.length > m) m = p.length;
  return m;
}
