/**
 * Where @huggingface/jinja (0.5.x) and Python's Jinja, which transformers renders chat templates
 * with, print different text for the same template, this makes one interpreter print Python's:
 *
 * - `{{ value }}` of none, a boolean, a list or a dict prints as Python's str() does ("None",
 *   "True", "['a', 1]", "{'k': 'v'}"); @huggingface/jinja prints "", "true" and JSON. Templates
 *   print such values when a kwarg or a tool schema reaches `{{ }}` as it is.
 * - the `string` filter on a list or dict gives that same Python text (SmolLM3 writes its tools
 *   with `tool | string`); @huggingface/jinja has no such filter for dicts.
 * - `select` / `reject` with a test ("builtin_tools | reject('equalto', 'code_interpreter')" in
 *   Llama 3.1's template) and the `list` filter on a string, which it lacks.
 * - `s.strip(chars)`, `lstrip(chars)`, `rstrip(chars)` and `| trim(chars)` strip those characters
 *   (Qwen3's template cuts its reasoning with `.lstrip('\n')`); @huggingface/jinja ignores the
 *   argument and strips all whitespace, spaces included. Without one, Python's whitespace.
 * - text printed in a loop iteration before its `{% break %}` or `{% continue %}` stays in the
 *   output, as in Python; @huggingface/jinja drops that iteration's output.
 *
 * The library exports no hook for filters or output, so these are its interpreter's own methods
 * (applyFilter, evaluateBlock, evaluate) replaced on one instance: nothing global changes. If a
 * later release renames them, the replacements simply stop applying, and
 * test/chat-templates.test.ts, which holds renderings to transformers' output, fails.
 */
import { Interpreter } from "@huggingface/jinja";

/** The library's runtime values, as far as this file reads them (the classes are not exported). */
interface Value {
  type: string;
  value: unknown;
  toString(): string;
  __bool__(): { value: boolean };
}
interface Node {
  type: string;
  value?: unknown;
  callee?: Node;
  args?: Node[];
}
type Env = { tests: ReadonlyMap<string, (...v: Value[]) => boolean> };
interface Internals {
  evaluate(node: Node | undefined, env: Env): Value;
  applyFilter(operand: Value, filter: Node, env: Env): Value;
  evaluateBlock(statements: Node[], env: Env): Value;
}
interface ForNode extends Node {
  body: Node[];
}

/**
 * Node types that are statements: what they evaluate to is their output already (an if's or a
 * for's rendered body) or nothing (set, macro), never a value for `{{ }}` to print.
 */
const STATEMENTS = new Set([
  "Program",
  "If",
  "For",
  "Break",
  "Continue",
  "Set",
  "Macro",
  "Comment",
  "FilterStatement",
  "CallStatement",
]);

/** Python's repr() of a string: single quotes unless the text has one and no double quote. */
function pyStrRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += "\\" + quote;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (cp < 0x20 || cp === 0x7f) out += "\\x" + cp.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + quote;
}

/** Python's repr() of a float: always a decimal point or an exponent. */
function pyFloat(n: number): string {
  if (Number.isNaN(n)) return "nan";
  if (!Number.isFinite(n)) return n > 0 ? "inf" : "-inf";
  if (Number.isInteger(n) && Math.abs(n) < 1e16) return n.toFixed(1);
  const s = String(n);
  // JS writes 1e+21 and 1e-7 where Python writes 1e+21 and 1e-07.
  return s.replace(/e([+-])(\d)$/, "e$10$2");
}

/** Python's repr() of a runtime value (inside a list or dict). */
function pyRepr(v: Value): string {
  switch (v.type) {
    case "StringValue":
      return pyStrRepr(v.value as string);
    default:
      return pyStr(v);
  }
}

/** Python's str() of a runtime value: what `{{ v }}` prints. */
export function pyStr(v: Value): string {
  switch (v.type) {
    case "NullValue":
      return "None";
    case "UndefinedValue":
      return "";
    case "BooleanValue":
      return v.value ? "True" : "False";
    case "FloatValue":
      return pyFloat(v.value as number);
    case "ArrayValue":
      return "[" + (v.value as Value[]).map(pyRepr).join(", ") + "]";
    case "TupleValue": {
      const items = (v.value as Value[]).map(pyRepr);
      return "(" + items.join(", ") + (items.length === 1 ? ",)" : ")");
    }
    case "ObjectValue":
    case "NamespaceValue": {
      const entries = [...(v.value as Map<string, Value>)].map(([k, x]) => `${pyStrRepr(k)}: ${pyRepr(x)}`);
      return "{" + entries.join(", ") + "}";
    }
    default:
      return v.toString();
  }
}

/** What Python's str.isspace() calls whitespace (JavaScript's \s differs at U+FEFF, U+001C-001F, U+0085). */
const PY_SPACE = new Set(
  "\t\n\v\f\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000",
);

/** Python's str.strip / lstrip / rstrip: `chars` (a set of characters) or whitespace when none. */
function pyStrip(s: string, which: "strip" | "lstrip" | "rstrip", chars: string | null): string {
  const set = chars === null ? PY_SPACE : new Set(chars);
  const cs = Array.from(s);
  let a = 0;
  let b = cs.length;
  if (which !== "rstrip") while (a < b && set.has(cs[a])) a++;
  if (which !== "lstrip") while (b > a && set.has(cs[b - 1])) b--;
  return cs.slice(a, b).join("");
}

const STRIPS = new Set(["strip", "lstrip", "rstrip"]);

function filterName(node: Node): string | null {
  if (node.type === "Identifier") return node.value as string;
  if (node.type === "CallExpression" && node.callee?.type === "Identifier") return node.callee.value as string;
  return null;
}

/** A new value of `like`'s class (the library's classes are not exported, their instances are). */
function make(like: Value, value: unknown): Value {
  return new (like.constructor as new (v: unknown) => Value)(value);
}

/** `interpreter`, changed to print and filter as Python's Jinja does where the two differ (see above). */
export function pythonCompatible(interpreter: Interpreter): Interpreter {
  const self = interpreter as unknown as Internals;
  const baseFilter = self.applyFilter.bind(interpreter);
  // The library's string and list values, made the way it makes them for literals.
  const text = (s: string, env: Env) => self.evaluate({ type: "StringLiteral", value: s }, env);
  const list = (items: string[], env: Env) =>
    self.evaluate({ type: "ArrayLiteral", value: items.map((s) => ({ type: "StringLiteral", value: s })) }, env);

  self.applyFilter = (operand, node, env) => {
    const name = filterName(node);
    const args = node.type === "CallExpression" ? (node.args ?? []) : [];
    if ((name === "select" || name === "reject") && operand.type === "ArrayValue") {
      const [test, ...testArgs] = args.map((a) => self.evaluate(a, env));
      let pass: (x: Value) => boolean;
      if (test === undefined) pass = (x) => x.__bool__().value;
      else {
        const fn = env.tests.get(String(test.value));
        if (!fn) throw new Error(`no test named '${String(test.value)}'`);
        pass = (x) => fn(x, ...testArgs);
      }
      const keep = name === "select";
      return make(
        operand,
        (operand.value as Value[]).filter((x) => pass(x) === keep),
      );
    }
    if (name === "string" && args.length === 0 && operand.type !== "StringValue") return text(pyStr(operand), env);
    if (name === "trim" && operand.type === "StringValue" && args.length <= 1) {
      const chars = args.length ? self.evaluate(args[0], env) : null;
      if (chars === null || chars.type === "StringValue" || chars.type === "NullValue")
        return text(
          pyStrip(operand.value as string, "strip", chars?.type === "StringValue" ? (chars.value as string) : null),
          env,
        );
    }
    if (name === "list" && args.length === 0 && operand.type === "StringValue")
      return list(Array.from(operand.value as string), env);
    return baseFilter(operand, node, env);
  };

  // Loop control: the library's for-loop drops the output of an iteration that a break or a
  // continue ends; Python's keeps it. Otherwise the two agree, down to a quirk: a loop's `else`
  // runs when no iteration reached the end of the body. So the control errors are left to the
  // library's loop, which decides what runs, and only the text is mended: errors thrown by
  // {% break %} / {% continue %} (recognised by the node that threw them) collect the output made
  // before them on their way up to the loop body, which records it as that iteration's output;
  // when the loop is done, its text is rebuilt from every iteration's output in order, followed by
  // what the library added after the iterations (the else block).
  const control = new WeakMap<object, { partial: string }>();
  interface Frame {
    body: Node[];
    /** each iteration's output, in order, whether it ran to the end or not */
    outputs: string[];
    /** the length of what the library's loop kept: the outputs of iterations that ran to the end */
    kept: number;
  }
  const loops: Frame[] = [];
  const baseEvaluate = self.evaluate.bind(interpreter);

  self.evaluate = (node, env) => {
    // The library evaluates absent parts (a slice's missing bound) as undefined nodes.
    if (!node) return baseEvaluate(node, env);
    if (node.type === "Break" || node.type === "Continue") {
      try {
        return baseEvaluate(node, env);
      } catch (e) {
        if (typeof e === "object" && e !== null) control.set(e, { partial: "" });
        throw e;
      }
    }
    if (node.type === "For") {
      const frame: Frame = { body: (node as ForNode).body, outputs: [], kept: 0 };
      loops.push(frame);
      let result: Value;
      try {
        result = baseEvaluate(node, env);
      } finally {
        loops.pop();
      }
      const after = (result.value as string).slice(frame.kept);
      return text(frame.outputs.join("") + after, env);
    }
    if (node.type === "CallExpression" && node.callee?.type === "MemberExpression") {
      const callee = node.callee as Node & { object: Node; property: Node; computed: boolean };
      const method = callee.property.type === "Identifier" ? (callee.property.value as string) : "";
      const args = node.args ?? [];
      if (!callee.computed && STRIPS.has(method) && args.length <= 1 && args[0]?.type !== "KeywordArgumentExpression") {
        const object = self.evaluate(callee.object, env);
        if (object.type === "StringValue") {
          const chars = args.length ? self.evaluate(args[0], env) : null;
          if (chars === null || chars.type === "NullValue" || chars.type === "StringValue") {
            const set = chars?.type === "StringValue" ? (chars.value as string) : null;
            return text(pyStrip(object.value as string, method as "strip", set), env);
          }
        }
      }
    }
    return baseEvaluate(node, env);
  };

  self.evaluateBlock = (statements, env) => {
    const loop = loops.length > 0 && loops[loops.length - 1].body === statements ? loops[loops.length - 1] : null;
    let out = "";
    for (const st of statements) {
      let v: Value;
      try {
        v = self.evaluate(st, env);
      } catch (e) {
        const c = typeof e === "object" && e !== null ? control.get(e) : undefined;
        if (c) {
          c.partial = out + c.partial;
          if (loop) loop.outputs.push(c.partial);
        }
        throw e;
      }
      if (STATEMENTS.has(st.type)) {
        if (v.type !== "NullValue" && v.type !== "UndefinedValue") out += v.toString();
      } else out += pyStr(v);
    }
    if (loop) {
      loop.outputs.push(out);
      loop.kept += out.length;
    }
    return text(out, env);
  };
  return interpreter;
}
