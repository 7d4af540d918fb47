/**
 * Pinning the flash reader's I/O thread: which CPU takes a device's interrupts (parsed from
 * /proc/interrupts text), and the native pin itself, which moves the calling thread off that CPU
 * until the ring closes and then gives it back its CPUs.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { closeSync, constants, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { aio } from "../src/io/aio.js";
import { busiestCpu, interruptCounts } from "../src/io/irq-cpu.js";
import { tempDir } from "./helpers.js";

const SAMPLE = (disk0: number, disk1: number, loc0: number) => `           CPU0       CPU1
  1:          9          0   IO-APIC   1-edge      i8042
 36:   ${disk0}   ${disk1}   PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
NMI:          0          0   Non-maskable interrupts
LOC:   ${loc0}    3425389   Local timer interrupts
ERR:          0
`;

test("interruptCounts sums the device lines per CPU and leaves out the architecture's (timer ticks, IPIs)", () => {
  const c = interruptCounts(SAMPLE(5, 1000, 777777))!;
  assert.deepEqual(
    [...c],
    [
      [0, 14],
      [1, 1000],
    ],
  );
  assert.equal(interruptCounts("no header here\n"), null);
});

test("busiestCpu: the CPU whose device interrupts grew most, only when clearly ahead and above the minimum", () => {
  const before = interruptCounts(SAMPLE(5, 1000, 0))!;
  // the timer line moving does not count; the disk's line on CPU1 does
  assert.equal(busiestCpu(before, interruptCounts(SAMPLE(10, 1500, 999999))!, 16), 1);
  assert.equal(busiestCpu(before, interruptCounts(SAMPLE(405, 1020, 0))!, 16), 0);
  // not twice the next CPU's growth: unclear
  assert.equal(busiestCpu(before, interruptCounts(SAMPLE(305, 1500, 0))!, 16), -1);
  // too few to tell
  assert.equal(busiestCpu(before, interruptCounts(SAMPLE(5, 1010, 0))!, 16), -1);
});

/** This thread's CPUs, from /proc (Node has no call for it). */
function allowedCpus(): number[] {
  const line = readFileSync("/proc/thread-self/status", "utf8")
    .split("\n")
    .find((l) => l.startsWith("Cpus_allowed_list:"))!;
  const out: number[] = [];
  for (const part of line.split(":")[1].trim().split(",")) {
    const [a, b] = part.split("-").map(Number);
    for (let c = a; c <= (b ?? a); c++) out.push(c);
  }
  return out;
}

test("native pin: the caller keeps off the I/O thread's CPU until close, then has its CPUs back", (t) => {
  const binding = aio().binding;
  if (!binding?.pin) return t.skip("native AIO not built here");
  const cpus = allowedCpus();
  if (cpus.length < 2) return t.skip("fewer than two CPUs allowed");
  const file = join(tempDir("powerinfer-pin-"), "f.bin");
  writeFileSync(file, new Uint8Array(8192));
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | (constants as { O_DIRECT?: number }).O_DIRECT!);
  } catch {
    return t.skip("this file system refuses O_DIRECT");
  }
  const inline = binding.open(fd, 4, false);
  assert.equal(binding.pin(inline, cpus[0]), false, "a ring without an I/O thread pins nothing");
  binding.close(inline);
  const ring = binding.open(fd, 4, true);
  try {
    assert.equal(binding.pin(ring, 1 << 20), false, "a CPU that does not exist");
    assert.deepEqual(allowedCpus(), cpus);
    const io = cpus[cpus.length - 1];
    assert.equal(binding.pin(ring, io), true);
    assert.deepEqual(
      allowedCpus(),
      cpus.filter((c) => c !== io),
    );
    assert.equal(binding.pin(ring, io), false, "pinned once per ring");
  } finally {
    binding.close(ring);
    closeSync(fd);
  }
  assert.deepEqual(allowedCpus(), cpus, "close gives the caller its CPUs back");
});
