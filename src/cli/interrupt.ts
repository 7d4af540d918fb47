/**
 * Long offline commands (convert, synth, profile, train-predictors) stop cleanly on Ctrl-C or
 * SIGTERM: the job gets an AbortSignal and removes what it had half written; the command then
 * prints one line and exits with 130, as shells expect of an interrupted program.
 */
export async function interruptible(
  message: string,
  onFail: () => void,
  job: (signal: AbortSignal) => Promise<number>,
): Promise<number> {
  const controller = new AbortController();
  const onSignal = () => controller.abort(new Error("interrupted"));
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    return await job(controller.signal);
  } catch (err) {
    onFail();
    if (controller.signal.aborted) {
      process.stderr.write(`${message}\n`);
      return 130;
    }
    throw err;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}
