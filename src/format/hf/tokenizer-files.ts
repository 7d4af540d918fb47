/**
 * A Hugging Face directory's tokenizer files, read and parsed once: tokenizer.json (required:
 * a SentencePiece tokenizer.model alone is not read), tokenizer_config.json and
 * chat_template.jinja where present.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { HFConvertError } from "./hf-config.js";
import { errorText } from "../printable.js";

export interface HFTokenizerFiles {
  path: string;
  tokenizerJson: unknown;
  tokenizerConfig: unknown;
  chatTemplate: string | undefined;
}

function readJson(path: string): unknown {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new HFConvertError(`${path}: ${errorText(e)}`);
  }
}

export function readTokenizerFiles(dir: string): HFTokenizerFiles {
  const path = tokenizerPath(dir);
  const tc = join(dir, "tokenizer_config.json");
  const jinja = join(dir, "chat_template.jinja");
  return {
    path,
    tokenizerJson: readJson(path),
    tokenizerConfig: existsSync(tc) ? readJson(tc) : undefined,
    chatTemplate: existsSync(jinja) ? readFileSync(jinja, "utf8") : undefined,
  };
}

/** dir's tokenizer.json, which must exist. */
function tokenizerPath(dir: string): string {
  const path = join(dir, "tokenizer.json");
  if (!existsSync(path))
    throw new HFConvertError(`${dir}: no tokenizer.json (a SentencePiece tokenizer.model alone is not read)`);
  return path;
}

/**
 * dir's tokenizer files, read and parsed when first looked at (a missing tokenizer.json refused
 * at once): a conversion's first tensors are converted while the converting thread parses them
 * (9 MB of JSON for Llama 3's), since only Gemma 3's plan needs them before the metadata.
 */
export function tokenizerFilesOnDemand(dir: string): HFTokenizerFiles {
  const path = tokenizerPath(dir);
  let read: HFTokenizerFiles | undefined;
  const files = () => (read ??= readTokenizerFiles(dir));
  return {
    path,
    get tokenizerJson() {
      return files().tokenizerJson;
    },
    get tokenizerConfig() {
      return files().tokenizerConfig;
    },
    get chatTemplate() {
      return files().chatTemplate;
    },
  };
}

/**
 * The tokenizer's real tokens as llama.cpp's converter counts them for Gemma 3 (tokenizer.json's
 * model vocabulary plus its added tokens), which bounds the embedding rows it keeps.
 */
export function tokenizerCount(t: HFTokenizerFiles): number {
  const j = t.tokenizerJson as { model?: { vocab?: unknown }; added_tokens?: unknown } | null;
  const vocab = j?.model?.vocab;
  const n = Array.isArray(vocab) ? vocab.length : typeof vocab === "object" && vocab ? Object.keys(vocab).length : -1;
  if (n < 0) throw new HFConvertError(`${t.path}: "model.vocab" is missing`);
  return n + (Array.isArray(j?.added_tokens) ? j.added_tokens.length : 0);
}
