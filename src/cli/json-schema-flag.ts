/**
 * `--json-schema SCHEMA|FILE` (llama.cpp's `-j`, whose value is the schema itself; here a file
 * name works too) and `--json-schema-file FILE` (`-jf`): the answer is JSON that the schema
 * accepts, by constrained decoding. `--json-schema '{}'` asks for any JSON value.
 */
import { readFileSync } from "node:fs";
import { ApiError } from "../generate/errors.js";
import { responseGrammar, type ResponseFormat } from "../generate/response-format.js";
import { UsageError, type FlagSpec, type ParsedArgs } from "./args.js";
import { errorText } from "../format/printable.js";

export const JSON_SCHEMA_FLAGS: FlagSpec[] = [
  {
    names: ["-j", "--json-schema"],
    key: "jsonSchema",
    type: "string",
    help: "constrain the answer to JSON that this schema accepts: the schema itself, or a file holding it",
  },
  { names: ["-jf", "--json-schema-file"], key: "jsonSchemaFile", type: "string", help: "the same, from a file" },
];

/** The response format the flags ask for (undefined: none), checked now so that a bad schema fails before loading. */
export function responseFormatFromFlags(command: string, args: ParsedArgs): ResponseFormat | undefined {
  const inline = args.jsonSchema as string | undefined;
  const file = args.jsonSchemaFile as string | undefined;
  if (inline !== undefined && file !== undefined)
    throw new UsageError(`${command}: give --json-schema or --json-schema-file, not both`);
  if (inline === undefined && file === undefined) return undefined;
  let text: string;
  let where: string;
  if (file !== undefined || !/^\s*[{[]|^\s*(true|false)\s*$/.test(inline!)) {
    where = file ?? inline!;
    try {
      text = readFileSync(where, "utf8");
    } catch (e) {
      throw new UsageError(`${command}: cannot read the JSON schema file ${where}: ${errorText(e)}`);
    }
  } else {
    where = "--json-schema";
    text = inline!;
  }
  let schema: unknown;
  try {
    schema = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`${command}: ${where} is not JSON: ${errorText(e)}`);
  }
  if (typeof schema !== "boolean" && (typeof schema !== "object" || schema === null || Array.isArray(schema)))
    throw new UsageError(`${command}: ${where} must hold a JSON schema (an object)`);
  const format: ResponseFormat = { type: "json_schema", schema: schema as Record<string, unknown> | boolean };
  try {
    responseGrammar(format);
  } catch (e) {
    if (e instanceof ApiError) throw new UsageError(`${command}: ${where}: ${e.message}`);
    throw e;
  }
  return format;
}
