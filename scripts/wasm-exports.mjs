// Prints a wasm module's exported functions with their function indices, the N that perf's
// jitdump names JS:wasm-function[N] (docs/architecture.md, "what V8 made of a kernel"):
//   node scripts/wasm-exports.mjs build/kernels-relaxed.wasm [name-filter]
import { readFileSync } from "node:fs";

const [file, filter = ""] = process.argv.slice(2);
if (!file) {
  console.error("usage: node scripts/wasm-exports.mjs MODULE.wasm [name-filter]");
  process.exit(2);
}
let bytes;
try {
  bytes = readFileSync(file);
} catch (e) {
  console.error(`${file}: ${e.message}`);
  process.exit(1);
}
if (bytes.length < 8 || bytes.readUInt32LE(0) !== 0x6d736100) {
  console.error(`${file}: not a wasm module (no \\0asm magic at offset 0)`);
  process.exit(1);
}
let pos = 8;
/** unsigned LEB128 at pos */
function uleb() {
  let value = 0,
    shift = 0,
    byte;
  do {
    if (pos >= bytes.length) throw new Error(`${file}: truncated at offset ${pos}`);
    byte = bytes[pos++];
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return value;
}
// the length first: `pos += uleb()` would add it to pos as it was before the length was read
const skipName = () => {
  const n = uleb();
  pos += n;
};
/** a table's or memory's limits: flags, minimum, and the maximum where flag bit 0 says so */
function limits() {
  const flags = bytes[pos++];
  uleb();
  if (flags & 1) uleb();
}
// function indices count the imported functions first
let importedFunctions = 0;
const rows = [];
try {
  readSections();
} catch (e) {
  console.error(e.message);
  process.exit(1);
}

function readSections() {
  while (pos < bytes.length) {
    const id = bytes[pos++];
    const start = pos - 1;
    const end = uleb() + pos;
    if (end > bytes.length)
      throw new Error(
        `${file}: section ${id} at offset ${start} ends at ${end}, past the end of the file (${bytes.length} bytes)`,
      );
    if (id === 2) {
      // imports: module, name, kind and its description
      for (let n = uleb(); n > 0; n--) {
        skipName();
        skipName();
        const kind = bytes[pos++];
        if (kind === 0) {
          uleb(); // type index
          importedFunctions++;
        } else if (kind === 1) {
          pos++; // reference type
          limits();
        } else if (kind === 2) limits();
        else if (kind === 3)
          pos += 2; // value type, mutability
        else throw new Error(`${file}: import of unknown kind ${kind} at offset ${pos - 1}`);
      }
    } else if (id === 7) {
      for (let n = uleb(); n > 0; n--) {
        const len = uleb();
        const name = bytes.subarray(pos, pos + len).toString("utf8");
        pos += len;
        const kind = bytes[pos++];
        const index = uleb();
        if (kind === 0 && name.includes(filter)) rows.push([index, name]);
      }
    }
    pos = end;
  }
}
for (const [index, name] of rows.sort((a, b) => a[0] - b[0])) console.log(`${String(index).padStart(5)}  ${name}`);
if (importedFunctions)
  console.log(
    `(${importedFunctions} imported function${importedFunctions === 1 ? " comes" : "s come"} first in the index space)`,
  );
