/** What every section of bench:offload works with: the options, the models, how runs are limited, the report. */
import type { SparsityMode } from "../../src/model/offload/layout.js";
import type { GreedyTexts } from "./greedy-texts.js";
import type { CgroupSupport } from "./limited-run.js";
import type { Models } from "./models.js";
import type { Options } from "./options.js";

export interface BenchContext {
  o: Options;
  models: Models;
  /** ours' mode: with predictors where the model is predictable (--gate-rank), else the exact gate mode */
  sparsity: SparsityMode;
  /** where runs get their memory limit; undefined: no cgroup, ours' own --memory-budget only */
  cg: CgroupSupport | undefined;
  /** whether node-llama-cpp is installed */
  peerOk: boolean;
  /** the peer's install for runs under a limit, and the report's line about it */
  peer: { dir: string; note: string };
  /** a line of the report: to stderr now, and all of them to stdout at the end */
  log: (s: string) => void;
  texts: GreedyTexts;
  /** the raw results file's content, one key per section */
  raw: Record<string, unknown>;
}
