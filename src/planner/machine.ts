/**
 * What identifies a machine for the planner: a plan or probe made elsewhere does not apply here.
 * The probe's cache is named by the machine's id, and a plan records the fingerprint it was made
 * on.
 */
import { createHash } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { availableParallelism, cpus, hostname, totalmem } from "node:os";
import { kernelBuild, type KernelBuild } from "../runtime/wasm.js";

/** What identifies a machine for the planner: a plan or probe made elsewhere does not apply here. */
export interface MachineFingerprint {
  hostname: string;
  cpuModel: string;
  cores: number;
  /** bytes of RAM */
  totalMemory: number;
  /** the block device the store lives on ("254:0 /dev/vda"), "" when not known */
  device: string;
  /**
   * the kernel build this Node runs (src/runtime/wasm.ts): the same CPU computes at other speeds
   * under another build; absent in probes and plans made before there were two (SIMD128 then)
   */
  kernels?: KernelBuild;
}

/** The fingerprint of this machine, with the device of `path` (the store). */
export function machineFingerprint(path: string): MachineFingerprint {
  return {
    hostname: hostname(),
    cpuModel: (cpus()[0]?.model ?? "unknown").trim(),
    cores: availableParallelism(),
    totalMemory: totalmem(),
    device: deviceOf(path),
    kernels: kernelBuild(),
  };
}

/** "major:minor source" of the file system holding `path` (Linux), or "dev N" elsewhere. */
export function deviceOf(path: string): string {
  const dev = statSync(path).dev;
  // Linux's st_dev: major in bits 8..19 (and 32..), minor in bits 0..7 and 20..31.
  const major = ((dev >>> 8) & 0xfff) | (Math.floor(dev / 2 ** 32) & ~0xfff);
  const minor = (dev & 0xff) | ((dev >>> 12) & ~0xff);
  try {
    for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
      // id parent major:minor root mountpoint options ... - fstype source superoptions
      const f = line.split(" ");
      if (f[2] !== `${major}:${minor}`) continue;
      const dash = f.indexOf("-");
      return `${major}:${minor} ${dash > 0 ? f[dash + 2] : ""}`.trim();
    }
  } catch {
    // not Linux
  }
  return `dev ${dev}`;
}

/** A short stable id of a machine (its fingerprint without the device). */
export function machineId(fp: MachineFingerprint): string {
  const id = [fp.hostname, fp.cpuModel, fp.cores, fp.totalMemory];
  // a probe cache of its own per build, the SIMD128 one keeping the name it had before
  if ((fp.kernels ?? "simd128") !== "simd128") id.push(fp.kernels!);
  return createHash("sha256").update(JSON.stringify(id)).digest("hex").slice(0, 16);
}

/** null when a and b are the same machine (and device), else what differs, in words. */
export function machineDifference(planned: MachineFingerprint, here: MachineFingerprint): string | null {
  const diffs: string[] = [];
  if (planned.hostname !== here.hostname) diffs.push(`host "${planned.hostname}" vs "${here.hostname}"`);
  if (planned.cpuModel !== here.cpuModel) diffs.push(`CPU "${planned.cpuModel}" vs "${here.cpuModel}"`);
  if (planned.cores !== here.cores) diffs.push(`${planned.cores} vs ${here.cores} cores`);
  if (planned.totalMemory !== here.totalMemory)
    diffs.push(`${gib(planned.totalMemory)} vs ${gib(here.totalMemory)} of RAM`);
  if (planned.device !== here.device) diffs.push(`store device "${planned.device}" vs "${here.device}"`);
  const [pk, hk] = [planned.kernels ?? "simd128", here.kernels ?? "simd128"];
  if (pk !== hk) diffs.push(`kernel build ${pk} vs ${hk}`);
  return diffs.length ? diffs.join(", ") : null;
}

const gib = (b: number) => `${(b / 2 ** 30).toFixed(1)} GiB`;
