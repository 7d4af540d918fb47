/**
 * UTF-8 and GPT-2 byte-alphabet helpers shared by the encoders and decoders.
 */

const encoder = new TextEncoder();

/** UTF-8 bytes of a string (lone surrogates become U+FFFD, as any UTF-8 producer must). */
export function utf8Encode(s: string): Uint8Array {
  return encoder.encode(s);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
const ANY_SURROGATE = /[\uD800-\uDFFF]/;

/**
 * The string a UTF-8 round trip would give: lone surrogates replaced by U+FFFD. llama.cpp sees
 * bytes, so this is what it would have received for a JS string with broken surrogates.
 */
export function wellFormed(s: string): string {
  return ANY_SURROGATE.test(s) ? s.replace(LONE_SURROGATE, "\uFFFD") : s;
}

/** UTF-8 bytes of one code point, appended to `out`. */
export function pushUtf8(cp: number, out: number[]): void {
  if (cp < 0x80) {
    out.push(cp);
  } else if (cp < 0x800) {
    out.push(0xc0 | (cp >> 6), 0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
  } else {
    out.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f));
  }
}

/**
 * GPT-2's reversible byte -> printable character map: printable Latin-1 bytes stand for
 * themselves, the other 68 bytes (controls, space, DEL, NBSP, soft hyphen...) are shifted to
 * U+0100 and up in byte order. Every mapped character is a single UTF-16 code unit.
 */
const BYTE_TO_CHAR: string[] = new Array(256);
const CHAR_TO_BYTE = new Map<string, number>();
{
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    const ch = String.fromCharCode(printable(b) ? b : 256 + shifted++);
    BYTE_TO_CHAR[b] = ch;
    CHAR_TO_BYTE.set(ch, b);
  }
}

export function gpt2ByteToUnicode(b: number): string {
  return BYTE_TO_CHAR[b];
}

/** The byte a GPT-2 alphabet character stands for, or -1. */
export function gpt2UnicodeToByte(ch: string): number {
  return CHAR_TO_BYTE.get(ch) ?? -1;
}

/** A string's UTF-8 bytes written in the GPT-2 alphabet (one code unit per byte). */
export function gpt2ByteEncode(s: string): string {
  // Fast path: printable ASCII maps to itself.
  let plain = true;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      plain = false;
      break;
    }
  }
  if (plain) return s;
  const bytes = utf8Encode(s);
  let out = "";
  for (let i = 0; i < bytes.length; i++) out += BYTE_TO_CHAR[bytes[i]];
  return out;
}

/**
 * A copy of `s` that does not keep a larger string alive. V8 represents substrings of 13 or more
 * characters as views into their parent; a cache keyed by such views would pin every text it
 * ever saw. Concatenating and slicing forces a fresh flat string of just these characters.
 */
export function detach(s: string): string {
  return s.length < 13 ? s : (s + "\0").slice(0, -1);
}
