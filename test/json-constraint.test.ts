/**
 * Constrained JSON decoding without a model's judgement: the automaton accepts exactly the
 * compact JSON a schema allows (checked against JSON.parse and ajv), its fewest-bytes-to-complete
 * is exact (following it closes a value in that many bytes), and random walks over a real
 * vocabulary (stories260K's) that take any allowed token always end, within the token budget,
 * in text that parses and validates. Then the library's generate({ responseFormat }).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Ajv } from "ajv";
import { compileSchema, UnsupportedSchemaError, type SchemaNode } from "../src/generate/json-schema.js";
import { initialState, minBytes, step, canEnd, type Frame } from "../src/generate/json-automaton.js";
import { JsonConstraint } from "../src/generate/json-constraint.js";
import { GGUFFile, Tokenizer, loadModel } from "../src/index.js";
import { rng, SHARED } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const enc = new TextEncoder();

/** Runs text through the automaton: the final state, or undefined where a byte is refused. */
function run(grammar: SchemaNode, text: string): Frame | null | undefined {
  let s: Frame | null | undefined = initialState(grammar);
  for (const b of enc.encode(text)) {
    s = step(s!, b);
    if (s === undefined) return undefined;
  }
  return s;
}

/** Whether text is a complete value the grammar accepts. */
function accepts(grammar: SchemaNode, text: string): boolean {
  const s = run(grammar, text);
  return s !== undefined && canEnd(s);
}

const PERSON = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 5 },
    age: { type: "integer" },
    tags: { type: "array", items: { enum: ["a", "b", 1, null] }, maxItems: 2 },
    ok: { type: "boolean" },
    note: { type: ["string", "null"] },
  },
  required: ["name", "age"],
  additionalProperties: false,
};

test("the automaton accepts the compact JSON a schema allows, and refuses the rest", () => {
  const g = compileSchema(PERSON);
  for (const ok of [
    '{"name":"Ann","age":3}',
    '{"age":-12, "name":"Bo"}',
    '{"name":"é😀","age":0,"tags":["a",1],"ok":true,"note":null}',
    '{"name":"\\"x\\u00e9","age":7,"tags":[],"note":"n\\n"}',
    '{"name":"x","age":1,"tags":[null, "b"]}',
  ]) {
    assert.ok(accepts(g, ok), ok);
    assert.doesNotThrow(() => JSON.parse(ok));
  }
  for (const bad of [
    '{"age":3}', // name required
    '{"name":"","age":3}', // minLength
    '{"name":"abcdef","age":3}', // maxLength
    '{"name":"a","age":3.5}', // integer
    '{"name":"a","age":03}', // leading zero
    '{"name":"a","age":1,"extra":1}', // additionalProperties false
    '{"name":"a","name":"b","age":1}', // a property twice
    '{"name":"a","age":1,"tags":["c"]}', // enum
    '{"name":"a","age":1,"tags":["a","b","a"]}', // maxItems
    '{"name":"a\nb","age":1}', // raw control character
    '{"name":"\\ud800","age":1}', // lone surrogate escape
    '{ "name":"a","age":1}', // whitespace other than one space after : or ,
    '{"name":"a",  "age":1}', // two spaces
    '{"name":"a","age":1}x', // anything after the value
    '{"name":"a","age":1,}', // trailing comma
  ])
    assert.ok(!accepts(g, bad), bad);
  // invalid UTF-8 inside a string: a lone continuation byte, an overlong form
  for (const bytes of [[0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80]]) {
    let s: Frame | null | undefined = run(g, '{"name":"');
    for (const b of bytes) s = s === undefined ? undefined : step(s!, b);
    assert.equal(s, undefined, JSON.stringify(bytes));
  }
  // a top-level number or literal that could go on may end anywhere it is complete
  const num = compileSchema({ type: "number" });
  for (const t of ["0", "-1.5e3", "12"]) assert.ok(accepts(num, t), t);
  for (const t of ["-", "1.", "1e", "01"]) assert.ok(!accepts(num, t), t);
  const e = compileSchema({ enum: [1, 12, "x"] });
  assert.ok(accepts(e, "1") && accepts(e, "12") && accepts(e, '"x"') && !accepts(e, "2"));
});

test("json_object and empty schemas take any value; anyOf of different types; unsupported keywords named", () => {
  const any = compileSchema({});
  for (const t of ['{"a":[1,{"b":null}],"c":"d"}', "[]", '"s"', "-0.5", "true", "null"]) assert.ok(accepts(any, t), t);
  const opt = compileSchema({
    anyOf: [{ type: "string" }, { type: "null" }, { type: "array", items: { type: "integer" } }],
  });
  assert.ok(accepts(opt, '"a"') && accepts(opt, "null") && accepts(opt, "[1,2]") && !accepts(opt, "1"));
  assert.throws(
    () => compileSchema({ anyOf: [{ type: "object" }, { type: "object", properties: { a: {} } }] }),
    (e: unknown) => e instanceof UnsupportedSchemaError && /alternatives must be of different types/.test(e.message),
  );
  assert.throws(
    () =>
      compileSchema({
        type: "object",
        properties: { a: { type: "number", minimum: 0, multipleOf: 2 }, b: { type: "string", format: "date" } },
        patternProperties: {},
      }),
    (e: unknown) =>
      e instanceof UnsupportedSchemaError &&
      e.status === 400 &&
      e.param === "response_format" &&
      e.keywords.map((k) => `${k.keyword}@${k.at}`).join(" ") ===
        "patternProperties@schema minimum@schema.properties.a multipleOf@schema.properties.a format@schema.properties.b",
  );
  assert.throws(
    () => compileSchema({ type: "object", required: ["x"], additionalProperties: false }),
    /"x", which has no schema/,
  );
  assert.throws(() => compileSchema({ type: "strng" }), /type must be one of/);
});

/** Follows, byte by byte, a byte that brings the end exactly one nearer; returns the bytes. */
function shortestCompletion(s: Frame | null): number[] {
  const out: number[] = [];
  while (s !== null && !(canEnd(s) && minBytes(s) === 0)) {
    const need = minBytes(s);
    let next: Frame | null | undefined;
    let byte = -1;
    for (let b = 0; b < 256 && byte < 0; b++) {
      const t = step(s, b);
      if (t !== undefined && minBytes(t) === need - 1) {
        next = t;
        byte = b;
      }
    }
    assert.ok(byte >= 0, `no byte brings the end nearer from a state needing ${need} bytes`);
    out.push(byte);
    s = next!;
  }
  return out;
}

test("fewest bytes to complete is exact: following it closes the value in that many bytes, and the value validates", () => {
  const schemas = [
    PERSON,
    {
      type: "object",
      properties: {
        a: {
          type: "object",
          properties: { b: { type: "array", items: { type: "string", minLength: 2 }, minItems: 2 } },
          required: ["b"],
        },
      },
      required: ["a"],
    },
    { type: "array", items: { enum: ["long-one", "x"] }, minItems: 3 },
    {},
  ];
  const ajv = new Ajv();
  const r = rng(5);
  for (const schema of schemas) {
    const g = compileSchema(schema);
    const validate = ajv.compile(schema);
    // from the start, and from states along random valid walks
    for (let walk = 0; walk < 40; walk++) {
      let s: Frame | null = initialState(g);
      const prefix: number[] = [];
      const steps = Math.floor(r() * 30);
      for (let i = 0; i < steps && s !== null; i++) {
        const options: [number, Frame | null][] = [];
        for (let b = 0x20; b < 0x7f; b++) {
          const t = step(s, b);
          if (t !== undefined) options.push([b, t]);
        }
        if (options.length === 0) break;
        const [b, t] = options[Math.floor(r() * options.length)];
        prefix.push(b);
        s = t;
      }
      const need = minBytes(s);
      const rest = shortestCompletion(s);
      assert.equal(rest.length, need);
      const text = Buffer.from([...prefix, ...rest]).toString("utf8");
      const value = JSON.parse(text);
      assert.ok(validate(value), `${text}: ${JSON.stringify(validate.errors)}`);
    }
  }
});

test("random walks over stories260K's vocabulary: any allowed token, and the answer closes within the budget, parsing and validating", async () => {
  const tk = Tokenizer.fromGGUF(GGUFFile.open(STORIES));
  const ajv = new Ajv();
  const r = rng(11);
  const schemas = [
    PERSON,
    { type: "object" },
    { type: "array", items: { type: "number" }, maxItems: 4 },
    { enum: ["yes", "no"] },
  ];
  for (const schema of schemas) {
    const g = compileSchema(schema);
    const validate = ajv.compile(schema);
    for (const budget of [g.minLen, g.minLen + 3, 40, 120]) {
      for (let walk = 0; walk < 8; walk++) {
        const c = new JsonConstraint(g, tk, true);
        assert.ok(c.minTokens <= budget);
        const ids: number[] = [];
        while (!c.finished && ids.length < budget) {
          const mask = c.allowed(budget - ids.length);
          const allowed: number[] = [];
          mask.forEach((v, id) => v && allowed.push(id));
          const id = allowed[Math.floor(r() * allowed.length)];
          if (tk.isEog(id)) break;
          c.accept(id);
          ids.push(id);
        }
        const text = tk.decode(ids);
        assert.ok(ids.length <= budget);
        let value: unknown;
        assert.doesNotThrow(() => (value = JSON.parse(text)), `${JSON.stringify(schema)} budget ${budget}: ${text}`);
        assert.ok(validate(value), `${text}: ${JSON.stringify(validate.errors)}`);
      }
    }
  }
});

test("library: generate({ responseFormat }) gives JSON that validates; too few tokens for the schema is refused up front", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1 });
  try {
    const validate = new Ajv().compile(PERSON);
    for (const [temperature, seed] of [
      [0, 1],
      [0.8, 1],
      [0.8, 2],
    ]) {
      const gen = model.generate("Once upon a time", {
        temperature,
        seed,
        maxTokens: 64,
        responseFormat: { type: "json_schema", schema: PERSON },
      });
      const text = await gen.text();
      assert.ok(validate(JSON.parse(text)), text);
      assert.equal(gen.stats!.stopReason, "eos");
      assert.ok(gen.tokens.length <= 64);
    }
    const obj = await model
      .generate("Hi", { temperature: 0, maxTokens: 40, responseFormat: { type: "json_object" } })
      .text();
    assert.equal(typeof JSON.parse(obj), "object");
    assert.throws(
      () => model.generate("Hi", { responseFormat: { type: "json_schema", schema: { type: "string", pattern: "a" } } }),
      (e: unknown) => e instanceof UnsupportedSchemaError && /"pattern"/.test(e.message),
    );
    await assert.rejects(
      model.generate("Hi", { maxTokens: 5, responseFormat: { type: "json_schema", schema: PERSON } }).text(),
      /shortest JSON answer takes 20 tokens, but only 5 may be generated/,
    );
  } finally {
    await model.dispose();
  }
});
