/**
 * Copy a model into OPFS: from a File the user picked or from a URL, streamed in pieces through
 * a sync access handle (never the whole file in memory), into NAME.part, renamed to NAME when
 * complete. Resumable: NAME.part.json records the source (URL, or file name, size and date); a
 * copy of the same source continues from what NAME.part already holds (a Range request for a
 * URL, a slice of the File), anything else starts over. A short copy (the connection dropped,
 * fewer bytes than Content-Length) fails and keeps its .part for the next try.
 */
import { opfsRoot, web, type OpfsDirectory, type SyncAccessHandle } from "./web-types.js";

export interface ImportProgress {
  name: string;
  loaded: number;
  /** bytes in all, when known */
  total: number | null;
  /** bytes that were already there from an earlier, interrupted copy */
  resumedFrom: number;
}

export interface PickedFile {
  name: string;
  size: number;
  lastModified: number;
  slice(start?: number, end?: number): { stream(): { getReader(): ChunkReader } };
}

interface ChunkReader {
  read(): Promise<{ done: boolean; value?: Uint8Array }>;
  cancel(): Promise<void>;
}

async function readText(root: OpfsDirectory, name: string): Promise<string | null> {
  try {
    const f = await (await root.getFileHandle(name)).getFile();
    return await (f as unknown as { text(): Promise<string> }).text();
  } catch {
    return null;
  }
}

async function writeText(root: OpfsDirectory, name: string, text: string): Promise<void> {
  const h = await (await root.getFileHandle(name, { create: true })).createSyncAccessHandle();
  try {
    const b = new TextEncoder().encode(text);
    h.truncate(0);
    h.write(b, { at: 0 });
    h.flush();
  } finally {
    h.close();
  }
}

export function checkName(name: string): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$/.test(name) || name.endsWith(".part") || name.endsWith(".part.json"))
    throw new Error(`"${name}": a model's name in OPFS is letters, digits, ".", "_" and "-" (not ending in .part)`);
}

/** Copy one source into OPFS as `name`; returns its size. */
async function copy(
  name: string,
  source: string,
  open: (from: number) => Promise<{ reader: ChunkReader; total: number | null; from: number }>,
  onProgress: (p: ImportProgress) => void,
  signal?: AbortSignal,
): Promise<number> {
  checkName(name);
  const root = await opfsRoot();
  const part = `${name}.part`,
    meta = `${name}.part.json`;
  const handle: SyncAccessHandle = await (await root.getFileHandle(part, { create: true })).createSyncAccessHandle();
  let have = handle.getSize();
  let ok = false;
  try {
    const prev = await readText(root, meta);
    if (have > 0 && prev !== source) {
      handle.truncate(0);
      have = 0;
    }
    await writeText(root, meta, source);
    const { reader, total, from } = await open(have);
    if (from !== have) {
      handle.truncate(from);
      have = from;
    }
    const resumedFrom = have;
    let at = have;
    let last = 0;
    onProgress({ name, loaded: at, total, resumedFrom });
    for (;;) {
      if (signal?.aborted) {
        await reader.cancel().catch(() => undefined);
        throw new Error(`copy of ${name} stopped (${at} bytes kept; the next copy resumes there)`);
      }
      let chunk: { done: boolean; value?: Uint8Array };
      try {
        chunk = await reader.read();
      } catch (e) {
        handle.flush();
        throw new Error(
          `copy of ${name} was cut off after ${at} bytes (${(e as Error).message}); the next copy resumes there`,
        );
      }
      const { done, value } = chunk;
      if (done) break;
      if (!value || value.length === 0) continue;
      let w = 0;
      while (w < value.length) w += handle.write(value.subarray(w), { at: at + w });
      at += value.length;
      const now = performance.now();
      if (now - last > 100) {
        last = now;
        onProgress({ name, loaded: at, total, resumedFrom });
      }
    }
    handle.flush();
    if (total !== null && at !== total)
      throw new Error(
        `copy of ${name} is short: ${at} of ${total} bytes arrived (the source was cut off; the next copy resumes at ${at})`,
      );
    if (at === 0) throw new Error(`copy of ${name}: the source is empty (0 bytes)`);
    onProgress({ name, loaded: at, total: at, resumedFrom });
    ok = true;
    return at;
  } finally {
    handle.close();
    if (ok) {
      const ph = await root.getFileHandle(part);
      await root.removeEntry(name).catch(() => undefined);
      if (!ph.move) throw new Error("this browser cannot rename files in OPFS (FileSystemHandle.move)");
      await ph.move(name);
      await root.removeEntry(meta).catch(() => undefined);
    }
  }
}

/** Copy the model at `url` into OPFS as `name` (resuming with a Range request). */
export function importUrl(
  url: string,
  name: string,
  onProgress: (p: ImportProgress) => void,
  signal?: AbortSignal,
): Promise<number> {
  let abs: string;
  try {
    abs = new URL(url, web.location?.href).href;
  } catch {
    return Promise.reject(new Error(`"${url}" is not a URL`));
  }
  return copy(
    name,
    JSON.stringify({ url: abs }),
    async (have) => {
      let res;
      try {
        res = await web.fetch(abs, { headers: have > 0 ? { range: `bytes=${have}-` } : {}, signal });
      } catch (e) {
        throw new Error(`fetching ${abs} failed: ${(e as Error).message}`);
      }
      if (res.status === 416 && have > 0) {
        // the part may already hold everything: start over to be sure of it
        res = await web.fetch(abs, { signal });
        have = 0;
      }
      if (!res.ok || !res.body) throw new Error(`fetching ${abs}: HTTP ${res.status} ${res.statusText}`);
      const len = res.headers.get("content-length");
      if (res.status === 206) {
        const m = /\/(\d+)\s*$/.exec(res.headers.get("content-range") ?? "");
        return { reader: res.body.getReader(), total: m ? Number(m[1]) : null, from: have };
      }
      return { reader: res.body.getReader(), total: len !== null ? Number(len) : null, from: 0 };
    },
    onProgress,
    signal,
  );
}

/** Copy a picked File into OPFS as `name` (resuming from a slice). */
export function importFile(
  file: PickedFile,
  name: string,
  onProgress: (p: ImportProgress) => void,
  signal?: AbortSignal,
): Promise<number> {
  return copy(
    name,
    JSON.stringify({ file: file.name, size: file.size, lastModified: file.lastModified }),
    async (have) => {
      const from = have <= file.size ? have : 0;
      return { reader: file.slice(from).stream().getReader(), total: file.size, from };
    },
    onProgress,
    signal,
  );
}

export interface OpfsEntry {
  name: string;
  size: number;
}

/** Every file in OPFS (unfinished copies included, as NAME.part). */
export async function listOpfs(): Promise<OpfsEntry[]> {
  const root = await opfsRoot();
  const out: OpfsEntry[] = [];
  for await (const [name, h] of root.entries()) {
    if (h.kind !== "file") continue;
    const f = await (await root.getFileHandle(name)).getFile();
    out.push({ name, size: f.size });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

export async function removeOpfs(name: string): Promise<void> {
  const root = await opfsRoot();
  await root.removeEntry(name);
}
