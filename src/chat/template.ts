/**
 * Chat templates: a conversation -> the prompt text the model was trained on.
 *
 * A GGUF's `tokenizer.chat_template` is a Jinja template (Hugging Face's convention); it is
 * rendered with `@huggingface/jinja`. Models without one (base models, the tiny test models) get
 * a plain transcript ("User: ...\nAssistant: ..."), which also adds a stop string so the model's
 * continuation ends where it would start writing the user's next line.
 */
import { Template } from "@huggingface/jinja";
import { GGUFFile } from "../format/gguf.js";
import { NeuronStore } from "../format/store/index.js";
import { isNeuronStore } from "../model/model.js";
import type { Tokenizer } from "../tokenizer/index.js";
import { ApiError } from "./errors.js";

export type ChatRole = "system" | "user" | "assistant";

export interface ChatMessage {
  role: ChatRole;
  content: string;
}

export interface RenderOptions {
  /** end with the cue for the assistant's turn (default true) */
  addGenerationPrompt?: boolean;
}

/** The special-token texts templates refer to as `bos_token` / `eos_token`. */
export interface TemplateTokens {
  bosToken?: string;
  eosToken?: string;
}

const CHAT_TEMPLATE_KEY = "tokenizer.chat_template";

export class ChatTemplate {
  private constructor(
    /** "jinja": the model's own template; "plain": the built-in transcript format */
    readonly kind: "jinja" | "plain",
    /** the Jinja source (null for the plain format) */
    readonly source: string | null,
    private readonly compiled: Template | null,
    readonly tokens: Readonly<TemplateTokens>,
    /** strings that end an answer, besides the model's end-of-generation tokens */
    readonly stop: readonly string[],
    /** whether the answer's leading whitespace is dropped (the plain format cues "Assistant:") */
    readonly trimAnswerStart: boolean,
  ) {}

  /** A Jinja chat template. Parsed now, so a broken template fails at load, not at the first request. */
  static jinja(source: string, tokens: TemplateTokens = {}): ChatTemplate {
    if (typeof source !== "string" || source.trim() === "")
      throw new TypeError("ChatTemplate.jinja: the template source is empty");
    let compiled: Template;
    try {
      compiled = new Template(source);
    } catch (e) {
      throw new Error(`the chat template does not parse: ${e instanceof Error ? e.message : String(e)}`);
    }
    return new ChatTemplate("jinja", source, compiled, { ...tokens }, [], false);
  }

  /** The built-in plain transcript, for models that carry no template. */
  static plain(): ChatTemplate {
    return new ChatTemplate("plain", null, null, {}, ["\nUser:"], true);
  }

  /**
   * The template in a GGUF metadata map (`tokenizer.chat_template`), or the plain format when the
   * key is absent. `tokenizer` supplies the BOS/EOS texts the template may print.
   */
  static fromMetadata(metadata: ReadonlyMap<string, unknown>, tokenizer?: Tokenizer): ChatTemplate {
    const source = metadata.get(CHAT_TEMPLATE_KEY);
    if (source === undefined || source === "") return ChatTemplate.plain();
    if (typeof source !== "string")
      throw new TypeError(`metadata "${CHAT_TEMPLATE_KEY}" should be a string, found ${typeof source}`);
    return ChatTemplate.jinja(source, tokenizer ? tokenTexts(tokenizer) : {});
  }

  /** The template of a model file, a GGUF or a neuron store (reads only its header or manifest). */
  static fromModelFile(path: string, tokenizer?: Tokenizer): ChatTemplate {
    const file = isNeuronStore(path) ? NeuronStore.open(path) : GGUFFile.open(path);
    try {
      return ChatTemplate.fromMetadata(file.metadata, tokenizer);
    } finally {
      file.close();
    }
  }

  /**
   * The prompt text for `messages`. A template that rejects the conversation (Jinja
   * `raise_exception`, e.g. "roles must alternate") throws an ApiError(400) with its message.
   */
  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    const addGenerationPrompt = options.addGenerationPrompt ?? true;
    if (this.kind === "plain") return renderPlain(messages, addGenerationPrompt);
    try {
      return this.compiled!.render({
        messages: messages.map((m) => ({ role: m.role, content: m.content })),
        add_generation_prompt: addGenerationPrompt,
        bos_token: this.tokens.bosToken ?? "",
        eos_token: this.tokens.eosToken ?? "",
      });
    } catch (e) {
      throw new ApiError(
        400,
        `the model's chat template rejected the messages: ${e instanceof Error ? e.message : String(e)}`,
        "invalid_request_error",
        "messages",
        "chat_template_error",
      );
    }
  }
}

/**
 * "System text\n\nUser: hi\nAssistant: hello\nUser: ...\nAssistant:". Each message's content is
 * used as it is; the cue has no trailing space because SentencePiece vocabularies glue the space
 * to the next word.
 */
function renderPlain(messages: readonly ChatMessage[], addGenerationPrompt: boolean): string {
  let out = "";
  for (const m of messages) {
    if (m.role === "system") out += m.content + "\n\n";
    else if (m.role === "user") out += "User: " + m.content + "\n";
    else out += "Assistant: " + m.content + "\n";
  }
  if (addGenerationPrompt) out += "Assistant:";
  return out;
}

function tokenTexts(tokenizer: Tokenizer): TemplateTokens {
  return {
    bosToken: tokenizer.bosId >= 0 ? tokenizer.tokenText(tokenizer.bosId) : undefined,
    eosToken: tokenizer.eosId >= 0 ? tokenizer.tokenText(tokenizer.eosId) : undefined,
  };
}

const byModel = new WeakMap<object, ChatTemplate>();

/**
 * The chat template of a loaded model: its `tokenizer.chat_template` when the model object
 * exposes its GGUF metadata (a `metadata` Map), else the plain format. Cached per model.
 */
export function templateForModel(model: { readonly tokenizer: Tokenizer }): ChatTemplate {
  let t = byModel.get(model);
  if (!t) {
    const metadata = (model as { metadata?: unknown }).metadata;
    t = metadata instanceof Map ? ChatTemplate.fromMetadata(metadata, model.tokenizer) : ChatTemplate.plain();
    byModel.set(model, t);
  }
  return t;
}

/**
 * Token ids of a rendered chat prompt. Control-token texts in it ("<|im_start|>") become their
 * ids; BOS is added as the model asks unless the template already wrote it.
 */
export function tokenizeChatPrompt(tokenizer: Tokenizer, text: string): number[] {
  const bos = tokenizer.bosId >= 0 ? tokenizer.tokenText(tokenizer.bosId) : null;
  const startsWithBos = bos !== null && bos !== "" && text.startsWith(bos);
  return tokenizer.encode(text, { addBos: tokenizer.addBos && !startsWithBos, parseSpecial: true });
}
