/** Plans in words, as `plan` prints them and as a re-plan command takes a budget. */
import type { PlannedKnobs } from "./knobs.js";

/** "3.75GiB" etc.: a budget as --memory-budget takes it, exact. */
export function sizeText(bytes: number): string {
  for (const [unit, f] of [
    ["GiB", 2 ** 30],
    ["MiB", 2 ** 20],
    ["KiB", 1024],
  ] as const) {
    const v = bytes / f;
    if (v >= 1 && Number.isInteger(Math.round(v * 1000)) && Math.abs(v * 1000 - Math.round(v * 1000)) < 1e-6)
      return `${+v.toFixed(3)}${unit}`;
  }
  return String(bytes);
}

/** The knobs in a line, as `plan` prints them. */
export function knobsText(k: PlannedKnobs): string {
  const gates = k.sparsity === "gate" ? `, gate rows ${k.residentGates ? "resident" : "from flash"}` : "";
  return `${k.sparsity} sparsity, ${k.threads} thread(s), QD ${k.queueDepth}, hot share ${+k.hotFraction.toFixed(3)}${gates}${k.pipeline ? "" : ", no pipeline"}`;
}
