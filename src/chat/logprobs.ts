/**
 * Token log-probabilities (Generation.logprobs, from the distribution the sampler drew from) in
 * OpenAI's two wire shapes: the chat form (`{content: [{token, logprob, bytes, top_logprobs}]}`)
 * and the legacy completions form (`{tokens, token_logprobs, top_logprobs, text_offset}`).
 */
import type { TokenLogprobs } from "../generate/sampler.js";
import type { Tokenizer } from "../tokenizer/index.js";
import type { ChatLogprobs, ChatTokenLogprob, CompletionLogprobs } from "./openai-types.js";

const decoder = new TextDecoder();

/** A token's text on its own (a byte of a longer character shows as U+FFFD; `bytes` is exact). */
function tokenText(tokenizer: Tokenizer, id: number): { text: string; bytes: number[] } {
  const piece = tokenizer.piece(id);
  return { text: decoder.decode(piece), bytes: [...piece] };
}

/** The chat form of entries [from, to) of a generation's logprobs. */
export function chatLogprobs(
  tokenizer: Tokenizer,
  entries: readonly TokenLogprobs[],
  from: number,
  to: number,
): ChatLogprobs {
  const content: ChatTokenLogprob[] = [];
  for (let i = from; i < to; i++) {
    const e = entries[i];
    const own = tokenText(tokenizer, e.id);
    content.push({
      token: own.text,
      logprob: e.logprob,
      bytes: own.bytes,
      top_logprobs: e.top.map((t) => {
        const alt = tokenText(tokenizer, t.id);
        return { token: alt.text, logprob: t.logprob, bytes: alt.bytes };
      }),
    });
  }
  return { content };
}

/**
 * The completions form of entries [from, to); `offset` is the answer's length before them (each
 * text_offset is where its token's text starts in the answer).
 */
export function completionLogprobs(
  tokenizer: Tokenizer,
  entries: readonly TokenLogprobs[],
  from: number,
  to: number,
  offset: number,
): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for (let i = from; i < to; i++) {
    const e = entries[i];
    const text = tokenText(tokenizer, e.id).text;
    out.tokens.push(text);
    out.token_logprobs.push(e.logprob);
    const top: Record<string, number> = {};
    for (const t of e.top) top[tokenText(tokenizer, t.id).text] ??= t.logprob;
    out.top_logprobs.push(top);
    out.text_offset.push(offset);
    offset += text.length;
  }
  return out;
}
