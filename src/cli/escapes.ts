/**
 * llama.cpp's `-e/--escape` (on by default there, and here): in the prompt, \n \r \t \' \" \\
 * and \xHH become the characters they name; any other backslash stays as written. Applied to the
 * UTF-8 bytes, as llama.cpp does, so that \xHH sequences can spell a multi-byte character.
 */
const SIMPLE: Record<string, number> = { n: 0x0a, r: 0x0d, t: 0x09, "'": 0x27, '"': 0x22, "\\": 0x5c };
const BACKSLASH = 0x5c;

export function processEscapes(text: string): string {
  if (!text.includes("\\")) return text;
  const bytes = Buffer.from(text, "utf8");
  const out = Buffer.alloc(bytes.length);
  let o = 0;
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] !== BACKSLASH || i + 1 >= bytes.length) {
      out[o++] = bytes[i];
      continue;
    }
    const next = String.fromCharCode(bytes[++i]);
    const simple = SIMPLE[next];
    if (simple !== undefined) {
      out[o++] = simple;
      continue;
    }
    // \x needs two hex digits after it (and a character after those, as llama.cpp requires)
    const hex = next === "x" && i + 2 < bytes.length ? String.fromCharCode(bytes[i + 1], bytes[i + 2]) : "";
    if (/^[0-9a-fA-F]{2}$/.test(hex)) {
      out[o++] = parseInt(hex, 16);
      i += 2;
      continue;
    }
    out[o++] = BACKSLASH;
    out[o++] = bytes[i];
  }
  return out.subarray(0, o).toString("utf8");
}
