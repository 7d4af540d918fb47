/**
 * The planner's child processes: `powerinfer plan --<kind>-child JOB` in a fresh process, which
 * answers with one message. A fresh process, because what it measures (the runtime's resident
 * memory, a run under the budget) would include what the planner's own process holds.
 */
import { fork } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Runs `powerinfer plan <flag> JSON(job)` and resolves with what `pick` takes from its message;
 * rejects when the child exits without one or fails (`what`: the error's words, with the
 * child's last line of stderr).
 */
export function runPlanChild<T>(flag: string, job: unknown, pick: (message: unknown) => T, what: string): Promise<T> {
  const bin = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "bin", "powerinfer.cjs");
  return new Promise((res, rej) => {
    let result: T | undefined;
    let stderr = "";
    const p = fork(bin, ["plan", flag, JSON.stringify(job)], { stdio: ["ignore", "ignore", "pipe", "ipc"] });
    p.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    p.on("message", (m) => (result = pick(m)));
    p.on("error", rej);
    p.on("exit", (code, signal) => {
      if (result !== undefined && result !== null && code === 0) res(result);
      else
        rej(
          new Error(
            `plan: ${what} failed (${signal ? `signal ${signal}` : `exit ${code}`}): ${stderr.trim().split("\n").pop() ?? ""}`,
          ),
        );
    });
  });
}
