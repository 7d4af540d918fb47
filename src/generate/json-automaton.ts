/**
 * An incremental JSON parser over bytes that knows a schema (json-schema.ts): `step(state, byte)`
 * says whether the byte can come next in some value the schema accepts, and the state after it;
 * `minBytes(state)` is the fewest bytes that can still complete the value. Constrained decoding
 * (json-constraint.ts) runs every candidate token's bytes through it to mask the vocabulary, and
 * uses minBytes to close the value in time when the token budget runs low.
 *
 * The JSON it accepts is compact: no whitespace but one optional space after a `:` or a `,`
 * (a model that never saw JSON could otherwise pad forever). Numbers are finite by construction
 * (NUMBER_LIMITS), strings are well-formed UTF-8 without lone surrogate escapes.
 *
 * States are immutable: a stack of frames linked to their parent, each step making at most a few
 * new frames and sharing the rest, so that the mask can branch from one state to every token
 * without copying. `null` is the finished state (a whole value, nothing may follow); `undefined`
 * from step means the byte is not allowed.
 */
import {
  NUMBER_LIMITS,
  type ArrayNode,
  type KeyTrie,
  type LiteralTrie,
  type ObjectNode,
  type SchemaNode,
  type StringNode,
} from "./json-schema.js";

export type Frame = ValueFrame | ObjectFrame | KeyFrame | ArrayFrame | StringFrame | NumberFrame | LiteralFrame;

/** A value of `node` is expected next. */
interface ValueFrame {
  readonly t: "value";
  readonly node: SchemaNode;
  readonly up: Frame | null;
}

const enum Obj {
  /** after `{` */
  Open,
  /** a key is being read (a KeyFrame above) */
  Key,
  /** after the key's closing quote */
  Colon,
  /** after `:` */
  AfterColon,
  /** after a member's value (or while it is read, a frame above) */
  AfterValue,
  /** after `,` */
  AfterComma,
}

interface ObjectFrame {
  readonly t: "object";
  readonly node: ObjectNode;
  readonly phase: Obj;
  /** properties already present, one bit per index of node.props */
  readonly seen: bigint;
  /** the member being read: a property index, or -1 for an additional key */
  readonly prop: number;
  /** the optional space after `:` or `,` has been used */
  readonly spaced: boolean;
  readonly up: Frame | null;
}

/** An object key being read; `up` is its object in phase Key. */
interface KeyFrame {
  readonly t: "key";
  readonly up: ObjectFrame;
  /** where the key's bytes are in the trie of property keys; null once it left every property's key */
  readonly trie: KeyTrie | null;
  readonly utf8: Utf8;
}

const enum Arr {
  Open,
  AfterValue,
  AfterComma,
}

interface ArrayFrame {
  readonly t: "array";
  readonly node: ArrayNode;
  readonly phase: Arr;
  readonly count: number;
  readonly spaced: boolean;
  readonly up: Frame | null;
}

interface StringFrame {
  readonly t: "string";
  readonly node: StringNode;
  /** characters so far (counted only when the node bounds them) */
  readonly len: number;
  /** escape bytes still expected: 0 none, -1 the letter after a backslash, 1..4 hex digits of \u */
  readonly esc: number;
  readonly utf8: Utf8;
  readonly up: Frame | null;
}

const enum Num {
  /** after `-` */
  Sign,
  /** a leading 0 */
  Zero,
  Int,
  /** after `.` */
  Dot,
  Frac,
  /** after `e` or `E` */
  Exp,
  /** after the exponent's sign */
  ExpSign,
  ExpDigits,
}

interface NumberFrame {
  readonly t: "number";
  readonly integer: boolean;
  readonly phase: Num;
  /** digits in the current part */
  readonly digits: number;
  readonly up: Frame | null;
}

interface LiteralFrame {
  readonly t: "literal";
  readonly trie: LiteralTrie;
  readonly up: Frame | null;
}

/** A UTF-8 character in progress: continuation bytes still expected, and the next one's range. */
interface Utf8 {
  readonly rest: number;
  readonly lo: number;
  readonly hi: number;
}

const NO_UTF8: Utf8 = Object.freeze({ rest: 0, lo: 0x80, hi: 0xbf });
const CONT: Utf8[] = [NO_UTF8, { rest: 1, lo: 0x80, hi: 0xbf }, { rest: 2, lo: 0x80, hi: 0xbf }];

/** The UTF-8 state after byte b, or undefined when b cannot come here (well-formed UTF-8 only). */
function utf8Step(u: Utf8, b: number): Utf8 | undefined {
  if (u.rest > 0) return b >= u.lo && b <= u.hi ? CONT[u.rest - 1] : undefined;
  if (b < 0x80) return u;
  if (b >= 0xc2 && b <= 0xdf) return CONT[1];
  // the second byte's range rules out overlong forms and UTF-16 surrogates
  if (b === 0xe0) return { rest: 2, lo: 0xa0, hi: 0xbf };
  if (b === 0xed) return { rest: 2, lo: 0x80, hi: 0x9f };
  if (b >= 0xe1 && b <= 0xef) return CONT[2];
  if (b === 0xf0) return { rest: 3, lo: 0x90, hi: 0xbf };
  if (b >= 0xf1 && b <= 0xf3) return { rest: 3, lo: 0x80, hi: 0xbf };
  if (b === 0xf4) return { rest: 3, lo: 0x80, hi: 0x8f };
  return undefined;
}

const QUOTE = 0x22,
  BACKSLASH = 0x5c,
  SPACE = 0x20,
  COMMA = 0x2c,
  COLON = 0x3a;

/** The state before the first byte of a value of `root`. */
export function initialState(root: SchemaNode): Frame {
  return { t: "value", node: root, up: null };
}

/** The state after byte b, null when the value is complete, undefined when b is not allowed. */
export function step(f: Frame | null, b: number): Frame | null | undefined {
  if (f === null) return undefined;
  switch (f.t) {
    case "value":
      return startValue(f.node, b, f.up);
    case "object":
      return objectStep(f, b);
    case "key":
      return keyStep(f, b);
    case "array":
      return arrayStep(f, b);
    case "string":
      return stringStep(f, b);
    case "number":
      return numberStep(f, b);
    case "literal":
      return literalStep(f, b);
  }
}

/** Whether the output may end here: the value is complete, or a number or literal at the top level could end. */
export function canEnd(f: Frame | null): boolean {
  if (f === null) return true;
  if (f.up !== null) return false;
  if (f.t === "number") return numberEnds(f);
  if (f.t === "literal") return f.trie.end;
  return false;
}

function startValue(node: SchemaNode, b: number, up: Frame | null): Frame | null | undefined {
  if (node.kind === "union") {
    const i = node.byFirst[b];
    if (i < 0) return undefined;
    node = node.branches[i];
  }
  if (!node.first[b]) return undefined;
  switch (node.kind) {
    case "object":
      return { t: "object", node, phase: Obj.Open, seen: 0n, prop: -1, spaced: false, up };
    case "array":
      return { t: "array", node, phase: Arr.Open, count: 0, spaced: false, up };
    case "string":
      return { t: "string", node, len: 0, esc: 0, utf8: NO_UTF8, up };
    case "number":
      if (b === 0x2d) return { t: "number", integer: node.integer, phase: Num.Sign, digits: 0, up };
      return { t: "number", integer: node.integer, phase: b === 0x30 ? Num.Zero : Num.Int, digits: 1, up };
    case "literals":
      return literalNext(node.trie, b, up);
    case "union":
      return undefined;
  }
}

// ---- objects ----

function isSeen(seen: bigint, i: number): boolean {
  return ((seen >> BigInt(i)) & 1n) === 1n;
}

function allRequiredSeen(node: ObjectNode, seen: bigint): boolean {
  for (let i = 0; i < node.props.length; i++) if (node.props[i].required && !isSeen(seen, i)) return false;
  return true;
}

/** Whether another member can follow: an unseen property, or additional keys. */
function keyPossible(node: ObjectNode, seen: bigint): boolean {
  if (node.additional) return true;
  for (let i = 0; i < node.props.length; i++) if (!isSeen(seen, i)) return true;
  return false;
}

function objectStep(f: ObjectFrame, b: number): Frame | null | undefined {
  switch (f.phase) {
    case Obj.Open:
    case Obj.AfterComma:
      if (f.phase === Obj.AfterComma && b === SPACE && !f.spaced) return { ...f, spaced: true };
      if (b === QUOTE && keyPossible(f.node, f.seen))
        return { t: "key", up: { ...f, phase: Obj.Key, spaced: false }, trie: f.node.keys, utf8: NO_UTF8 };
      if (f.phase === Obj.Open && b === 0x7d && allRequiredSeen(f.node, f.seen)) return f.up;
      return undefined;
    case Obj.Colon:
      return b === COLON ? { ...f, phase: Obj.AfterColon, spaced: false } : undefined;
    case Obj.AfterColon: {
      if (b === SPACE && !f.spaced) return { ...f, spaced: true };
      const node = f.prop >= 0 ? f.node.props[f.prop].node : f.node.additional!;
      return startValue(node, b, { ...f, phase: Obj.AfterValue, spaced: false });
    }
    case Obj.AfterValue:
      if (b === COMMA && keyPossible(f.node, f.seen)) return { ...f, phase: Obj.AfterComma, spaced: false };
      if (b === 0x7d && allRequiredSeen(f.node, f.seen)) return f.up;
      return undefined;
    case Obj.Key:
      return undefined;
  }
}

/** Whether some property under trie node t is not yet present. */
function unseenBelow(t: KeyTrie, seen: bigint): boolean {
  for (const i of t.below) if (!isSeen(seen, i)) return true;
  return false;
}

function keyStep(f: KeyFrame, b: number): Frame | null | undefined {
  const obj = f.up;
  const { node, seen } = obj;
  if (b === QUOTE && f.utf8.rest === 0 && !f.trie?.midEscape) {
    // The key is complete: a property's (once only), else an additional key.
    const p = f.trie ? f.trie.prop : -1;
    if (p >= 0) {
      if (isSeen(seen, p)) return undefined;
      return { ...obj, phase: Obj.Colon, prop: p, seen: seen | (1n << BigInt(p)) };
    }
    return node.additional ? { ...obj, phase: Obj.Colon, prop: -1 } : undefined;
  }
  if (b < SPACE) return undefined;
  const utf8 = utf8Step(f.utf8, b);
  if (!utf8) return undefined;
  const child = f.trie?.next.get(b);
  if (child && (node.additional ? !child.midEscape || unseenBelow(child, seen) : unseenBelow(child, seen)))
    return { t: "key", up: obj, trie: child, utf8 };
  // Leaving every property's key: an additional key, of plain characters (no escapes).
  if (!node.additional || f.trie?.midEscape || b === BACKSLASH || b === QUOTE) return undefined;
  return { t: "key", up: obj, trie: null, utf8 };
}

// ---- arrays ----

function arrayStep(f: ArrayFrame, b: number): Frame | null | undefined {
  const node = f.node;
  switch (f.phase) {
    case Arr.Open:
      if (b === 0x5d) return node.minItems === 0 ? f.up : undefined;
      if (node.maxItems === 0) return undefined;
      return startValue(node.items, b, { ...f, phase: Arr.AfterValue, count: 1 });
    case Arr.AfterValue:
      if (b === COMMA && f.count < node.maxItems) return { ...f, phase: Arr.AfterComma, spaced: false };
      if (b === 0x5d && f.count >= node.minItems) return f.up;
      return undefined;
    case Arr.AfterComma: {
      if (b === SPACE && !f.spaced) return { ...f, spaced: true };
      // the count matters only against bounds; unbounded arrays keep it at 1 so their states repeat
      const count = node.minItems > 0 || node.maxItems < Infinity ? f.count + 1 : 1;
      return startValue(node.items, b, { ...f, phase: Arr.AfterValue, count, spaced: false });
    }
  }
}

// ---- strings ----

const ESCAPE_LETTERS = new Set([0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74]); // " \ / b f n r t

function isHex(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66) || (b >= 0x41 && b <= 0x46);
}

function stringStep(f: StringFrame, b: number): Frame | null | undefined {
  const node = f.node;
  if (f.esc === -1) {
    if (ESCAPE_LETTERS.has(b)) return { ...f, esc: 0 };
    return b === 0x75 ? { ...f, esc: 4 } : undefined;
  }
  if (f.esc > 0) {
    // \uD800-\uDFFF (surrogates) are left out: a lone one is not a character
    if (!isHex(b) || (f.esc === 4 && (b === 0x64 || b === 0x44))) return undefined;
    return { ...f, esc: f.esc - 1 };
  }
  if (f.utf8.rest > 0) {
    const utf8 = utf8Step(f.utf8, b);
    return utf8 ? { ...f, utf8 } : undefined;
  }
  if (b === QUOTE) return f.len >= node.minLength ? f.up : undefined;
  if (b < SPACE) return undefined;
  const utf8 = utf8Step(NO_UTF8, b);
  if (!utf8 || f.len >= node.maxLength) return undefined;
  const bounded = node.minLength > 0 || node.maxLength < Infinity;
  return { ...f, len: bounded ? f.len + 1 : 0, esc: b === BACKSLASH ? -1 : 0, utf8 };
}

// ---- numbers ----

function isDigit(b: number): boolean {
  return b >= 0x30 && b <= 0x39;
}

function numberEnds(f: NumberFrame): boolean {
  return f.phase === Num.Zero || f.phase === Num.Int || f.phase === Num.Frac || f.phase === Num.ExpDigits;
}

function numberStep(f: NumberFrame, b: number): Frame | null | undefined {
  const L = NUMBER_LIMITS;
  const next = (phase: Num, digits: number): NumberFrame => ({ ...f, phase, digits });
  const fraction = !f.integer && b === 0x2e;
  const exponent = !f.integer && (b === 0x65 || b === 0x45);
  switch (f.phase) {
    case Num.Sign:
      if (b === 0x30) return next(Num.Zero, 1);
      return isDigit(b) ? next(Num.Int, 1) : undefined;
    case Num.Zero:
      if (fraction) return next(Num.Dot, 0);
      if (exponent) return next(Num.Exp, 0);
      break;
    case Num.Int:
      if (isDigit(b) && f.digits < L.intDigits) return next(Num.Int, f.digits + 1);
      if (fraction) return next(Num.Dot, 0);
      if (exponent) return next(Num.Exp, 0);
      break;
    case Num.Dot:
      return isDigit(b) ? next(Num.Frac, 1) : undefined;
    case Num.Frac:
      if (isDigit(b) && f.digits < L.fracDigits) return next(Num.Frac, f.digits + 1);
      if (exponent) return next(Num.Exp, 0);
      break;
    case Num.Exp:
      if (b === 0x2b || b === 0x2d) return next(Num.ExpSign, 0);
      return isDigit(b) ? next(Num.ExpDigits, 1) : undefined;
    case Num.ExpSign:
      return isDigit(b) ? next(Num.ExpDigits, 1) : undefined;
    case Num.ExpDigits:
      if (isDigit(b) && f.digits < L.expDigits) return next(Num.ExpDigits, f.digits + 1);
      break;
  }
  // A byte that cannot continue the number ends it, and belongs to what encloses it.
  if (!numberEnds(f) || isDigit(b) || f.up === null) return undefined;
  return step(f.up, b);
}

// ---- literals (enum, const, true, false, null) ----

function literalNext(t: LiteralTrie, b: number, up: Frame | null): Frame | null | undefined {
  const child = t.next.get(b);
  if (!child) return undefined;
  // A literal nothing can extend is complete at once.
  if (child.end && child.next.size === 0) return up;
  return { t: "literal", trie: child, up };
}

function literalStep(f: LiteralFrame, b: number): Frame | null | undefined {
  const n = literalNext(f.trie, b, f.up);
  if (n !== undefined) return n;
  // a literal that could go on (1 among 1 and 12) ends at the first byte that does not extend it
  if (!f.trie.end || f.up === null) return undefined;
  return step(f.up, b);
}

// ---- the fewest bytes to completion ----

/** The fewest bytes that complete the value from state f (0 when complete). */
export function minBytes(f: Frame | null): number {
  let total = 0;
  for (let g = f; g !== null; g = g.up) total += rest(g);
  return total;
}

/** The fewest bytes that finish frame f, given that what it waits for above it is done. */
function rest(f: Frame): number {
  switch (f.t) {
    case "value":
      return f.node.minLen;
    case "object":
      switch (f.phase) {
        case Obj.Open:
          return membersRest(f.node, f.seen, false);
        case Obj.Key:
          return 0;
        case Obj.Colon:
          return 1 + memberValue(f).minLen + membersRest(f.node, f.seen, true);
        case Obj.AfterColon:
          return memberValue(f).minLen + membersRest(f.node, f.seen, true);
        case Obj.AfterValue:
          return membersRest(f.node, f.seen, true);
        case Obj.AfterComma:
          return afterCommaRest(f.node, f.seen);
      }
      return 0;
    case "key":
      return keyRest(f);
    case "array": {
      const { node, count } = f;
      const item = node.items.minLen;
      if (f.phase === Arr.Open) return node.minItems === 0 ? 1 : node.minItems * (item + 1);
      if (f.phase === Arr.AfterValue) return Math.max(0, node.minItems - count) * (item + 1) + 1;
      return item + Math.max(0, node.minItems - count - 1) * (item + 1) + 1;
    }
    case "string": {
      const esc = f.esc === -1 ? 1 : f.esc;
      return f.utf8.rest + esc + Math.max(0, f.node.minLength - f.len) + 1;
    }
    case "number":
      return numberEnds(f) ? 0 : 1;
    case "literal":
      return f.trie.toEnd;
  }
}

function memberValue(f: ObjectFrame): SchemaNode {
  return f.prop >= 0 ? f.node.props[f.prop].node : f.node.additional!;
}

/** `"key":value` of property i, in bytes, at its shortest. */
function memberBytes(node: ObjectNode, i: number): number {
  const p = node.props[i];
  return p.key.length + 3 + p.node.minLen;
}

/**
 * The required members still missing, then `}`. `afterMember`: one is already written, so each
 * missing one takes a comma; else the first takes none.
 */
function membersRest(node: ObjectNode, seen: bigint, afterMember: boolean): number {
  let sum = 0,
    n = 0;
  for (let i = 0; i < node.props.length; i++) {
    if (!node.props[i].required || isSeen(seen, i)) continue;
    sum += memberBytes(node, i);
    n++;
  }
  if (n === 0) return 1;
  return sum + (afterMember ? n : n - 1) + 1;
}

/** After a comma a member must follow: the missing required ones, else the cheapest allowed one. */
function afterCommaRest(node: ObjectNode, seen: bigint): number {
  const required = membersRest(node, seen, false);
  if (required > 1) return required;
  let best = Infinity;
  for (let i = 0; i < node.props.length; i++) if (!isSeen(seen, i)) best = Math.min(best, memberBytes(node, i));
  if (node.additional) best = Math.min(best, 3 + node.additional.minLen + (node.keys.prop >= 0 ? 1 : 0));
  return best + 1;
}

function keyRest(f: KeyFrame): number {
  const obj = f.up;
  const { node, seen } = obj;
  let best = Infinity;
  const t = f.trie;
  if (t) {
    // finish the key of a property not yet present
    for (const i of t.below) {
      if (isSeen(seen, i)) continue;
      const p = node.props[i];
      best = Math.min(
        best,
        p.key.length - t.depth + 2 + p.node.minLen + membersRest(node, seen | (1n << BigInt(i)), true),
      );
    }
  }
  if (node.additional && !t?.midEscape) {
    // close it as an additional key (one more character first when it spells a present property's name)
    const clash = t !== null && f.utf8.rest === 0 && t.prop >= 0 && isSeen(seen, t.prop) ? 1 : 0;
    best = Math.min(best, f.utf8.rest + clash + 2 + node.additional.minLen + membersRest(node, seen, true));
  }
  return best;
}

// ---- identity of a state, for memoizing masks ----

const ids = new WeakMap<object, number>();
let nextId = 1;
function idOf(o: object): number {
  let id = ids.get(o);
  if (id === undefined) ids.set(o, (id = nextId++));
  return id;
}

/** A string equal for equal states (same frames, same nodes), for caching per-state work. */
export function stateKey(f: Frame | null): string {
  const parts: (string | number)[] = [];
  for (let g = f; g !== null; g = g.up) {
    switch (g.t) {
      case "value":
        parts.push("v", idOf(g.node));
        break;
      case "object":
        parts.push("o", idOf(g.node), g.phase, g.seen.toString(36), g.prop, g.spaced ? 1 : 0);
        break;
      case "key":
        parts.push("k", g.trie ? idOf(g.trie) : 0, g.utf8.rest, g.utf8.lo, g.utf8.hi);
        break;
      case "array":
        parts.push("a", idOf(g.node), g.phase, g.count, g.spaced ? 1 : 0);
        break;
      case "string":
        parts.push("s", idOf(g.node), g.len, g.esc, g.utf8.rest, g.utf8.lo, g.utf8.hi);
        break;
      case "number":
        parts.push("n", g.integer ? 1 : 0, g.phase, g.digits);
        break;
      case "literal":
        parts.push("l", idOf(g.trie));
        break;
    }
  }
  return parts.join(",");
}
