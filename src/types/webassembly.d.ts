// The slice of the WebAssembly JS API this project uses (Node provides it; TypeScript's "DOM" lib
// would declare it too, along with a browser we do not want in scope).
declare namespace WebAssembly {
  interface MemoryDescriptor {
    initial: number;
    maximum?: number;
    shared?: boolean;
  }
  class Memory {
    constructor(descriptor: MemoryDescriptor);
    readonly buffer: ArrayBuffer | SharedArrayBuffer;
    grow(delta: number): number;
  }
  class Module {
    constructor(bytes: BufferSource | Uint8Array);
    static exports(module: Module): { name: string; kind: string }[];
  }
  class Instance {
    constructor(module: Module, imports?: Record<string, Record<string, unknown>>);
    readonly exports: Record<string, unknown>;
  }
  function validate(bytes: BufferSource | Uint8Array, features?: unknown): boolean;
  type BufferSource = ArrayBufferView | ArrayBuffer;
}
