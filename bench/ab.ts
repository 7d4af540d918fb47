/**
 * Two builds of this engine in turn: `powerinfer bench` (its tg test) from checkout A and from
 * checkout B, in pairs that alternate which goes first, each run a fresh process. Prints each
 * pair's decode tok/s and B/A, then the medians and the per-pair ratios' median and range: how a
 * change is checked for "same speed" on a machine whose speed moves within minutes.
 *
 *   node dist/bench/ab.js --pairs 8 ../before . -- -m model.gguf -p 0 -n 64 -r 2 -t 1
 *   node dist/bench/ab.js --pairs 8 ../before . -- -m model.pi --memory-budget 480MiB -p 0 -n 32 -r 2 -t 1
 *
 * Each checkout must be built (its bin/powerinfer.cjs and dist/); everything after `--` goes to
 * `powerinfer bench` as it is.
 */
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";

interface BenchRow {
  n_prompt: number;
  n_gen: number;
  avg_ts: number;
}

function usage(why: string): never {
  process.stderr.write(`ab: ${why}\nusage: node dist/bench/ab.js [--pairs 8] DIR_A DIR_B -- BENCH_ARGS...\n`);
  process.exit(2);
}

/** One `powerinfer bench` run from checkout `dir`: its decode tok/s. */
function decodeSpeed(dir: string, args: string[]): number {
  const r = spawnSync(process.execPath, [join(dir, "bin", "powerinfer.cjs"), "bench", ...args, "-o", "json"], {
    encoding: "utf8",
  });
  if (r.status !== 0) throw new Error(`${dir}: powerinfer bench exited ${r.status}: ${r.stderr.trim()}`);
  const rows = JSON.parse(r.stdout) as BenchRow[];
  const tg = rows.find((x) => x.n_gen > 0 && x.n_prompt === 0);
  if (!tg) throw new Error(`${dir}: no generation test in the output (give -p 0 and -n N)`);
  return tg.avg_ts;
}

function median(v: number[]): number {
  const s = [...v].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function main(): void {
  const argv = process.argv.slice(2);
  const sep = argv.indexOf("--");
  if (sep < 0) usage("the bench's arguments go after --");
  const own = argv.slice(0, sep);
  const benchArgs = argv.slice(sep + 1);
  let pairs = 8;
  const dirs: string[] = [];
  for (let i = 0; i < own.length; i++) {
    if (own[i] === "--pairs") {
      pairs = Number(own[++i]);
      if (!Number.isInteger(pairs) || pairs < 1) usage(`--pairs takes a whole number >= 1, got ${own[i]}`);
    } else dirs.push(resolve(own[i]));
  }
  if (dirs.length !== 2) usage(`two checkouts, A and B, got ${dirs.length}`);
  const [a, b] = dirs;
  const speedsA: number[] = [];
  const speedsB: number[] = [];
  const ratios: number[] = [];
  for (let p = 0; p < pairs; p++) {
    const aFirst = p % 2 === 0;
    const first = decodeSpeed(aFirst ? a : b, benchArgs);
    const second = decodeSpeed(aFirst ? b : a, benchArgs);
    const [sa, sb] = aFirst ? [first, second] : [second, first];
    speedsA.push(sa);
    speedsB.push(sb);
    ratios.push(sb / sa);
    console.log(
      `pair ${p + 1} (${aFirst ? "A" : "B"} first): A ${sa.toFixed(2)} B ${sb.toFixed(2)} tok/s, B/A ${(sb / sa).toFixed(3)}`,
    );
  }
  console.log(
    `A ${a}: median ${median(speedsA).toFixed(2)} tok/s; B ${b}: median ${median(speedsB).toFixed(2)} tok/s; ` +
      `per-pair B/A median ${median(ratios).toFixed(3)}, range ${Math.min(...ratios).toFixed(3)}-${Math.max(...ratios).toFixed(3)}`,
  );
}

main();
