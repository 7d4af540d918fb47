/**
 * Text read from a damaged file, made fit for a one-line error message.
 *
 * A mangled length makes a key or tensor name swallow the bytes after it: newlines, NULs,
 * half a UTF-8 sequence, thousands of characters. Interpolated as is, that turns "one line naming
 * the problem" into screens of binary. Names are shown quoted, escaped and cut short; whole
 * messages get their control characters escaped as a last guard.
 */

/** Control characters (C0, DEL, C1), line and paragraph separators, lone surrogates. */
const UNPRINTABLE =
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

function escape(text: string): string {
  return text.replace(UNPRINTABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** A name from a file, for a message: in double quotes, escaped, at most `max` characters of it shown. */
export function quoted(name: string, max = 80): string {
  const cut = name.length > max ? `${name.slice(0, max)}...(${name.length} characters)` : name;
  return `"${escape(cut.replaceAll("\\", "\\\\").replaceAll('"', '\\"'))}"`;
}

/** A whole message on one line: control characters escaped. */
export function oneLine(message: string): string {
  return escape(message);
}

/**
 * A caught error's message, made one line. V8's JSON.parse quotes the text around the fault, and
 * text from a damaged file can hold newlines there.
 */
export function errorText(e: unknown): string {
  return oneLine(e instanceof Error ? e.message : String(e));
}
