#!/usr/bin/env node
/**
 * `powerinfer <command> ...`: each command lives in its own file and exports main(argv) -> exit code.
 */
import { buildInfo } from "../server/build-info.js";
import { didYouMean } from "./did-you-mean.js";
import { UsageError } from "./args.js";
import { COMMANDS } from "./commands.js";

function help(): string {
  const lines = ["usage: powerinfer <command> [options]", "", "commands:"];
  for (const [name, c] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(18)} ${c.summary}`);
  lines.push("", "powerinfer <command> --help shows a command's options.");
  return lines.join("\n");
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "-h" || name === "--help" || name === "help") {
    console.log(help());
    return name ? 0 : 1;
  }
  if (name === "--version" || name === "-v" || name === "version") {
    console.log(buildInfo());
    return 0;
  }
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!command) {
    console.error(`powerinfer: unknown command "${name}"${didYouMean(name, Object.keys(COMMANDS))}\n\n${help()}`);
    return 2;
  }
  return (await command.load()).main(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError) console.error(`powerinfer: ${err.message}`);
    else console.error(`powerinfer: ${err instanceof Error ? err.message : String(err)}`);
    if (process.env.POWERINFER_DEBUG && err instanceof Error) console.error(err.stack);
    process.exitCode = err instanceof UsageError ? 2 : 1;
  },
);
