import { didYouMean } from "./did-you-mean.js";
/**
 * A small command-line parser for llama.cpp-style flags: `-m FILE`, `--temp 0.7`, `--flag=value`,
 * boolean switches. Unknown flags and bad values are errors that name the flag.
 */
export class UsageError extends Error {
  override name = "UsageError";
}

export interface FlagSpec {
  /** names, e.g. ["-m", "--model"] */
  names: string[];
  key: string;
  type: "string" | "int" | "float" | "bool" | "size";
  help: string;
  /** a heading the help prints before this flag: where a group of related flags starts */
  section?: string;
  default?: string | number | boolean;
  /**
   * [min, max] a number must lie in (both included), required of every int, float and size flag
   * (src/cli/flag-ranges.ts has the common ones): a value past what the engine can use must be
   * a usage error naming the flag, not an allocation of 4 GB or a crash deep inside.
   */
  range?: readonly [number, number];
}

export type ParsedArgs = { _: string[]; [key: string]: string | number | boolean | string[] | undefined };

const SIZE_UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1024,
  kb: 1000,
  kib: 1024,
  m: 2 ** 20,
  mb: 1e6,
  mib: 2 ** 20,
  g: 2 ** 30,
  gb: 1e9,
  gib: 2 ** 30,
};

/** "1.5GiB", "512M", "2g", "1000000" -> bytes. */
export function parseSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = m ? SIZE_UNITS[m[2].toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new UsageError(`"${text}" is not a size (examples: 1.5GiB, 512MiB, 2G)`);
  return Math.round(Number(m[1]) * unit);
}

export function parseArgs(argv: string[], specs: FlagSpec[]): ParsedArgs {
  const out: ParsedArgs = { _: [] };
  for (const s of specs) if (s.default !== undefined) out[s.key] = s.default;
  const byName = new Map<string, FlagSpec>();
  for (const s of specs) for (const n of s.names) byName.set(n, s);
  for (const s of specs) {
    // a programming error, caught by any use of the command (its --help included)
    if (s.type !== "string" && s.type !== "bool" && !s.range)
      throw new Error(`option ${s.names.join(", ")} is numeric but has no range`);
  }
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i];
    if (arg === "--") {
      out._.push(...argv.slice(i + 1));
      break;
    }
    if (!arg.startsWith("-") || arg === "-" || /^-\d/.test(arg)) {
      out._.push(arg);
      continue;
    }
    let value: string | undefined;
    const eq = arg.indexOf("=");
    if (arg.startsWith("--") && eq > 0) {
      value = arg.slice(eq + 1);
      arg = arg.slice(0, eq);
    }
    const spec = byName.get(arg);
    if (!spec)
      throw new UsageError(
        `unknown option ${arg}${didYouMean(
          arg,
          [...byName.keys()].filter((k) => k.startsWith("--")),
        )}`,
      );
    if (spec.type === "bool") {
      out[spec.key] = value === undefined ? true : !/^(0|false|no|off)$/i.test(value);
      continue;
    }
    if (value === undefined) {
      if (i + 1 >= argv.length) throw new UsageError(`option ${arg} needs a value`);
      value = argv[++i];
    }
    out[spec.key] = convert(spec, arg, value);
  }
  return out;
}

function convert(spec: FlagSpec, flag: string, value: string): string | number {
  let v: number;
  switch (spec.type) {
    case "int":
      v = Number(value);
      if (!Number.isInteger(v)) throw new UsageError(`option ${flag} expects an integer, got "${value}"`);
      break;
    case "float":
      v = Number(value);
      if (value.trim() === "" || !Number.isFinite(v))
        throw new UsageError(`option ${flag} expects a number, got "${value}"`);
      break;
    case "size":
      v = parseSize(value);
      break;
    default:
      return value;
  }
  const [min, max] = spec.range!;
  if (!(v >= min && v <= max)) {
    const shown = spec.type === "size" ? (value.length > 40 ? `"${value.slice(0, 40)}..."` : `"${value}"`) : String(v);
    throw new UsageError(`${flag} must be between ${min} and ${max}, got ${shown}`);
  }
  return v;
}

export function usage(command: string, summary: string, specs: FlagSpec[]): string {
  const lines = [`usage: powerinfer ${command}`, "", summary, "", "options:"];
  for (const s of specs) {
    if (s.section) lines.push("", `${s.section}:`);
    else if (s.key === "help" && specs.some((x) => x.section)) lines.push("");
    const names =
      s.names.join(", ") + (s.type === "bool" ? "" : ` ${s.type === "string" ? "VALUE" : s.type.toUpperCase()}`);
    const def = s.default !== undefined ? ` (default: ${s.default})` : "";
    lines.push(`  ${names.padEnd(28)} ${s.help}${def}`);
  }
  return lines.join("\n");
}
