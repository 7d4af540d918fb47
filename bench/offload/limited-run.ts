/**
 * Running a command of bench:offload under a hard memory limit: a child memory cgroup per run (v1:
 * memory.limit_in_bytes; v2: memory.max) that counts the page cache, with the file the run reads
 * dropped from the page cache first, so its pages are charged to the run, not to whoever read
 * them before. Without cgroups, the same run without a limit.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GiB } from "./settings.js";

export interface CgroupSupport {
  version: 1 | 2;
  /** the directory child groups are made in */
  parent: string;
}

export interface CgroupUsage {
  /** the group's peak charge (RSS + page cache + kernel), bytes; undefined where not reported */
  peak?: number;
  majorFaults?: number;
  oomKills?: number;
}

/** Where child memory groups can be made, or why not. */
export function cgroupSupport(): CgroupSupport | string {
  if (process.platform !== "linux") return "not Linux";
  let lines: string[];
  try {
    lines = readFileSync("/proc/self/cgroup", "utf8").trim().split("\n");
  } catch (e) {
    return `cannot read /proc/self/cgroup (${(e as Error).message})`;
  }
  const v1 = lines.map((l) => l.split(":")).find((p) => p[1].split(",").includes("memory"));
  let s: CgroupSupport | undefined;
  if (v1 && existsSync("/sys/fs/cgroup/memory")) s = { version: 1, parent: join("/sys/fs/cgroup/memory", v1[2]) };
  else {
    const v2 = lines.map((l) => l.split(":")).find((p) => p[0] === "0");
    if (v2 && existsSync("/sys/fs/cgroup/cgroup.controllers"))
      s = { version: 2, parent: join("/sys/fs/cgroup", v2[2]) };
  }
  if (!s) return "no memory cgroup controller mounted";
  // Probe: make and remove a group, set a limit.
  const probe = join(s.parent, `powerinfer_bench_probe_${process.pid}`);
  try {
    mkdirSync(probe);
    writeFileSync(join(probe, s.version === 1 ? "memory.limit_in_bytes" : "memory.max"), String(GiB));
  } catch (e) {
    return `cannot make a memory cgroup under ${s.parent} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; run as root)`;
  } finally {
    try {
      rmdirSync(probe);
    } catch {
      // never made
    }
  }
  // Groups left behind by a bench that was killed mid-run (empty once their process died).
  for (const name of readdirSync(s.parent)) {
    if (!name.startsWith("powerinfer_bench_")) continue;
    try {
      if (readFileSync(join(s.parent, name, "cgroup.procs"), "utf8").trim() === "") rmdirSync(join(s.parent, name));
    } catch {
      // in use by another bench, or already gone
    }
  }
  return s;
}

let groupSeq = 0;

/**
 * Run `cmd` in a fresh memory group limited to `limit` bytes (page cache included), after
 * dropping `evict` from the page cache; the group is removed afterwards.
 */
export function runLimited(
  cg: CgroupSupport,
  limit: number,
  evict: string,
  cmd: string[],
  timeoutS: number,
): {
  status: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  usage: CgroupUsage;
  timedOut: boolean;
} {
  dropFromPageCache(evict);
  const dir = join(cg.parent, `powerinfer_bench_${process.pid}_${groupSeq++}`);
  mkdirSync(dir);
  try {
    if (cg.version === 1) {
      writeFileSync(join(dir, "memory.limit_in_bytes"), String(limit));
      // with swap accounting, swap counts too (this machine has no swap; harmless where it does)
      if (existsSync(join(dir, "memory.memsw.limit_in_bytes"))) {
        try {
          writeFileSync(join(dir, "memory.memsw.limit_in_bytes"), String(limit));
        } catch {
          // not allowed below the memory limit's current value: keep memory.limit alone
        }
      }
    } else {
      writeFileSync(join(dir, "memory.max"), String(limit));
      if (existsSync(join(dir, "memory.swap.max"))) writeFileSync(join(dir, "memory.swap.max"), "0");
    }
    // The shell moves itself into the group, then becomes the command.
    const r = spawnSync("/bin/sh", ["-c", `echo $$ > "${dir}/cgroup.procs" && exec "$@"`, "sh", ...cmd], {
      encoding: "utf8",
      maxBuffer: 64 << 20,
      timeout: timeoutS * 1000,
      killSignal: "SIGKILL",
    });
    const usage: CgroupUsage = {};
    const read = (f: string) => {
      try {
        return readFileSync(join(dir, f), "utf8");
      } catch {
        return undefined;
      }
    };
    if (cg.version === 1) {
      usage.peak = Number(read("memory.max_usage_in_bytes"));
      const stat = read("memory.stat") ?? "";
      const mf = /^total_pgmajfault (\d+)/m.exec(stat) ?? /^pgmajfault (\d+)/m.exec(stat);
      if (mf) usage.majorFaults = Number(mf[1]);
      const oom = /oom_kill (\d+)/.exec(read("memory.oom_control") ?? "");
      if (oom) usage.oomKills = Number(oom[1]);
    } else {
      const peak = read("memory.peak");
      if (peak) usage.peak = Number(peak);
      const mf = /^pgmajfault (\d+)/m.exec(read("memory.stat") ?? "");
      if (mf) usage.majorFaults = Number(mf[1]);
      const oom = /^oom_kill (\d+)/m.exec(read("memory.events") ?? "");
      if (oom) usage.oomKills = Number(oom[1]);
    }
    const timedOut = (r.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT";
    return { status: r.status, signal: r.signal, stdout: r.stdout ?? "", stderr: r.stderr ?? "", usage, timedOut };
  } finally {
    for (let i = 0; i < 20; i++) {
      try {
        rmdirSync(dir);
        break;
      } catch {
        // the last process may still be leaving the group
        spawnSync("sleep", ["0.2"]);
      }
    }
  }
}

/** Drop a file from the page cache (POSIX_FADV_DONTNEED through dd, as memlimit.sh does). */
function dropFromPageCache(path: string): void {
  if (prewarm) spawnSync("dd", [`if=${path}`, "of=/dev/null", "bs=16M", "status=none"]);
  spawnSync("dd", [`if=${path}`, "iflag=nocache", "count=0", "status=none"]);
}

/**
 * --prewarm: read each run's file whole just before dropping it from this machine's page cache.
 * On a virtual disk the host's own cache then holds it for either engine alike (without it, a
 * file read recently by an earlier run is served from the host's memory and one that was not
 * from the device: measured 3.79 against 1.29-1.44 tok/s for the same run of ours).
 */
let prewarm = false;

export function prewarmEachRun(): void {
  prewarm = true;
}

export function prewarming(): boolean {
  return prewarm;
}

/** The same as runLimited without a limit (no cgroup): the file still dropped from the page cache first. */
export function unlimited(evict: string, cmd: string[], timeoutS: number) {
  dropFromPageCache(evict);
  const r = spawnSync(cmd[0], cmd.slice(1), {
    encoding: "utf8",
    maxBuffer: 64 << 20,
    timeout: timeoutS * 1000,
    killSignal: "SIGKILL",
  });
  return {
    status: r.status,
    signal: r.signal,
    stdout: r.stdout ?? "",
    stderr: r.stderr ?? "",
    usage: {} as CgroupUsage,
    timedOut: (r.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT",
  };
}
