/** Section 4 of bench:offload: the device's read bandwidth at our read size against what the runs achieved. */
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { typeFromName } from "../../src/format/ggml-types.js";
import { bundleParts } from "../../src/format/store/ffn-types.js";
import { SHAPE_SPECS } from "../../src/offline/synth.js";
import { median } from "../../src/planner/median.js";
import { ROOT_DIR } from "../paths.js";
import type { BenchContext } from "./context.js";
import type { RunResult } from "./engine-runs.js";
import { QUEUE_DEPTH } from "./settings.js";

export function reportReadBandwidth(b: BenchContext): void {
  const { o, models, log, raw } = b;
  const fio = spawnSync("fio", ["--version"], { encoding: "utf8" });
  log("");
  log("## Flash read bandwidth");
  log("");
  const sizes = ["4k", "8k", "64k", "256k"];
  if (fio.status === 0) {
    for (const s of sizes) {
      const r = spawnSync(
        "fio",
        [
          "--name=probe",
          `--filename=${models.store}`,
          "--rw=randread",
          `--bs=${s}`,
          "--iodepth=16",
          "--ioengine=libaio",
          "--direct=1",
          "--runtime=3",
          "--time_based",
          "--readonly",
          "--output-format=json",
        ],
        { encoding: "utf8" },
      );
      const bw = r.status === 0 ? JSON.parse(r.stdout).jobs[0].read.bw_bytes / 1e6 : NaN;
      log(`- fio, random ${s} O_DIRECT reads at QD 16 on the store: ${bw.toFixed(0)} MB/s`);
    }
  } else {
    const r = spawnSync(
      process.execPath,
      [
        join(ROOT_DIR, "dist", "bench", "io-probe.js"),
        "--file",
        models.store,
        "--sizes",
        sizes.join(","),
        "--qd",
        `1,${QUEUE_DEPTH}`,
        "--seconds",
        "2",
        "--json",
      ],
      { encoding: "utf8" },
    );
    if (r.status !== 0) log(`- io-probe failed: ${r.stderr.trim().split("\n").pop()}`);
    else {
      const probe = JSON.parse(r.stdout.trim().split("\n").pop()!) as {
        direct: boolean;
        cells: { readBytes: number; queueDepth: number; mbPerSec: number; iops: number }[];
      };
      raw.io = probe;
      log(
        `fio is not installed; bench/io-probe.ts (the runtime's own flash reader, ${probe.direct ? "O_DIRECT" : "buffered"}, random reads over the store file, 2 s per cell):`,
      );
      log("");
      log("| read size | QD 1 | QD 16 |");
      log("|---|---|---|");
      for (const c of probe.cells.filter((c) => c.queueDepth === 1)) {
        const deep = probe.cells.find((d) => d.readBytes === c.readBytes && d.queueDepth === QUEUE_DEPTH);
        log(
          `| ${c.readBytes / 1024} KiB | ${c.mbPerSec.toFixed(0)} MB/s (${(c.iops / 1000).toFixed(1)}K IOPS) | ${deep ? `${deep.mbPerSec.toFixed(0)} MB/s (${(deep.iops / 1000).toFixed(1)}K IOPS)` : "-"} |`,
        );
      }
    }
  }
  log("");
  log(
    `Ours reads whole bundles (${bundleParts(typeFromName(o.type)!, SHAPE_SPECS[o.shape].dim, false).bundleBytes / 1024} KiB for this model; adjacent misses coalesce) (native AIO where built: queue depth 1024 on its I/O thread, 256 inline; else libuv, 64); the achieved rates are in the tables above (read MB/s over the whole run, and bytes over I/O wait below).`,
  );
  const all = [
    ...((raw.compare
      ? Object.values(raw.compare as Record<string, { ours: RunResult[] }>).flatMap((c) => c.ours)
      : []) as RunResult[]),
    ...((raw.ablation ? Object.values(raw.ablation as Record<string, RunResult[]>).flat() : []) as RunResult[]),
  ].filter((r) => r.ok && r.ioWaitS! > 0.5);
  if (all.length) {
    const whileWaiting = median(all.map((r) => r.readMB! / r.ioWaitS!));
    log(
      `Median over ours' runs with reads: ${whileWaiting.toFixed(0)} MB/s while waiting for reads (bytes read / I/O wait time; an upper bound, since reads also land while the hits compute).`,
    );
  }
}
