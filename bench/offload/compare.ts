/** Section 1 of bench:offload: ours against llama.cpp under the same cgroup memory limits. */
import { median } from "../../src/planner/median.js";
import type { BenchContext } from "./context.js";
import { runOurs, runPeer, type RunResult } from "./engine-runs.js";
import { hotStoreOf } from "./models.js";
import { isDenseShape } from "./options.js";
import { DENSE_MIN_COMPUTED_PCT, reportPairs, type ComparisonCell, type RunPair } from "./pairs.js";
import type { CgroupSupport } from "./limited-run.js";
import { limitBytes, MiB } from "./settings.js";
import { gib, loadRange, med, medNum, oursDetail, ratio } from "./summary.js";

export function compareWithLlamaCpp(b: BenchContext, cg: CgroupSupport): void {
  const { o, models, sparsity, peerOk, peer, log, texts, raw } = b;
  const cells = new Map<string, ComparisonCell>();
  const dense = isDenseShape(o.shape);
  for (let rep = 0; rep < o.reps; rep++) {
    for (const limitG of o.limits) {
      for (const threads of o.threads) {
        const key = `${limitG}/${threads}`;
        const cell = cells.get(key) ?? { ours: [], peer: [], pairs: [] };
        const pair: RunPair = {};
        cell.pairs.push(pair);
        cells.set(key, cell);
        const limit = limitBytes(limitG);
        // a limit ours refused once is refused every time: no need to ask again
        if (!(cell.ours.length && cell.ours.every((r) => r.failure?.startsWith("does not fit")))) {
          const r = runOurs(
            cg,
            {
              store: o.order === "hot" ? hotStoreOf(models) : models.store,
              limit,
              threads,
              n: o.n,
              sparsity,
              temp: o.temp,
              minComputedPct: dense ? DENSE_MIN_COMPUTED_PCT : undefined,
            },
            o.timeoutS,
          );
          cell.ours.push(r);
          pair.ours = r;
          texts.note(sparsity, `compare ${key}`, r);
          process.stderr.write(
            `  ours  ${gib(limit)} t${threads}: ${r.ok ? `${r.prefill} / ${r.decode} tok/s, hit ${r.hitRatePct}%, read ${r.readMB} MB, wait ${r.ioWaitS} s, peak RSS ${r.peakRssMiB} MiB` : r.failure} (load ${r.load.toFixed(1)})\n`,
          );
        }
        if (peerOk) {
          const r = runPeer(cg, peer.dir, models.gguf, limit, threads, o.n, o.temp, o.timeoutS);
          cell.peer.push(r);
          pair.peer = r;
          process.stderr.write(
            `  llama ${gib(limit)} t${threads}: ${r.ok ? `${r.prefill} / ${r.decode} tok/s, major faults ${r.usage?.majorFaults}` : r.failure} (load ${r.load.toFixed(1)})\n`,
          );
        }
      }
    }
  }
  raw.compare = Object.fromEntries(cells);
  log("");
  log(`## Ours vs llama.cpp under a cgroup memory limit (cgroup v${cg.version}, page cache counted)`);
  log("");
  log(`The peer: ${peer.note}.`);
  log("");
  log(
    "| limit | threads | ours prefill tok/s | llama.cpp prefill tok/s | prefill ratio | ours decode tok/s | llama.cpp decode tok/s | decode ratio | load avg |",
  );
  log("|---|---|---|---|---|---|---|---|---|");
  for (const limitG of o.limits) {
    for (const threads of o.threads) {
      const c = cells.get(`${limitG}/${threads}`)!;
      log(
        `| ${limitG} GiB | ${threads} | ${med(c.ours, "prefill")} | ${med(c.peer, "prefill")} | ${ratio(medNum(c.ours, "prefill"), medNum(c.peer, "prefill"))} | ` +
          `${med(c.ours, "decode")} | ${med(c.peer, "decode")} | ${ratio(medNum(c.ours, "decode"), medNum(c.peer, "decode"))} | ${loadRange([...c.ours, ...c.peer])} |`,
      );
    }
  }
  log("");
  log(
    "What limited each side (medians; peak RSS: the largest of the runs, VmHWM; cgroup peak counts the page cache too):",
  );
  log("");
  log(
    "| limit | threads | ours: neurons computed | hit rate | I/O wait share | read MB/s | peak RSS (<= limit + 5%?) | cgroup peak ours | cgroup peak llama.cpp | llama.cpp major faults per run |",
  );
  log("|---|---|---|---|---|---|---|---|---|---|");
  for (const limitG of o.limits) {
    for (const threads of o.threads) {
      const c = cells.get(`${limitG}/${threads}`)!;
      const d = oursDetail(c.ours);
      const okOurs = c.ours.filter((r) => r.ok);
      const within = okOurs.length
        ? okOurs.every((r) => r.peakRssMiB! * MiB <= limitBytes(limitG) * 1.05)
          ? "yes"
          : "NO"
        : "";
      const cgPeak = (rs: RunResult[]) => {
        const p = rs.map((r) => r.usage?.peak).filter((x): x is number => x !== undefined && x > 0);
        return p.length ? `${(Math.max(...p) / MiB).toFixed(0)} MiB` : "-";
      };
      const faults = c.peer.map((r) => r.usage?.majorFaults).filter((x): x is number => x !== undefined);
      log(
        `| ${limitG} GiB | ${threads} | ${d.computed} | ${d.hit} | ${d.wait} | ${d.mbs} | ${d.rss}${within ? ` (${within})` : ""} | ${cgPeak(c.ours)} | ${cgPeak(c.peer)} | ${faults.length ? median(faults).toFixed(0) : "-"} |`,
      );
    }
  }
  reportPairs(b, cells, dense);
}
