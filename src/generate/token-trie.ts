/**
 * The vocabulary as a trie of the bytes each token prints (Tokenizer.piece), built once per
 * tokenizer: constrained decoding walks it from a parser state, so that tokens sharing a prefix
 * share the work of checking it, and a prefix the parser refuses prunes every token below it.
 * Control, unknown and unused tokens (which print nothing) are left out; end-of-generation tokens
 * are listed apart.
 */
import { TokenType, type Tokenizer } from "../tokenizer/index.js";

export interface TokenTrieNode {
  /** children by next byte */
  readonly next: Map<number, TokenTrieNode>;
  /** tokens whose bytes end here */
  readonly tokens: number[];
}

export interface TokenTrie {
  readonly root: TokenTrieNode;
  readonly vocabSize: number;
  readonly eog: readonly number[];
  /** bytes that some single token prints alone */
  readonly singleByte: Uint8Array;
}

const tries = new WeakMap<Tokenizer, TokenTrie>();

export function tokenTrie(tokenizer: Tokenizer): TokenTrie {
  let t = tries.get(tokenizer);
  if (!t) tries.set(tokenizer, (t = build(tokenizer)));
  return t;
}

function build(tokenizer: Tokenizer): TokenTrie {
  const root: TokenTrieNode = { next: new Map(), tokens: [] };
  const singleByte = new Uint8Array(256);
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    const type = tokenizer.tokenType(id);
    if (type !== TokenType.Normal && type !== TokenType.Byte && type !== TokenType.UserDefined) continue;
    if (tokenizer.isEog(id)) continue;
    const bytes = tokenizer.piece(id);
    if (bytes.length === 0) continue;
    if (bytes.length === 1) singleByte[bytes[0]] = 1;
    let n = root;
    for (const b of bytes) {
      let c = n.next.get(b);
      if (!c) n.next.set(b, (c = { next: new Map(), tokens: [] }));
      n = c;
    }
    n.tokens.push(id);
  }
  return { root, vocabSize: tokenizer.vocabSize, eog: tokenizer.eogIds, singleByte };
}
