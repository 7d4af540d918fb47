/**
 * Chat templates: a conversation -> the prompt text the model was trained on.
 *
 * A GGUF's `tokenizer.chat_template` is a Jinja template (Hugging Face's convention); it is
 * rendered with `@huggingface/jinja` in the environment transformers' `apply_chat_template` gives
 * it, so that the prompt is the one the model saw in training: the same variables (`messages`,
 * `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and `documents` as none, and the
 * caller's template kwargs such as Qwen3's `enable_thinking`), the same globals
 * (`raise_exception`, `strftime_now` reading the local clock with C-locale names), and
 * `continue_final_message` cut the way transformers cuts it. test/chat-templates.test.ts holds the
 * engine to transformers' output for real templates.
 *
 * Models without a template (base models, the tiny test models) get a plain transcript
 * ("User: ...\nAssistant: ..."), which also adds a stop string so the model's continuation ends
 * where it would start writing the user's next line.
 *
 * Dates: the engine passes no `date_string` of its own, as transformers does not, so Llama 3.1's
 * template prints its built-in "26 Jul 2024" and Llama 3.2's asks strftime_now for today. A caller
 * who wants another date passes `date_string` as a template kwarg, or pins the clock with `now`.
 */
import { Environment, Interpreter, Template } from "@huggingface/jinja";
import { GGUFFile } from "../format/gguf.js";
import { NeuronStore } from "../format/store/index.js";
import { isNeuronStore } from "../model/model.js";
import type { Tokenizer } from "../tokenizer/index.js";
import { ApiError } from "./errors.js";
import { pythonCompatible } from "./jinja-compat.js";
import { strftime } from "./strftime.js";

export type ChatRole = "system" | "user" | "assistant";

export interface ChatMessage {
  role: ChatRole;
  content: string;
}

/** Values a template reads besides the conversation: `enable_thinking`, `date_string`, `reasoning_effort`... */
export type TemplateKwargs = Readonly<Record<string, unknown>>;

export interface RenderOptions {
  /**
   * End with the cue for the assistant's turn (default true, or false when continueFinalMessage is
   * set; both true is refused, as transformers refuses it).
   */
  addGenerationPrompt?: boolean;
  /**
   * The last message is an assistant answer to go on with: the prompt ends inside that turn, right
   * after its text, instead of closing it (transformers' `continue_final_message`).
   */
  continueFinalMessage?: boolean;
  /**
   * Extra template variables (transformers' `apply_chat_template(**kwargs)`, the OpenAI-style
   * servers' `chat_template_kwargs`), over the template's own defaults from `withKwargs`.
   */
  kwargs?: TemplateKwargs;
  /** The time `strftime_now` reports (default: the clock at rendering). */
  now?: Date;
  /**
   * Function definitions (OpenAI's `tools` array of JSON schemas) for templates that describe
   * them to the model. Rendering only: nothing parses tool calls out of an answer yet, which is
   * why the OpenAI-style surfaces still refuse `tools`.
   */
  tools?: readonly unknown[];
}

/** The special-token texts templates refer to as `bos_token` / `eos_token`. */
export interface TemplateTokens {
  bosToken?: string;
  eosToken?: string;
}

const CHAT_TEMPLATE_KEY = "tokenizer.chat_template";

/**
 * Variables the engine itself sets: a kwarg of one of these names would be a second value for the
 * same argument (transformers raises a TypeError for it).
 */
const RESERVED_KWARGS = new Set(["messages", "add_generation_prompt", "tools", "documents"]);

/**
 * What transformers appends to the message being continued, to find where its text ends in the
 * rendering. Any text unlikely to occur in a conversation would do; the trailing space is how the
 * cut tells whether the template kept the message's trailing whitespace.
 */
const CONTINUE_MARK = "CONTINUE_FINAL_MESSAGE_TAG ";

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
    /** template kwargs every rendering gets unless its own options name them (see withKwargs) */
    readonly kwargs: TemplateKwargs = {},
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
   * The same template with kwargs that every rendering gets (a render's own kwargs win), e.g.
   * `templateForModel(model).withKwargs({ enable_thinking: false })` for a ChatSession that should
   * not think, as node-llama-cpp's Jinja wrapper takes `additionalRenderParameters`. Names the
   * engine sets itself (messages, add_generation_prompt, tools, documents) are refused.
   */
  withKwargs(kwargs: TemplateKwargs): ChatTemplate {
    checkKwargs(kwargs, "ChatTemplate.withKwargs");
    const merged = { ...this.kwargs, ...kwargs };
    return new ChatTemplate(
      this.kind,
      this.source,
      this.compiled,
      this.tokens,
      this.stop,
      this.trimAnswerStart,
      merged,
    );
  }

  /**
   * The prompt text for `messages`. A template that rejects the conversation (Jinja
   * `raise_exception`, e.g. "roles must alternate") throws an ApiError(400) with its message, and
   * so does a continueFinalMessage the conversation or the template cannot honour.
   */
  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    const cont = options.continueFinalMessage ?? false;
    const addGenerationPrompt = options.addGenerationPrompt ?? !cont;
    if (cont && addGenerationPrompt)
      throw templateError(
        "continue_final_message and add_generation_prompt cannot both be true: the first goes on with the last " +
          "message, the second opens a new assistant turn",
      );
    if (options.kwargs !== undefined) checkKwargs(options.kwargs, "chat_template_kwargs");
    if (this.kind === "plain") return renderPlain(messages, addGenerationPrompt, cont);

    const list = messages.map((m) => ({ role: m.role, content: m.content }));
    let last = "";
    if (cont) {
      if (list.length === 0) throw templateError("continue_final_message needs a message to continue, got none");
      // transformers refuses a template that never reads a message's content: nothing would mark the end.
      if (!this.source!.includes("content"))
        throw templateError("continue_final_message: this chat template does not print the messages' content");
      last = list[list.length - 1].content;
      list[list.length - 1].content = last + CONTINUE_MARK;
    }
    const text = this.renderJinja(list, addGenerationPrompt, options);
    return cont ? cutAtContinueMark(text, last) : text;
  }

  private renderJinja(
    messages: { role: string; content: string }[],
    addGenerationPrompt: boolean,
    options: RenderOptions,
  ): string {
    const now = options.now ?? new Date();
    // Globals live in a scope above the render's variables, so a kwarg of the same name hides
    // the global for that rendering, as Jinja's render context hides its environment's globals.
    const globals = new Environment();
    const values: Record<string, unknown> = {
      true: true,
      false: false,
      none: null,
      True: true,
      False: false,
      None: null,
      range: pythonRange,
      // transformers raises jinja2's TemplateError with the template's own words.
      raise_exception: (message: unknown) => {
        throw new TemplateRaised(String(message));
      },
      strftime_now: (format: unknown) => strftime(now, String(format)),
    };
    for (const [k, v] of Object.entries(values)) globals.set(k, v);
    const scope = new Environment(globals);
    const variables: Record<string, unknown> = {
      bos_token: this.tokens.bosToken ?? "",
      eos_token: this.tokens.eosToken ?? "",
      ...this.kwargs,
      ...options.kwargs,
      messages,
      // transformers passes these two as none when the caller gives no tools or documents.
      tools: options.tools ?? null,
      documents: null,
      add_generation_prompt: addGenerationPrompt,
    };
    try {
      for (const [k, v] of Object.entries(variables)) scope.set(k, v);
      const out = pythonCompatible(new Interpreter(scope)).run(this.compiled!.parsed).value;
      if (typeof out !== "string") throw new Error(`the template produced ${typeof out}, not text`);
      return out;
    } catch (e) {
      // The template's own refusal says what is wrong with the conversation; anything else is the
      // template failing on it (an attribute these messages lack, a feature the renderer lacks).
      if (e instanceof TemplateRaised)
        throw templateError(`the model's chat template rejected the messages: ${e.message}`);
      throw templateError(
        `the model's chat template failed on these messages: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
  }
}

/** The error a template's raise_exception(...) throws, kept apart from the renderer's own errors. */
class TemplateRaised extends Error {}

function templateError(message: string): ApiError {
  return new ApiError(400, message, "invalid_request_error", "messages", "chat_template_error");
}

/** Kwargs must be an object and may not name what the engine sets (an ApiError for a request's). */
function checkKwargs(kwargs: unknown, what: string): void {
  const fail = (message: string) =>
    what === "chat_template_kwargs"
      ? new ApiError(400, message, "invalid_request_error", "chat_template_kwargs", "invalid_value")
      : new TypeError(message);
  if (typeof kwargs !== "object" || kwargs === null || Array.isArray(kwargs))
    throw fail(`${what} must be an object of template variables`);
  for (const k of Object.keys(kwargs)) {
    if (RESERVED_KWARGS.has(k)) throw fail(`${what} may not set "${k}": the engine sets it from the conversation`);
  }
}

/** Python's range(stop) / range(start, stop[, step]), which templates use to count. */
function pythonRange(a: number, b?: number, step = 1): number[] {
  const [start, stop] = b === undefined ? [0, a] : [a, b];
  if (step === 0) throw new Error("range() arg 3 must not be zero");
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

/**
 * The rendering up to where the continued message's text ends. The mark went in right after that
 * text: when the template kept it as written, the rendering is cut just before the mark; when the
 * template trimmed the message (Llama's `| trim`, Gemma's), the mark's space is gone and the
 * message's own trailing whitespace with it, so the cut also drops whitespace before the mark.
 * Refused when the template dropped or rewrote the message, since the model would then not be
 * continuing what the caller wrote.
 */
function cutAtContinueMark(text: string, message: string): string {
  const mark = CONTINUE_MARK.trim();
  if (!text.includes(message.trim()) || !text.includes(mark))
    throw templateError(
      "continue_final_message: the chat template does not print the last message as it is, so there is no " +
        "place to continue it from",
    );
  const at = text.lastIndexOf(mark);
  return text.startsWith(CONTINUE_MARK, at) ? text.slice(0, at) : text.slice(0, at).trimEnd();
}

/**
 * "System text\n\nUser: hi\nAssistant: hello\nUser: ...\nAssistant:". Each message's content is
 * used as it is; the cue has no trailing space because SentencePiece vocabularies glue the space
 * to the next word. Continuing the last message leaves its line open.
 */
function renderPlain(messages: readonly ChatMessage[], addGenerationPrompt: boolean, cont: boolean): string {
  let out = "";
  messages.forEach((m, i) => {
    const end = cont && i === messages.length - 1 ? "" : "\n";
    if (m.role === "system") out += m.content + (end && "\n\n");
    else if (m.role === "user") out += "User: " + m.content + end;
    else out += "Assistant: " + m.content + end;
  });
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
 * Token ids of a rendered chat prompt, as llama.cpp makes them: control-token texts in it
 * ("<|im_start|>") become their ids, and the model's `add_bos_token` / `add_eos_token` are
 * respected without doubling what the template wrote itself. llama.cpp cuts a BOS text off the
 * start of the rendering (and an EOS text off its end) when the model adds that token anyway, then
 * tokenizes with the model's special tokens; the ids are the same as keeping the template's and
 * not adding another, which is what this does.
 */
export function tokenizeChatPrompt(tokenizer: Tokenizer, text: string): number[] {
  const bos = tokenizer.bosId >= 0 ? tokenizer.tokenText(tokenizer.bosId) : "";
  const eos = tokenizer.eosId >= 0 ? tokenizer.tokenText(tokenizer.eosId) : "";
  const hasBos = bos !== "" && text.startsWith(bos);
  // The end is looked at after the start is taken, as llama.cpp does (BOS and EOS may be one text).
  const hasEos = eos !== "" && (hasBos ? text.slice(bos.length) : text).endsWith(eos);
  return tokenizer.encode(text, {
    addBos: tokenizer.addBos && !hasBos,
    addEos: tokenizer.addEos && !hasEos,
    parseSpecial: true,
  });
}
