/**
 * The probe's cache file: ~/.cache/powerinfer-ts/probe-<machine id>.json (POWERINFER_CACHE_DIR
 * overrides the folder). A later plan on the same machine measures only what the file lacks.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { machineDifference, machineId, type MachineFingerprint } from "./machine.js";
import { emptyResult, PROBE_VERSION, type ProbeResult } from "./probe-results.js";

export function defaultCacheDir(): string {
  return process.env.POWERINFER_CACHE_DIR || join(homedir(), ".cache", "powerinfer-ts");
}

export function probeCachePath(dir: string, fp: MachineFingerprint): string {
  return join(dir, `probe-${machineId(fp)}.json`);
}

/** The cached results for this machine, or null when there are none (or of another version or machine, or damaged). */
export function loadProbeCache(path: string, fp: MachineFingerprint): ProbeResult | null {
  if (!existsSync(path)) return null;
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as ProbeResult;
    // Same machine id but another device: keep the compute numbers, the read table is keyed by device anyway.
    if (r.version !== PROBE_VERSION || machineDifference({ ...r.fingerprint, device: fp.device }, fp) !== null)
      return null;
    return { ...emptyResult(fp), ...r, fingerprint: fp };
  } catch {
    return null; // a damaged cache is measured again, not an error
  }
}

/** Writes the results whole (a temporary file renamed over the old one: a reader never sees half a file). */
export function saveProbeCache(path: string, r: ProbeResult): void {
  mkdirSync(join(path, ".."), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(r, null, 1) + "\n");
  renameSync(tmp, path);
}
