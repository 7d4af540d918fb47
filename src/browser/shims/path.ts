/** `node:path` in the browser build: POSIX paths (files are /opfs/NAME). */
function normalize(p: string): string {
  const abs = p.startsWith("/");
  const out: string[] = [];
  for (const part of p.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (out.length && out[out.length - 1] !== "..") out.pop();
      else if (!abs) out.push("..");
    } else out.push(part);
  }
  return (abs ? "/" : "") + out.join("/") || (abs ? "/" : ".");
}
export function join(...parts: string[]): string {
  return normalize(parts.filter((p) => p !== "").join("/"));
}
export function resolve(...parts: string[]): string {
  let p = "";
  for (const part of parts) p = part.startsWith("/") ? part : p + "/" + part;
  return normalize(p.startsWith("/") ? p : "/opfs/" + p);
}
export function basename(p: string, ext?: string): string {
  const b = p.replace(/\/+$/, "").split("/").pop() ?? "";
  return ext && b.endsWith(ext) ? b.slice(0, -ext.length) : b;
}
export function dirname(p: string): string {
  const i = p.replace(/\/+$/, "").lastIndexOf("/");
  return i < 0 ? "." : i === 0 ? "/" : p.slice(0, i);
}
export function extname(p: string): string {
  const b = basename(p);
  const i = b.lastIndexOf(".");
  return i <= 0 ? "" : b.slice(i);
}
export function isAbsolute(p: string): boolean {
  return p.startsWith("/");
}
export function relative(from: string, to: string): string {
  return to.startsWith(from + "/") ? to.slice(from.length + 1) : to;
}
export const sep = "/";
const path = { join, resolve, basename, dirname, extname, isAbsolute, relative, sep, normalize };
export const posix = path;
export default path;
