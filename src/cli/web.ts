/**
 * `powerinfer web [-m MODEL] [--port N]`: serves a page that runs the engine in the browser (the
 * model copied into the browser's private file system, then run there), with the
 * cross-origin-isolation headers it needs. See src/server/web-page.ts and src/browser/.
 */
import { startWebPage } from "../server/web-page.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";

export const FLAGS: FlagSpec[] = [
  {
    names: ["-m", "--model"],
    key: "model",
    type: "string",
    help: "a model file (GGUF or store) the page offers at /models/NAME",
  },
  { names: ["--port"], key: "port", type: "int", help: "port (default 8080; 0: any free one)", range: [0, 65535] },
  { names: ["--host"], key: "host", type: "string", help: "address to listen on (default 127.0.0.1)" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "web [-m MODEL] [--port N]",
        "Serve a page that chats with a model in the browser (WebAssembly workers, the model in OPFS), showing tok/s, the neuron cache and reads live. " +
          'Scripts: /?model=URL&prompt=TEXT&n=N&temp=0&budget=SIZE&autorun=1 runs one generation and sets document.body.dataset.state = "done".',
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length > 0) throw new UsageError(`web: unexpected argument "${args._[0]}"`);
  const page = await startWebPage({
    port: typeof args.port === "number" ? args.port : 8080,
    host: typeof args.host === "string" ? args.host : undefined,
    models: typeof args.model === "string" ? [args.model] : [],
  });
  const open = page.modelUrls.length ? `${page.url}?model=${encodeURIComponent(page.modelUrls[0])}` : page.url;
  console.log(`powerinfer web: open ${open} in a browser (Ctrl-C stops)`);
  await new Promise<void>((resolve) => {
    const stop = () => {
      void page.close().then(resolve);
    };
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  return 0;
}
