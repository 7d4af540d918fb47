/**
 * io/sequential-writer.ts: a file written through the staging buffers (O_DIRECT where the file
 * system takes it, and buffered) holds exactly what a plain model of the writes says, whatever
 * their order: appends across buffer boundaries, gaps left as zeros, writes behind the written
 * buffers and inside the staged one, one straddling both, and the length exact after end().
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { SequentialWriter } from "../src/io/sequential-writer.js";
import { rng, tempDir } from "./helpers.js";

const MiB = 1 << 20;

for (const direct of [true, false])
  test(`SequentialWriter (${direct ? "O_DIRECT where possible" : "buffered"}): the file holds what the writes say, in any order`, async () => {
    const path = join(tempDir("seqw"), "out.bin");
    const r = rng(direct ? 5 : 6);
    const model = new Uint8Array(40 * MiB);
    let end = 0;
    const bytes = (n: number) => {
      const b = new Uint8Array(n);
      for (let i = 0; i < n; i++) b[i] = 1 + Math.floor(r() * 255);
      return b;
    };
    const w = await SequentialWriter.create(path, { direct, fsync: false });
    if (!direct) assert.equal(w.direct, false);
    const pending: Promise<void>[] = [];
    const put = (b: Uint8Array, at?: number) => {
      const p = at ?? end;
      model.set(b, p);
      end = Math.max(end, p + b.length);
      // not awaited one by one: the writer keeps their order
      pending.push(w.write(b, at));
    };
    put(bytes(100)); // a header-sized start
    put(bytes(3 * MiB + 7)); // across the first buffer's end
    put(bytes(5000), end + 12345); // a gap of zeros
    put(bytes(9 * MiB)); // several buffers written
    put(bytes(4), 0); // behind the buffers: the magic
    put(bytes(1000), end - 500); // inside the staged buffer, and past its end
    put(bytes(6 * MiB), 4 * MiB - 10); // behind the written buffers and into the staged one
    put(bytes(6 * MiB), end - 5 * MiB); // behind the buffers, through the staged one, and past the end
    put(bytes(77)); // an odd tail
    pending.push(w.zeros(33));
    end += 33;
    await Promise.all(pending);
    await w.end();
    put(bytes(16), 8); // after end(): behind the end only
    await Promise.all(pending);
    await assert.rejects(w.write(new Uint8Array(1), end), /past the end after end\(\)/);
    await w.sync();
    await w.close();
    const got = readFileSync(path);
    assert.equal(got.length, end, "the length is where the writes ended");
    const at = got.findIndex((b, i) => b !== model[i]);
    assert.equal(at, -1, `byte ${at} is ${got[at]}, written ${model[at]}`);
  });
