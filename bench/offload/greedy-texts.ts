/**
 * The text each successful run of ours generated, per sparsity mode: greedy tokens do not depend on
 * the budget, the cache or the thread count, so every run of a mode must agree (the exact gate
 * mode's text may differ from the predictors').
 */
import type { RunResult } from "./engine-runs.js";
import { commonPrefix } from "./summary.js";

export class GreedyTexts {
  /** mode -> text -> the runs that generated it */
  private readonly texts = new Map<string, Map<string, string[]>>();

  note(mode: string, label: string, r: RunResult): void {
    if (!r.ok || r.text === undefined) return;
    const byText = this.texts.get(mode) ?? this.texts.set(mode, new Map()).get(mode)!;
    const list = byText.get(r.text) ?? [];
    list.push(label);
    byText.set(r.text, list);
  }

  /** Exactness across every run of ours: a line per mode. */
  report(log: (s: string) => void): void {
    for (const [mode, byText] of this.texts) {
      log("");
      log(
        byText.size === 1
          ? `Ours (${mode} sparsity) generated the same text in all ${[...byText.values()][0].length} successful runs (every limit, thread count and ablation setting).`
          : `WARNING: ours (${mode} sparsity) generated ${byText.size} different texts across runs (greedy; they agree on the first ${commonPrefix([...byText.keys()])} characters): ` +
              [...byText.entries()].map(([t, l]) => `${JSON.stringify(t.trim())} in ${l.join(", ")}`).join(" | "),
      );
    }
  }
}
