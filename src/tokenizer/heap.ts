/**
 * Binary max-heap of candidate merges (key, left, right, size) in growable typed arrays.
 *
 * Order: larger key first; on equal keys the smaller left index first. That is the order of
 * llama.cpp's priority queues (SPM: higher score; BPE: lower rank, so BPE pushes -rank), and
 * keeping it exactly is what makes ties between equal-scored pairs resolve the same way.
 */
export class MergeHeap {
  private key = new Float64Array(64);
  private left = new Int32Array(64);
  private right = new Int32Array(64);
  private size = new Int32Array(64);
  length = 0;

  /** Popped entry. */
  topLeft = 0;
  topRight = 0;
  topSize = 0;

  clear(): void {
    this.length = 0;
  }

  private grow(): void {
    const cap = this.key.length * 2;
    const k = new Float64Array(cap);
    k.set(this.key);
    this.key = k;
    const l = new Int32Array(cap);
    l.set(this.left);
    this.left = l;
    const r = new Int32Array(cap);
    r.set(this.right);
    this.right = r;
    const s = new Int32Array(cap);
    s.set(this.size);
    this.size = s;
  }

  /** a has priority over b */
  private before(a: number, b: number): boolean {
    const ka = this.key[a],
      kb = this.key[b];
    return ka > kb || (ka === kb && this.left[a] < this.left[b]);
  }

  private swap(a: number, b: number): void {
    const k = this.key[a];
    this.key[a] = this.key[b];
    this.key[b] = k;
    const l = this.left[a];
    this.left[a] = this.left[b];
    this.left[b] = l;
    const r = this.right[a];
    this.right[a] = this.right[b];
    this.right[b] = r;
    const s = this.size[a];
    this.size[a] = this.size[b];
    this.size[b] = s;
  }

  push(key: number, left: number, right: number, size: number): void {
    if (this.length === this.key.length) this.grow();
    let i = this.length++;
    this.key[i] = key;
    this.left[i] = left;
    this.right[i] = right;
    this.size[i] = size;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  /** Remove the top entry into topLeft/topRight/topSize. Call only when length > 0. */
  pop(): void {
    this.topLeft = this.left[0];
    this.topRight = this.right[0];
    this.topSize = this.size[0];
    const last = --this.length;
    if (last > 0) {
      this.key[0] = this.key[last];
      this.left[0] = this.left[last];
      this.right[0] = this.right[last];
      this.size[0] = this.size[last];
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= last) break;
        const r = l + 1;
        const c = r < last && this.before(r, l) ? r : l;
        if (!this.before(c, i)) break;
        this.swap(c, i);
        i = c;
      }
    }
  }
}
