/**
 * The few Web platform types the browser build uses, declared here rather than through the DOM
 * library (the package compiles under Node's types; src/browser is bundled by esbuild).
 */

/** An OPFS FileSystemSyncAccessHandle (dedicated workers only). */
export interface SyncAccessHandle {
  read(buffer: ArrayBufferView, options?: { at?: number }): number;
  write(buffer: ArrayBufferView, options?: { at?: number }): number;
  getSize(): number;
  truncate(size: number): void;
  flush(): void;
  close(): void;
}

export interface OpfsFileHandle {
  readonly kind: "file";
  readonly name: string;
  getFile(): Promise<{ size: number; lastModified: number }>;
  createSyncAccessHandle(options?: {
    mode?: "read-only" | "readwrite" | "readwrite-unsafe";
  }): Promise<SyncAccessHandle>;
  move?(newName: string): Promise<void>;
}

export interface OpfsDirectory {
  getFileHandle(name: string, options?: { create?: boolean }): Promise<OpfsFileHandle>;
  removeEntry(name: string): Promise<void>;
  entries(): AsyncIterable<[string, { kind: "file" | "directory"; name: string }]>;
}

export interface WebWorker {
  postMessage(message: unknown, transfer?: unknown[]): void;
  terminate(): void;
  addEventListener(type: "message" | "error" | "messageerror", listener: (ev: WorkerEvent) => void): void;
  onmessage: ((ev: WorkerEvent) => void) | null;
  onerror: ((ev: WorkerEvent) => void) | null;
}

export interface WorkerEvent {
  data?: unknown;
  message?: string;
  filename?: string;
  lineno?: number;
  preventDefault?(): void;
}

/** The globals the browser build reaches for, typed. */
export interface WebGlobals {
  crossOriginIsolated?: boolean;
  isSecureContext?: boolean;
  navigator: {
    hardwareConcurrency?: number;
    storage?: { getDirectory?(): Promise<OpfsDirectory>; estimate?(): Promise<{ quota?: number; usage?: number }> };
    userAgent?: string;
  };
  Worker: new (url: string | URL, options?: { type?: "module" | "classic"; name?: string }) => WebWorker;
  postMessage(message: unknown, transfer?: unknown[]): void;
  onmessage: ((ev: WorkerEvent) => void) | null;
  location?: { href: string; origin: string };
  fetch(
    url: string,
    init?: { headers?: Record<string, string>; signal?: AbortSignal },
  ): Promise<{
    ok: boolean;
    status: number;
    statusText: string;
    headers: { get(name: string): string | null };
    body: { getReader(): { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(): Promise<void> } } | null;
    arrayBuffer(): Promise<ArrayBuffer>;
  }>;
}

export const web = globalThis as unknown as WebGlobals;

/** The root of this origin's private file system (a clear error where there is none). */
export async function opfsRoot(): Promise<OpfsDirectory> {
  const get = web.navigator.storage?.getDirectory;
  if (!get)
    throw new Error(
      "this browser has no Origin Private File System (navigator.storage.getDirectory): the model is read from OPFS; use a current Chromium, Firefox or Safari over http://localhost or https",
    );
  return get.call(web.navigator.storage);
}
