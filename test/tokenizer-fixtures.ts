/**
 * What the real-vocabulary tokenizer tests and scripts/tokenizer-llamacpp-reference.mjs share:
 * the Hugging Face tokenizer files under test/fixtures/tokenizers/, the options each is
 * converted with, the strings llama.cpp tokenized, and a digest of the converted metadata (the
 * reference ids are only valid for the vocabulary they were made from).
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { GGUFFile, type GGUFValue } from "../src/format/gguf.js";
import { ggufVocabFromHF, type HFVocabOptions } from "../src/format/hf-tokenizer.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const TOKENIZER_FIXTURES = join(ROOT, "test", "fixtures", "tokenizers");

/**
 * The vocabularies. Most are Hugging Face files converted with the options a conversion of the
 * whole model would give them: `vocabSize` is the model's config.json `vocab_size` (its embedding
 * rows), which pads the vocabulary past the tokenizer's last id as llama.cpp's converter does.
 * Phi-3's is llama.cpp's own vocabulary-only GGUF (converted by llama.cpp from tokenizer.model).
 */
export const REAL_VOCABS: { name: string; what: string; options?: HFVocabOptions; gguf?: string }[] = [
  { name: "llama3", what: "Llama 3 (byte-level BPE, llama-bpe)", options: { vocabSize: 128256 } },
  { name: "qwen3", what: "Qwen3 (byte-level BPE, qwen2)", options: { vocabSize: 151936 } },
  { name: "gemma3", what: "Gemma 3 (SentencePiece, byte fallback)", options: { vocabSize: 262208 } },
  { name: "gptoss", what: "gpt-oss (byte-level BPE, o200k: gpt-4o)", options: { vocabSize: 201088 } },
  { name: "deepseek_v3", what: "DeepSeek V3 (byte-level BPE, deepseek-v3)", options: { vocabSize: 129280 } },
  { name: "phi3", what: "Phi-3 (SentencePiece, llama.cpp's GGUF)", gguf: "ggml-vocab-phi-3.gguf.gz" },
];

/** The vocabulary's GGUF metadata: converted from the Hugging Face files, or read from the GGUF. */
export function vocabMetadata(v: (typeof REAL_VOCABS)[number]): Map<string, GGUFValue> {
  if (v.gguf) {
    const dir = mkdtempSync(join(tmpdir(), "tokenizer-vocab-"));
    try {
      const path = join(dir, "vocab.gguf");
      writeFileSync(path, gunzipSync(readFileSync(join(TOKENIZER_FIXTURES, v.name, v.gguf))));
      const f = GGUFFile.open(path);
      f.close();
      return f.metadata;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const files = loadHFFiles(v.name);
  return ggufVocabFromHF(files.tokenizerJson, files.tokenizerConfig, v.options);
}

export interface HFFiles {
  tokenizerJson: unknown;
  tokenizerConfig: unknown;
}

export function loadHFFiles(name: string): HFFiles {
  const dir = join(TOKENIZER_FIXTURES, name);
  return {
    tokenizerJson: JSON.parse(gunzipSync(readFileSync(join(dir, "tokenizer.json.gz"))).toString("utf8")),
    tokenizerConfig: JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")),
  };
}

/** sha256 of the metadata, keys in order, arrays item by item: it changes when the conversion does. */
export function metadataDigest(meta: ReadonlyMap<string, GGUFValue>): string {
  const h = createHash("sha256");
  for (const [k, v] of meta) {
    h.update(`${k}\u0000`);
    const items = Array.isArray(v) || ArrayBuffer.isView(v) ? Array.from(v as ArrayLike<unknown>) : [v];
    h.update(`${Array.isArray(v) || ArrayBuffer.isView(v) ? "a" : "s"}${items.length}\u0000`);
    for (const x of items) h.update(`${typeof x}:${String(x)}\u0000`);
  }
  return h.digest("hex");
}

/**
 * Strings that are hard for a tokenizer to get exactly right. The special-looking ones are the
 * control tokens of all five vocabularies: each is special in one and plain text in the others.
 */
export const HARD_STRINGS: string[] = [
  "",
  "Hello world",
  " Hello world",
  "  two leading spaces",
  "\nleading newline",
  // digits
  "1",
  "12",
  "123",
  "1234",
  "12345",
  "1234567",
  "12345678901234567890123",
  "3.14159 2,718 1,000,000 -42 +7 1e-9",
  "0x1F 0b1010 0o17 007",
  "٣٤٥ ١٢ ۱۲۳ १२३ １２３",
  // contractions
  "I'm you're we've they'll she'd it's don't",
  "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T",
  "We'Ve a'lL 'S 'Re o'clock rock'n'roll",
  "’s curly’re apostrophes ‘quoted’ “double”",
  // whitespace
  " ",
  "   ",
  "a  b   c    d     e",
  "trailing spaces   ",
  "\t",
  "\t\ttabs\t and\tmore\t\t",
  "\n",
  "\n\n\n",
  "line1\nline2\r\nline3\rline4",
  "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n",
  "nbsp\u00a0\u00a0ideographic\u3000space nel\u0085sep\u2028end",
  // scripts
  "我想在apple工作1314151天～",
  "日本語のテキストです。カタカナとひらがな、漢字。",
  "한국어 텍스트입니다. 안녕하세요!",
  "中文，标点符号！“引号”（括号）",
  "مرحبا بالعالم، مُحَمَّد",
  "नमस्ते दुनिया क्षत्रिय हिन्दी",
  "สวัสดีครับ ภาษาไทย",
  "កាន់តែពិសេសអាច",
  "Ελληνικά ΑΒΓ αβγ нещо на Български ЁЖИК",
  "ꦲꦏ꧀ꦱꦫ ꦗꦮ 𓀀𓁐 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
  // emoji
  "😀",
  "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙",
  "👨‍👩‍👧‍👦 family",
  "👍🏽👍🏿 skin tones",
  "🏳️‍🌈 ❤️ ☕ flags 🇯🇵🇺🇸",
  // combining marks and case
  "e\u0301 n\u0303 a\u0308 o\u0302\u0323",
  "café naïve résumé Ünïcödé",
  "ÉCOLE Straße ǅemal İstanbul ﬁne",
  "HelloWORLD camelCaseWord XMLHttpRequest iPhone McDonald's",
  // long words
  "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "supercalifragilisticexpialidocious".repeat(8),
  "a".repeat(300),
  "漢".repeat(200),
  "9".repeat(100),
  // code and URLs
  "https://example.com/path/to/page?query=1&x=y#frag",
  "def foo(x):\n    return x ** 2  # comment\n",
  "if (a != b && c <= d) { return a->b; } // done",
  '<div class="x">hi</div> {"json": [1, 2.5, null, true]}',
  "C:\\Users\\name\\file.txt user@example.com $PATH ~/.bashrc",
  "```python\nprint('hi')\n``` '''''' \"\"\"\"...... !!!!!!?????? ------=======",
  // special-looking text (special in one vocabulary or another)
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
  "<|start|>assistant<|channel|>final<|message|>hi<|end|><|return|>",
  "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>",
  "<s>[INST] not special [/INST]</s> <bos><eos><pad><unk>",
  "<think>\nreasoning\n</think>\n\n<tool_call>{}</tool_call>",
  "<unused0><unused99> <mask> [multimodal] <start_of_image>",
  "<table><tr><td>x</td></tr></table> <h1>t</h1>",
  "<|im_start <|im_end|>|> <<|endoftext|>> <|endoftext|><|endoftext|>",
  "<|user|>\nhello<|end|>\n<|assistant|>\n  hi",
  "<|system|> \t \nstripped?<|end|>  \n<s> x</s> y",
  "<0x41><0x0A> byte-token look-alikes <0xZZ>",
  "\u2581\u2581spm \u2581marks\u2581 ▁x",
  // odd characters
  "\u0000\u0001\u001f control \u007f del",
  "\ufeffBOM \u200bzero\u200cwidth\u200djoiners \u00adsoft",
  "private \ue000\uf8ff use",
];
