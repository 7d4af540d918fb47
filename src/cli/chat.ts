/**
 * `powerinfer chat -m MODEL`: an interactive chat in the terminal. Each line you type is a user
 * message; the answer streams back and the conversation is remembered (the oldest exchanges are
 * dropped when it outgrows the context). Ctrl-C stops the answer being written, not the program;
 * at an empty prompt, Ctrl-C twice (or Ctrl-D, or /exit) quits.
 *
 * With stdin not a terminal (a pipe, a file) every line is a message and each answer is written
 * to stdout followed by a newline, nothing else, so transcripts can be scripted; SIGINT then
 * stops the current answer the same way.
 */
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { loadModel } from "../index.js";
import { ApiError, ChatSession, ChatTemplate } from "../chat/index.js";
import { acceptLlamaCppFlags } from "./llama-compat-flags.js";
import type { GenerationStats } from "../generate/generator.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { CONTEXT_FLAGS, MODEL_FLAG, STORE_FLAGS, SAMPLING_FLAGS, loadOptions, samplingOptions } from "./model-flags.js";
import { formatBytes, formatStats, ProgressBar, StatusLine, TokenRate } from "./progress.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  MODEL_FLAG,
  ...CONTEXT_FLAGS,
  { names: ["-sys", "--system"], key: "system", type: "string", help: "a system prompt" },
  {
    names: ["-n", "--n-predict"],
    key: "n",
    type: "int",
    help: "most tokens per answer (-1 = until the model ends it)",
    default: -1,
    range: RANGE.predict,
  },
  {
    names: ["--chat-template-file"],
    key: "templateFile",
    type: "string",
    help: "a Jinja chat template to use instead of the model's",
  },
  {
    names: ["--stats"],
    key: "stats",
    type: "bool",
    help: "a live line with tok/s and resident memory while answering, and a summary after",
  },
  ...SAMPLING_FLAGS,
  ...STORE_FLAGS,
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const HELP_LINES = [
  "Ctrl-C stops an answer; Ctrl-C twice at an empty prompt, Ctrl-D or /exit quits.",
  "/reset forgets the conversation (keeping the system prompt); /help shows this.",
];

export async function main(argv: string[]): Promise<number> {
  argv = acceptLlamaCppFlags("chat", argv);
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage("chat -m MODEL [options]", "Chat with a model in the terminal.\n" + HELP_LINES.join("\n"), FLAGS),
    );
    return 0;
  }
  if (args._.length) throw new UsageError(`chat: unexpected argument "${args._[0]}"`);
  const load = loadOptions("chat", args);
  const modelPath = load.modelPath;
  let template: ChatTemplate | undefined;
  if (typeof args.templateFile === "string") {
    try {
      template = ChatTemplate.jinja(readFileSync(args.templateFile, "utf8"));
    } catch (e) {
      throw new UsageError(
        `chat: --chat-template-file ${args.templateFile}: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
  }

  const interactive = Boolean(process.stdin.isTTY && process.stdout.isTTY);
  const bar = new ProgressBar({ label: "loading", total: 0, unit: "bytes" });
  let model;
  try {
    model = await loadModel({
      ...load,
      onLoadProgress: (done, total) => {
        bar.setTotal(total);
        bar.update(done);
      },
    });
  } catch (e) {
    bar.abandon();
    throw e;
  }
  bar.abandon();

  try {
    const session = new ChatSession(model, {
      systemPrompt: args.system as string | undefined,
      template: template ?? ChatTemplate.fromMetadata(model.metadata, model.tokenizer),
      defaults: { ...samplingOptions(args), maxTokens: args.n as number },
    });
    if (interactive) {
      process.stderr.write(
        `chatting with ${modelPath} (context ${model.contextSize} tokens). ${HELP_LINES.join(" ")}\n`,
      );
    }
    if (model.contextNote) process.stderr.write(`note: ${model.contextNote}\n`);
    return await converse(session, interactive, Boolean(args.stats));
  } finally {
    await model.dispose();
  }
}

async function converse(session: ChatSession, interactive: boolean, stats: boolean): Promise<number> {
  const rl = createInterface({
    input: process.stdin,
    output: interactive ? process.stdout : undefined,
    terminal: interactive,
    prompt: "> ",
  });
  let answering: AbortController | undefined;
  let armedQuit = false;
  let exitCode = 0;
  const quit = (code: number) => {
    exitCode = code;
    rl.close();
  };
  // Ctrl-C: stop the answer if one is being written; otherwise clear the line, and quit on a second press.
  const onInterrupt = () => {
    if (answering) {
      answering.abort(new Error("stopped by the user"));
      return;
    }
    if (!interactive) return quit(130);
    if (rl.line.length > 0) {
      rl.write(null, { ctrl: true, name: "u" });
      armedQuit = false;
      return;
    }
    if (armedQuit) return quit(130);
    armedQuit = true;
    process.stdout.write("\n(press Ctrl-C again to quit, or type /exit)\n");
    rl.prompt();
  };
  rl.on("SIGINT", onInterrupt); // the terminal's Ctrl-C (raw mode)
  process.on("SIGINT", onInterrupt); // kill -INT, or Ctrl-C when stdin is not a terminal

  const status = stats ? new StatusLine() : undefined;
  const rate = new TokenRate();
  try {
    if (interactive) rl.prompt();
    for await (const line of rl) {
      armedQuit = false;
      const text = line.trim();
      if (interactive && text.startsWith("/")) {
        if (text === "/exit" || text === "/quit") break;
        if (text === "/reset") {
          session.reset();
          process.stderr.write("(conversation forgotten)\n");
        } else if (text === "/help") process.stderr.write(HELP_LINES.join("\n") + "\n");
        else process.stderr.write(`unknown command ${text}; /help lists them\n`);
        rl.prompt();
        continue;
      }
      if (text === "") {
        if (interactive) rl.prompt();
        continue;
      }
      answering = new AbortController();
      rate.reset();
      status?.start();
      try {
        const reply = await session.prompt(line, {
          signal: answering.signal,
          onText: (piece, tokens) => {
            process.stdout.write(piece);
            if (status) {
              rate.mark(tokens);
              status.update(
                formatStats({
                  tokensPerSecond: rate.perSecond,
                  residentBytes: process.memoryUsage.rss(),
                  extra: `${tokens} tokens`,
                }),
              );
            }
          },
        });
        status?.stop();
        process.stdout.write("\n");
        if (reply.stopReason === "abort") process.stderr.write("(stopped)\n");
        if (reply.droppedMessages > 0)
          process.stderr.write(
            `(the ${reply.droppedMessages} oldest messages no longer fit the context and were dropped)\n`,
          );
        if (stats) process.stderr.write(summary(reply.stats) + "\n");
      } catch (e) {
        status?.stop();
        if (e instanceof ApiError) process.stderr.write(`error: ${e.message}\n`);
        else if (answering.signal.aborted) process.stderr.write("(stopped)\n");
        else throw e;
      } finally {
        answering = undefined;
      }
      if (interactive) rl.prompt();
    }
  } finally {
    status?.stop();
    process.off("SIGINT", onInterrupt);
    rl.close();
  }
  return exitCode;
}

function summary(s: GenerationStats): string {
  const cached = (s as { cachedPromptTokens?: number }).cachedPromptTokens;
  return (
    `prompt ${s.promptTokens} tokens${cached ? ` (${cached} cached)` : ""}, ${s.prefillTokensPerSecond.toFixed(1)} tok/s | ` +
    `answer ${s.generatedTokens} tokens, ${s.decodeTokensPerSecond.toFixed(1)} tok/s | rss ${formatBytes(process.memoryUsage.rss())}`
  );
}
