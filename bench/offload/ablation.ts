/**
 * Section 2 of bench:offload, the paper's ablation at one limit: naive, + cache, + pipeline (index
 * order), (+ predictors,) + hot-first order.
 */
import type { SparsityMode } from "../../src/model/offload/layout.js";
import { median } from "../../src/planner/median.js";
import { SHAPE_SPECS } from "../../src/offline/synth.js";
import type { BenchContext } from "./context.js";
import { runOurs, type RunResult } from "./engine-runs.js";
import { hotStoreOf } from "./models.js";
import { limitBytes } from "./settings.js";
import { gib, loadRange, med, medNum, oursDetail, ratio } from "./summary.js";

export function runAblation(b: BenchContext): void {
  const { o, models, sparsity, cg, log, texts, raw } = b;
  const limit = limitBytes(o.ablationLimit);
  // with predictors, the steps before them run the exact gate mode, and the predictors are a step
  const early: "gate" | "predictor" = "gate";
  const configs: { name: string; store: string; extra: string[]; sparsity: SparsityMode }[] = [
    {
      name: "naive: bundles read every token (16 MiB cache, no hot region), no pipeline",
      store: models.store,
      extra: ["--cache-size", "16MiB", "--hot-fraction", "0", "--no-pipeline"],
      sparsity: early,
    },
    {
      name: "+ cache (what the budget leaves, half pinned hot)",
      store: models.store,
      extra: ["--no-pipeline"],
      sparsity: early,
    },
    {
      name: `+ pipeline (reads overlap compute: the hits'${o.gateRank ? "" : ", and in predictor mode the next layer's reads ahead"})`,
      store: models.store,
      extra: [],
      sparsity: early,
    },
    ...(o.gateRank
      ? [
          {
            name: `+ predictors (the planted ones pick the neurons: no gate rows read; ${SHAPE_SPECS[o.shape].experts ? "the second routed expert's picks read during the first's step" : "the next layer's reads ahead"})`,
            store: models.store,
            extra: [],
            sparsity: "predictor" as const,
          },
        ]
      : []),
    {
      name: "+ hot-first order on flash and the hot share its profile sets (planted rates as the profile)",
      store: hotStoreOf(models),
      extra: [],
      sparsity,
    },
  ];
  const res = new Map<string, RunResult[]>();
  for (let rep = 0; rep < o.reps; rep++) {
    for (const threads of o.ablationThreads) {
      for (const c of configs) {
        const key = `${c.name}/${threads}`;
        const r = runOurs(
          cg,
          { store: c.store, limit, threads, n: o.n, sparsity: c.sparsity, temp: o.temp, extra: c.extra },
          o.timeoutS,
        );
        (res.get(key) ?? res.set(key, []).get(key)!).push(r);
        texts.note(c.sparsity, `ablation ${key}`, r);
        process.stderr.write(
          `  ${c.name.slice(0, 30)} t${threads}: ${r.ok ? `${r.prefill} / ${r.decode} tok/s, hit ${r.hitRatePct}%, read ${r.readMB} MB, wait ${r.ioWaitS} s` : r.failure}\n`,
        );
      }
    }
  }
  raw.ablation = Object.fromEntries(res);
  log("");
  log(`## Ablation at ${gib(limit)} (${cg ? "cgroup limit and " : ""}--memory-budget ${gib(limit)})`);
  log("");
  log(
    "| configuration | threads | prefill tok/s | decode tok/s | decode vs naive | hit rate | read MB per token | I/O wait share | load avg |",
  );
  log("|---|---|---|---|---|---|---|---|---|");
  for (const threads of o.ablationThreads) {
    const naive = medNum(res.get(`${configs[0].name}/${threads}`)!, "decode");
    for (const c of configs) {
      const rs = res.get(`${c.name}/${threads}`)!;
      const ok = rs.filter((r) => r.ok);
      const perTok = ok.length
        ? median(ok.map((r) => r.readMB! / (r.promptTokens! + r.decodeTokens!))).toFixed(1)
        : "-";
      const d = oursDetail(rs);
      log(
        `| ${c.name} | ${threads} | ${med(rs, "prefill")} | ${med(rs, "decode")} | ${ratio(medNum(rs, "decode"), naive)} | ${d.hit} | ${perTok} | ${d.wait} | ${loadRange(rs)} |`,
      );
    }
  }
}
