/**
 * Which CPU takes a device's interrupts, seen from /proc/interrupts: the flash reader pins its
 * I/O thread there (native/flash_aio.c pin_threads) and keeps the computing thread on the others.
 * No device is named: the counts of every device's interrupt lines are compared before and after
 * a few thousand reads, and the CPU whose count grew most, clearly ahead of the next, is the one.
 */
import { readFileSync } from "node:fs";

/** Device interrupts taken so far per CPU (all devices summed), or null where /proc/interrupts cannot be read. */
export function interruptCounts(text?: string): Map<number, number> | null {
  let t = text;
  if (t === undefined) {
    try {
      t = readFileSync("/proc/interrupts", "utf8");
    } catch {
      return null;
    }
  }
  const lines = t.split("\n");
  const cpus = lines[0]
    .trim()
    .split(/\s+/)
    .map((c) => (/^CPU\d+$/.test(c) ? Number(c.slice(3)) : NaN));
  if (cpus.length === 0 || cpus.some((c) => Number.isNaN(c))) return null;
  const counts = new Map<number, number>(cpus.map((c) => [c, 0]));
  for (let i = 1; i < lines.length; i++) {
    const fields = lines[i].trim().split(/\s+/);
    // device lines only ("36:" then one count per CPU, then the chip and the name): the
    // architecture's own (LOC timer ticks, RES, CAL, ...) are not a device's and would drown it
    if (fields.length < cpus.length + 1 || !/^\d+:$/.test(fields[0])) continue;
    for (let c = 0; c < cpus.length; c++) {
      const v = Number(fields[c + 1]);
      if (!Number.isFinite(v)) break;
      counts.set(cpus[c], counts.get(cpus[c])! + v);
    }
  }
  return counts;
}

/**
 * The CPU whose interrupts grew most between two counts, if it took at least `min` of them and
 * twice as many as any other CPU; else -1.
 */
export function busiestCpu(before: Map<number, number>, after: Map<number, number>, min: number): number {
  let best = -1,
    most = 0,
    second = 0;
  for (const [cpu, n] of after) {
    const d = n - (before.get(cpu) ?? n);
    if (d > most) {
      second = most;
      most = d;
      best = cpu;
    } else if (d > second) second = d;
  }
  return best >= 0 && most >= min && most >= 2 * second ? best : -1;
}
