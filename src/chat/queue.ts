/**
 * A first-in-first-out lock around a model's one KV cache: a model runs one generation at a
 * time, and everything that generates through the chat layer (the facade, ChatSession, the HTTP
 * server) waits its turn here instead of failing with "already generating".
 */
interface Waiter {
  grant: (release: () => void) => void;
  fail: (err: unknown) => void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

export class GenerationQueue {
  private holder = false;
  private readonly waiters: Waiter[] = [];

  /** callers waiting for their turn (not counting the one generating) */
  get waiting(): number {
    return this.waiters.length;
  }

  /** whether a generation holds the model now */
  get busy(): boolean {
    return this.holder;
  }

  /**
   * Resolves with a release function once it is this caller's turn. Call release exactly once
   * when done (later calls do nothing). An abort while waiting leaves the queue and rejects with
   * the signal's reason.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (!this.holder) {
      this.holder = true;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      const w: Waiter = { grant: resolve, fail: reject, signal };
      if (signal) {
        w.onAbort = () => {
          const i = this.waiters.indexOf(w);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(signal.reason);
        };
        signal.addEventListener("abort", w.onAbort, { once: true });
      }
      this.waiters.push(w);
    });
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiters.shift();
      if (!next) {
        this.holder = false;
        return;
      }
      if (next.onAbort) next.signal!.removeEventListener("abort", next.onAbort);
      next.grant(this.releaser());
    };
  }
}

const queues = new WeakMap<object, GenerationQueue>();

/** The one queue of a model object (created on first use). */
export function queueFor(model: object): GenerationQueue {
  let q = queues.get(model);
  if (!q) {
    q = new GenerationQueue();
    queues.set(model, q);
  }
  return q;
}
