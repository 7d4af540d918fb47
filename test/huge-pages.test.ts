/**
 * Huge pages for the arena (src/runtime/arena.ts): the native addon's hugePages advises exactly the
 * 2 MiB pages inside a view, refuses what is not a Uint8Array, and an arena's memory, once touched,
 * is backed by huge pages where Linux's transparent huge pages allow it (and by none with
 * POWERINFER_THP=0). Skipped where the addon was not built.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { aio } from "../src/io/aio.js";
import { ROOT } from "./helpers.js";

const binding = aio().binding;
const skip = binding?.hugePages ? false : `the native addon is not here (${aio().reason})`;
const MiB = 1 << 20;

/** Linux's transparent huge page mode: always, madvise, never, or null where the kernel has none. */
function thpMode(): string | null {
  try {
    return /\[(\w+)\]/.exec(readFileSync("/sys/kernel/mm/transparent_hugepage/enabled", "utf8"))?.[1] ?? null;
  } catch {
    return null;
  }
}

test("hugePages advises the whole 2 MiB pages inside the view, and refuses other arrays", { skip }, () => {
  const advise = binding!.hugePages!;
  const buffer = new WebAssembly.Memory({ initial: 160, maximum: 160, shared: true }).buffer; // 10 MiB
  const whole = advise(new Uint8Array(buffer));
  if (thpMode() === null) assert.equal(whole, 0);
  else {
    // the buffer need not start on a 2 MiB boundary: 4 or 5 whole pages fit in 10 MiB
    assert.ok(whole === 4 * 2 * MiB || whole === 5 * 2 * MiB, `advised ${whole} bytes of 10 MiB`);
    assert.equal(advise(new Uint8Array(buffer, 0, 64 << 10)), 0, "no whole huge page in 64 KiB");
  }
  assert.throws(() => advise(new Float64Array(4) as unknown as Uint8Array), /hugePages: the view must be a Uint8Array/);
});

// In a child process of its own, so that no other memory of this one is counted.
const CHILD = `
import { Arena } from "${pathToFileURL(join(ROOT, "dist", "src", "runtime", "arena.js")).href}";
import { readFileSync } from "node:fs";
const huge = () => Number(/AnonHugePages:\\s+(\\d+)/.exec(readFileSync("/proc/self/smaps_rollup", "utf8"))[1]);
const before = huge();
const arena = new Arena();
const n = 64 << 20;
const p = arena.alloc(n, 2 << 20);
arena.u8(p, n).fill(1);
console.log(JSON.stringify({ kib: huge() - before }));
`;

function hugeKiB(thp: string): number {
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", CHILD], {
    encoding: "utf8",
    env: { ...process.env, POWERINFER_THP: thp },
  });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout).kib;
}

test("an arena's touched memory is backed by huge pages, and not with POWERINFER_THP=0", { skip }, () => {
  const mode = thpMode();
  const on = hugeKiB("1");
  // "madvise" (most distributions) backs only what the arena advised; "always" backs it anyway
  if (mode === "madvise" || mode === "always") assert.ok(on >= 16 * 1024, `${on} KiB of 64 MiB in huge pages`);
  if (mode === "madvise") assert.equal(hugeKiB("0"), 0);
});
