/**
 * A JSON schema (or OpenAI's `json_object` mode) compiled to the grammar that constrained decoding
 * walks (json-automaton.ts): one node per kind of value, each knowing the bytes its values can
 * start with and the fewest bytes a value of it takes.
 *
 * Supported: `type` (one or several), `properties`, `required`, `additionalProperties` (false,
 * true or a schema), `items`, `minItems`/`maxItems`, `minLength`/`maxLength`, `enum`, `const`,
 * `anyOf`/`oneOf` whose branches start with different characters (`{"type": "string"}` or null),
 * and the annotations (`title`, `description`, `default`, `examples`, ...). Everything else
 * (`minimum`, `pattern`, `format`, `$ref`, ...) cannot be enforced by this grammar and is refused
 * with one error naming every such keyword and where it is, rather than ignored: ignoring one
 * would produce answers that do not validate.
 */
import { ApiError } from "./errors.js";

export type SchemaNode = ObjectNode | ArrayNode | StringNode | NumberNode | LiteralsNode | UnionNode;

/** Bytes a value can start with, 256 flags. */
export type FirstBytes = Uint8Array;

interface NodeBase {
  /** the fewest bytes a value of this node takes (compact JSON) */
  minLen: number;
  first: FirstBytes;
}

export interface ObjectProperty {
  name: string;
  /** the name as it appears between the quotes of a key (JSON-escaped bytes) */
  key: Uint8Array;
  node: SchemaNode;
  required: boolean;
}

/** A trie of property keys (their JSON-escaped bytes). */
export interface KeyTrie {
  next: Map<number, KeyTrie>;
  /** the property whose key ends here, or -1 */
  prop: number;
  /** properties whose key passes through here */
  below: number[];
  depth: number;
  /** the bytes so far end inside an escape sequence: only the trie's own next byte may follow */
  midEscape: boolean;
}

export interface ObjectNode extends NodeBase {
  kind: "object";
  props: ObjectProperty[];
  keys: KeyTrie;
  /** schema of keys not in `props`; null: none allowed */
  additional: SchemaNode | null;
}

export interface ArrayNode extends NodeBase {
  kind: "array";
  items: SchemaNode;
  minItems: number;
  maxItems: number;
}

export interface StringNode extends NodeBase {
  kind: "string";
  /** characters (code points; an escape sequence is one) */
  minLength: number;
  maxLength: number;
}

export interface NumberNode extends NodeBase {
  kind: "number";
  integer: boolean;
}

/** A fixed set of JSON texts: `enum`, `const`, `true`/`false`, `null`. */
export interface LiteralsNode extends NodeBase {
  kind: "literals";
  trie: LiteralTrie;
}

export interface LiteralTrie {
  next: Map<number, LiteralTrie>;
  /** a literal ends here */
  end: boolean;
  /** fewest bytes from here to the end of a literal */
  toEnd: number;
}

/** Values of several kinds, told apart by their first byte. */
export interface UnionNode extends NodeBase {
  kind: "union";
  /** the branch a first byte selects (index into branches), -1 for none */
  byFirst: Int8Array;
  branches: SchemaNode[];
}

/** Digits an integer part, a fraction and an exponent may have: keeps every number finite and an integer exact. */
export const NUMBER_LIMITS = Object.freeze({ intDigits: 15, fracDigits: 15, expDigits: 2 });

const ANNOTATIONS = new Set([
  "title",
  "description",
  "default",
  "examples",
  "$schema",
  "$id",
  "$comment",
  "deprecated",
  "readOnly",
  "writeOnly",
  "strict",
]);
const HANDLED = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "enum",
  "const",
  "anyOf",
  "oneOf",
]);
const TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"] as const;
type TypeName = (typeof TYPES)[number];

/** The schema cannot be enforced: 400, naming every keyword (and where) or the problem. */
export class UnsupportedSchemaError extends ApiError {
  override name = "UnsupportedSchemaError";

  constructor(
    message: string,
    /** the unsupported keywords, each with its place in the schema */
    readonly keywords: { keyword: string; at: string }[] = [],
  ) {
    super(400, message, "invalid_request_error", "response_format", "unsupported_schema");
  }
}

/** Compiles a JSON schema; throws UnsupportedSchemaError listing every keyword it cannot enforce. */
export function compileSchema(schema: unknown): SchemaNode {
  const unsupported: { keyword: string; at: string }[] = [];
  const problems: string[] = [];
  const node = compile(schema, "schema", unsupported, problems);
  if (unsupported.length > 0) {
    const list = unsupported.map((u) => `"${u.keyword}" (at ${u.at})`).join(", ");
    throw new UnsupportedSchemaError(
      `the JSON schema uses keywords constrained decoding cannot enforce: ${list}; supported: type, properties, required, ` +
        `additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, anyOf/oneOf of different types`,
      unsupported,
    );
  }
  if (problems.length > 0) throw new UnsupportedSchemaError(`the JSON schema cannot be used: ${problems.join("; ")}`);
  return node!;
}

/** OpenAI's json_object mode: any JSON object. */
export function anyObject(): ObjectNode {
  return ANY_OBJECT;
}

function compile(
  s: unknown,
  at: string,
  unsupported: { keyword: string; at: string }[],
  problems: string[],
): SchemaNode | null {
  if (s === true) return ANY;
  if (s === false) {
    problems.push(`${at} is false: no value matches it`);
    return null;
  }
  if (typeof s !== "object" || s === null || Array.isArray(s)) {
    problems.push(`${at} must be an object (a schema) or a boolean, got ${s === null ? "null" : typeof s}`);
    return null;
  }
  const o = s as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (ANNOTATIONS.has(k) || HANDLED.has(k)) continue;
    // false/empty forms of a few keywords constrain nothing
    if (k === "uniqueItems" && o[k] === false) continue;
    unsupported.push({ keyword: k, at });
  }
  const sub = (v: unknown, where: string) => compile(v, where, unsupported, problems);

  if (o.const !== undefined) return literals([o.const], at, problems);
  if (o.enum !== undefined) {
    if (!Array.isArray(o.enum) || o.enum.length === 0) {
      problems.push(`${at}.enum must be a non-empty array`);
      return null;
    }
    return literals(o.enum, `${at}.enum`, problems);
  }
  for (const key of ["anyOf", "oneOf"] as const) {
    if (o[key] === undefined) continue;
    const list = o[key];
    if (!Array.isArray(list) || list.length === 0) {
      problems.push(`${at}.${key} must be a non-empty array of schemas`);
      return null;
    }
    const branches = list.map((b, i) => sub(b, `${at}.${key}[${i}]`));
    if (branches.some((b) => b === null)) return null;
    return union(branches as SchemaNode[], `${at}.${key}`, problems);
  }

  let types: TypeName[];
  if (o.type === undefined) {
    // No type: the keywords present say which kind is meant; none at all means any value.
    if (o.properties !== undefined || o.required !== undefined || o.additionalProperties !== undefined)
      types = ["object"];
    else if (o.items !== undefined || o.minItems !== undefined || o.maxItems !== undefined) types = ["array"];
    else if (o.minLength !== undefined || o.maxLength !== undefined) types = ["string"];
    else return ANY;
  } else {
    const list = Array.isArray(o.type) ? o.type : [o.type];
    if (list.length === 0 || !list.every((t) => typeof t === "string" && (TYPES as readonly string[]).includes(t))) {
      problems.push(`${at}.type must be one of ${TYPES.join(", ")} or an array of them, got ${JSON.stringify(o.type)}`);
      return null;
    }
    types = [...new Set(list as TypeName[])];
    if (types.includes("number")) types = types.filter((t) => t !== "integer");
  }
  const nodes: SchemaNode[] = [];
  for (const t of types) {
    const n = compileType(t, o, at, sub, problems);
    if (!n) return null;
    nodes.push(n);
  }
  return nodes.length === 1 ? nodes[0] : union(nodes, `${at}.type`, problems);
}

function compileType(
  t: TypeName,
  o: Record<string, unknown>,
  at: string,
  sub: (v: unknown, where: string) => SchemaNode | null,
  problems: string[],
): SchemaNode | null {
  switch (t) {
    case "object": {
      const propsIn = o.properties ?? {};
      if (typeof propsIn !== "object" || propsIn === null || Array.isArray(propsIn)) {
        problems.push(`${at}.properties must be an object`);
        return null;
      }
      const required = o.required ?? [];
      if (!Array.isArray(required) || !required.every((r) => typeof r === "string")) {
        problems.push(`${at}.required must be an array of property names`);
        return null;
      }
      const props: ObjectProperty[] = [];
      for (const [name, ps] of Object.entries(propsIn as Record<string, unknown>)) {
        const node = sub(ps, `${at}.properties.${name}`);
        if (!node) return null;
        props.push({ name, key: keyBytes(name), node, required: required.includes(name) });
      }
      for (const r of required) {
        if (!props.some((p) => p.name === r))
          problems.push(`${at}.required names "${r}", which has no schema in ${at}.properties`);
      }
      let additional: SchemaNode | null = ANY;
      if (o.additionalProperties === false) additional = null;
      else if (o.additionalProperties !== undefined && o.additionalProperties !== true)
        additional = sub(o.additionalProperties, `${at}.additionalProperties`);
      return objectNode(props, additional);
    }
    case "array": {
      const items = o.items === undefined ? ANY : sub(o.items, `${at}.items`);
      if (!items) return null;
      const minItems = count(o.minItems, `${at}.minItems`, 0, problems);
      const maxItems = count(o.maxItems, `${at}.maxItems`, Infinity, problems);
      if (minItems > maxItems) problems.push(`${at}: minItems ${minItems} is above maxItems ${maxItems}`);
      return arrayNode(items, minItems, maxItems);
    }
    case "string": {
      const minLength = count(o.minLength, `${at}.minLength`, 0, problems);
      const maxLength = count(o.maxLength, `${at}.maxLength`, Infinity, problems);
      if (minLength > maxLength) problems.push(`${at}: minLength ${minLength} is above maxLength ${maxLength}`);
      return stringNode(minLength, maxLength);
    }
    case "number":
    case "integer":
      return t === "integer" ? INTEGER : NUMBER;
    case "boolean":
      return BOOLEAN;
    case "null":
      return NULL;
  }
}

function count(v: unknown, at: string, absent: number, problems: string[]): number {
  if (v === undefined) return absent;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    problems.push(`${at} must be a non-negative integer, got ${JSON.stringify(v)}`);
    return absent;
  }
  return v;
}

const encoder = new TextEncoder();

/** The bytes between a key's quotes: the name JSON-escaped. */
function keyBytes(name: string): Uint8Array {
  return encoder.encode(JSON.stringify(name).slice(1, -1));
}

function flags(chars: string): FirstBytes {
  const f = new Uint8Array(256);
  for (const c of chars) f[c.charCodeAt(0)] = 1;
  return f;
}

function stringNode(minLength: number, maxLength: number): StringNode {
  return { kind: "string", minLength, maxLength, minLen: 2 + minLength, first: flags('"') };
}

function numberNode(integer: boolean): NumberNode {
  return { kind: "number", integer, minLen: 1, first: flags("-0123456789") };
}

function arrayNode(items: SchemaNode, minItems: number, maxItems: number): ArrayNode {
  return {
    kind: "array",
    items,
    minItems,
    maxItems,
    minLen: 2 + minItems * items.minLen + Math.max(0, minItems - 1),
    first: flags("["),
  };
}

function objectNode(props: ObjectProperty[], additional: SchemaNode | null): ObjectNode {
  const root: KeyTrie = { next: new Map(), prop: -1, below: [], depth: 0, midEscape: false };
  props.forEach((p, i) => {
    const inside = insideEscape(p.key);
    let t = root;
    t.below.push(i);
    p.key.forEach((b, j) => {
      let n = t.next.get(b);
      if (!n) {
        n = { next: new Map(), prop: -1, below: [], depth: t.depth + 1, midEscape: inside[j + 1] };
        t.next.set(b, n);
      }
      n.below.push(i);
      t = n;
    });
    t.prop = i;
  });
  let minLen = 2;
  const req = props.filter((p) => p.required);
  for (const p of req) minLen += p.key.length + 3 + p.node.minLen;
  minLen += Math.max(0, req.length - 1);
  return { kind: "object", props, keys: root, additional, minLen, first: flags("{") };
}

/** For each prefix length 0..n of JSON-escaped bytes: whether it ends inside an escape sequence. */
function insideEscape(key: Uint8Array): boolean[] {
  const inside = new Array<boolean>(key.length + 1).fill(false);
  for (let i = 0; i < key.length;) {
    const span = key[i] === 0x5c ? (key[i + 1] === 0x75 ? 6 : 2) : 1;
    for (let j = i + 1; j < i + span; j++) inside[j] = true;
    i += span;
  }
  return inside;
}

function literals(values: unknown[], at: string, problems: string[]): LiteralsNode | null {
  const trie: LiteralTrie = { next: new Map(), end: false, toEnd: Infinity };
  const first = new Uint8Array(256);
  for (const v of values) {
    const text = JSON.stringify(v);
    if (text === undefined || (typeof v === "number" && !Number.isFinite(v))) {
      problems.push(`${at} holds ${String(v)}, which is not a JSON value`);
      return null;
    }
    const bytes = encoder.encode(text);
    first[bytes[0]] = 1;
    let t = trie;
    for (const b of bytes) {
      let n = t.next.get(b);
      if (!n) {
        n = { next: new Map(), end: false, toEnd: Infinity };
        t.next.set(b, n);
      }
      t = n;
    }
    t.end = true;
  }
  const fill = (t: LiteralTrie): number => {
    let best = t.end ? 0 : Infinity;
    for (const n of t.next.values()) best = Math.min(best, 1 + fill(n));
    return (t.toEnd = best);
  };
  fill(trie);
  return { kind: "literals", trie, minLen: trie.toEnd, first };
}

function union(branches: SchemaNode[], at: string, problems: string[]): UnionNode | null {
  // Flatten nested unions so that each first byte maps to one leaf branch.
  const flat: SchemaNode[] = [];
  for (const b of branches) {
    if (b.kind === "union") flat.push(...b.branches);
    else flat.push(b);
  }
  const byFirst = new Int8Array(256).fill(-1);
  const first = new Uint8Array(256);
  for (let i = 0; i < flat.length; i++) {
    for (let c = 0; c < 256; c++) {
      if (!flat[i].first[c]) continue;
      if (byFirst[c] >= 0 && byFirst[c] !== i) {
        problems.push(
          `${at}: two alternatives can start with ${JSON.stringify(String.fromCharCode(c))} (e.g. two objects, or two strings); ` +
            `alternatives must be of different types`,
        );
        return null;
      }
      byFirst[c] = i;
      first[c] = 1;
    }
  }
  return { kind: "union", byFirst, branches: flat, minLen: Math.min(...flat.map((b) => b.minLen)), first };
}

const NUMBER = numberNode(false);
const INTEGER = numberNode(true);
const BOOLEAN = literals([true, false], "boolean", [])!;
const NULL = literals([null], "null", [])!;
const ANY_STRING = stringNode(0, Infinity);

/**
 * Any JSON value. Its object and array branches refer back to it, so the node graph is cyclic;
 * the automaton only ever follows one edge at a time.
 */
const ANY: UnionNode = {
  kind: "union",
  byFirst: new Int8Array(256).fill(-1),
  branches: [],
  minLen: 1,
  first: new Uint8Array(256),
};
const ANY_OBJECT = objectNode([], ANY);
const ANY_ARRAY = arrayNode(ANY, 0, Infinity);
{
  const built = union([ANY_OBJECT, ANY_ARRAY, ANY_STRING, NUMBER, BOOLEAN, NULL], "any", [])!;
  ANY.byFirst.set(built.byFirst);
  ANY.first.set(built.first);
  ANY.branches.push(...built.branches);
}
