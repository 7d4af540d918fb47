/**
 * A mixture of experts' per-expert figures for `run --stats` (stderr) and `run --json`: per
 * expert across layers its share of the routings, the neuron cache's hit rate on its neurons and
 * what was read ahead for it; with --stats-experts also the layer x expert table.
 */
import { expertSummary, type ExpertSummary, type GroupStats } from "../model/offload/stats.js";

const pct = (v: number) => `${(100 * v).toFixed(1)}%`;

/** Lines for stderr: per expert across layers, and (verbose) per layer x expert. */
export function expertStatsText(g: GroupStats, verbose: boolean): string {
  const E = g.experts;
  const layers = Math.floor(g.steps.length / E);
  const lines = [
    `experts (summed over ${layers} layers): expert, routed share, hit rate, bundles read, read ahead (used)`,
  ];
  for (const e of expertSummary(g)) {
    lines.push(
      `  ${String(e.expert).padStart(3)}  ${pct(e.routedShare).padStart(6)}  hit ${pct(e.hitRate).padStart(6)}  ` +
        `read ${String(e.misses).padStart(8)}  ahead ${e.readAhead} (${e.readAhead > 0 ? pct(e.readAheadUsed / e.readAhead) : "-"} used)`,
    );
  }
  if (verbose) {
    lines.push(`per layer x expert: tokens routed / hit rate`);
    lines.push(`  layer ${Array.from({ length: E }, (_, e) => `expert ${e}`.padStart(13)).join("")}`);
    for (let l = 0; l < layers; l++) {
      let row = `  ${String(l).padStart(5)} `;
      for (let e = 0; e < E; e++) {
        const i = l * E + e;
        const hits = g.hotHits[i] + g.coldHits[i];
        const all = hits + g.misses[i];
        row += `${g.steps[i]} / ${all > 0 ? pct(hits / all) : "-"}`.padStart(13);
      }
      lines.push(row);
    }
  }
  return lines.join("\n") + "\n";
}

/** `run --json`'s per-expert figures: the summary and the layer x expert counters (arrays indexed [layer][expert]). */
export interface ExpertFigures {
  experts: ExpertSummary[];
  layers: {
    routed: number[];
    neuronsComputed: number[];
    hotHits: number[];
    coldHits: number[];
    misses: number[];
    readAhead: number[];
    readAheadUsed: number[];
  }[];
}

export function expertFigures(g: GroupStats): ExpertFigures {
  const E = g.experts;
  const layers: ExpertFigures["layers"] = [];
  for (let i = 0; i + E <= g.steps.length; i += E) {
    const part = (a: Float64Array) => Array.from(a.subarray(i, i + E));
    layers.push({
      routed: part(g.steps),
      neuronsComputed: part(g.neuronsComputed),
      hotHits: part(g.hotHits),
      coldHits: part(g.coldHits),
      misses: part(g.misses),
      readAhead: part(g.readAhead),
      readAheadUsed: part(g.readAheadUsed),
    });
  }
  return { experts: expertSummary(g), layers };
}
