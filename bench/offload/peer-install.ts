/** llama.cpp for bench:offload: node-llama-cpp installed once, and the copy of it that runs under a memory limit. */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT_DIR } from "../paths.js";
import { PEER_DIR } from "../peer.js";

/** The copy of the peer's install that runs under a limit on a CPU with AMX (limitPeer); PEER_DIR is the install as users get it. */
const NO_REPACK_PEER_DIR = join(ROOT_DIR, "bench", ".peer-norepack");
/** node-llama-cpp's CPU variant for AMX: it copies Q4_0, Q4_1 and Q8_0 weights into anonymous memory */
const AMX_VARIANT = "libggml-cpu-sapphirerapids.so";
const PEER_VERSION = "3.21.1";

/** Whether this CPU has AMX (node-llama-cpp's prebuilt then loads its AMX variant). */
function cpuHasAmx(): boolean {
  try {
    return /^flags\s*:.*\bamx_tile\b/m.test(readFileSync("/proc/cpuinfo", "utf8"));
  } catch {
    return false;
  }
}

/**
 * The peer for runs under a memory limit. On a CPU with AMX, node-llama-cpp's prebuilt loads its
 * AMX variant, which copies the Q4_0/Q4_1/Q8_0 weights into anonymous memory: under a limit below
 * the model's size llama.cpp is then killed, not slowed. So these runs use a copy of the peer
 * install (hard links, made once) without that variant: llama.cpp loads the next-best one and
 * reads the mapped file, as llama-cli's --no-repack does. Elsewhere (or with --peer as-is) the
 * install as users get it. Returns the directory and a line for the report.
 */
export function limitPeer(force: boolean | undefined): { dir: string; note: string } {
  const amx = cpuHasAmx();
  if (!(force ?? amx))
    return {
      dir: PEER_DIR,
      note: `llama.cpp as node-llama-cpp ${PEER_VERSION} ships it (${amx ? `--peer as-is: its AMX variant copies the weights into memory, so a limit below the model's size kills it` : "this CPU has no AMX"})`,
    };
  const bins = join("node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");
  if (!existsSync(join(NO_REPACK_PEER_DIR, "package.json"))) {
    // hard links: the copy costs no disk, and removing one name leaves the original alone
    const r = spawnSync("cp", ["-al", PEER_DIR, NO_REPACK_PEER_DIR], { stdio: "inherit" });
    if (r.status !== 0) throw new Error(`could not copy ${PEER_DIR} to ${NO_REPACK_PEER_DIR}`);
  }
  const variant = join(NO_REPACK_PEER_DIR, bins, AMX_VARIANT);
  if (existsSync(variant)) unlinkSync(variant);
  return {
    dir: NO_REPACK_PEER_DIR,
    note: `llama.cpp without node-llama-cpp's AMX variant (${AMX_VARIANT} removed from bench/.peer-norepack${amx ? "" : "; --peer no-repack on a CPU without AMX"}): it maps the file instead of copying the weights into memory, as llama-cli --no-repack`,
  };
}

export function ensurePeer(): boolean {
  if (existsSync(join(PEER_DIR, "node_modules", "node-llama-cpp", "package.json"))) return true;
  mkdirSync(PEER_DIR, { recursive: true });
  writeFileSync(join(PEER_DIR, "package.json"), JSON.stringify({ name: "powerinfer-bench-peer", private: true }));
  process.stderr.write(`installing node-llama-cpp@${PEER_VERSION} into bench/.peer ...\n`);
  const r = spawnSync("npm", ["install", `node-llama-cpp@${PEER_VERSION}`, "--no-audit", "--no-fund"], {
    cwd: PEER_DIR,
    stdio: "inherit",
  });
  return r.status === 0;
}
