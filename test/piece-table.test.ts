/** The piece table's UTF-8 writer against TextEncoder, surrogates (paired, lone, cut) included. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { PieceTable } from "../src/tokenizer/piece-table.js";
import { rng } from "./helpers.js";

test("token texts are written as TextEncoder encodes them, each found by its id", () => {
  const texts = [
    "",
    "abc",
    "é",
    "€",
    "😀",
    "\ud800",
    "\udc00x",
    "a\ud83d",
    "\ud83d\ude00\ud83d",
    "▁the",
    "\u07ff\u0800\uffff",
  ];
  const r = rng(7);
  for (let i = 0; i < 5000; i++) {
    let s = "";
    for (let k = Math.floor(r() * 6); k > 0; k--)
      s += String.fromCharCode(r() < 0.3 ? 0xd800 + Math.floor(r() * 0x800) : Math.floor(r() * 0x10000));
    texts.push(s);
  }
  const b = PieceTable.builder(texts.length + 1);
  for (const t of texts) {
    b.text(t);
    b.endToken();
  }
  // a token made of bytes and text together
  b.byte(0xff);
  b.text("z");
  b.endToken();
  const table = b.finish();
  const encoder = new TextEncoder();
  texts.forEach((t, id) => assert.deepEqual(table.get(id), encoder.encode(t), `token ${id}: ${JSON.stringify(t)}`));
  assert.deepEqual(table.get(texts.length), Uint8Array.of(0xff, 0x7a));
  assert.equal(table.size, texts.length + 1);
  const out = new Uint8Array(8);
  assert.equal(table.copyTo(4, out, 1, 1), 3); // "😀" without its first byte
  assert.deepEqual(out.subarray(1, 4), encoder.encode("😀").subarray(1));
});

test("a table finished before every token was added is refused", () => {
  const b = PieceTable.builder(2);
  b.text("a");
  b.endToken();
  assert.throws(() => b.finish(), /1 tokens added of 2/);
});
