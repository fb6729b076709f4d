// cuvil.js: run a wasm32 `.cuv` (cuvil.export(..., target="wasm32")) in Node.js (>= 20) or a browser.
// An ES module with no dependencies. It checks the file as docs/artifact.md says (header, CRC, section table,
// SHA-256 of every section, meta against entries) before it compiles the module, then calls the module's ABI
// (docs/artifact.md, "The wasm32 module's ABI").
//
//   import { load } from "./cuvil.js";
//   const art = await load(bytes);                 // an ArrayBuffer or Uint8Array of the .cuv
//   const fn = art.function("main");               // fn.inputs, fn.outputs: [{name, dtype, shape}]
//   const [y] = fn.run([{ data: new Float32Array(784), shape: [1, 784] }]);   // y: {name, dtype, shape, data}

const MAGIC = [0x89, 0x43, 0x55, 0x56, 0x0d, 0x0a, 0x1a, 0x0a];
const HEADER_SIZE = 128, ROW_SIZE = 96, ALIGN = 64, MAX_SECTIONS = 64, ZLIB = 1;
const FORMAT = 2, PIECE = 1 << 20; // format 2: a section's SHA-256 is over the SHA-256s of its 1 MiB pieces
const REQUIRED = ["meta", "entries", "native"];
const COMPRESSIBLE = ["ir", "csrc"];
const TRIPLE = "wasm32-wasi";
const ABI_VERSION = 1;
const ERROR_INDEX = 1; // cuvil_rt.h's CUVIL_ERROR_INDEX
const ENTRY_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;
const OPCODES = ["const", "sym", "dim", "add", "mul", "floordiv", "mod", "eq", "bind", "out", "ge"]; // cuvil_checks.h
const OPERANDS = { const: 1, sym: 1, dim: 2, bind: 1, out: 1 };
export const DTYPES = {
  f16: Uint16Array, bf16: Uint16Array, f32: Float32Array, f64: Float64Array, i8: Int8Array, i16: Int16Array,
  i32: Int32Array, i64: BigInt64Array, u8: Uint8Array, u16: Uint16Array, u32: Uint32Array, u64: BigUint64Array,
  bool: Uint8Array,
};

/** Every failure of this loader: `kind` is "artifact" (a bad file), "shape" (inputs that do not fit the
 * signature), "index" (an index input out of range) or "runtime" (the module failed or trapped). */
export class CuvilError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "CuvilError";
    this.kind = kind;
  }
}

const fail = (message) => { throw new CuvilError("artifact", message); };

// docs/artifact.md's feature bits of wasm32, and a module of one (v128, v128, v128) -> v128 function for each:
// valid where the engine has the feature (cuvil/runtime/wasm.py has the same probes).
export const FEATURE_BITS = { simd128: 48n, threads: 49n, relaxed_simd: 50n };
const PROBE_TYPE = [0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 8, 1, 0x60, 3, 0x7b, 0x7b, 0x7b, 1, 0x7b, 3, 2, 1, 0];
const PROBES = {
  simd128: [10, 6, 1, 4, 0, 0x20, 0, 0x0b], // local.get 0
  relaxed_simd: [10, 13, 1, 11, 0, 0x20, 0, 0x20, 1, 0x20, 2, 0xfd, 0x85, 2, 0x0b], // f32x4.relaxed_madd
};

/** The features of this engine (names of FEATURE_BITS) whose probe module validates. */
export function engineFeatures() {
  return Object.keys(PROBES).filter((f) => WebAssembly.validate(new Uint8Array([...PROBE_TYPE, ...PROBES[f]])));
}

/** Check a `.cuv` (ArrayBuffer or typed array) and instantiate the module of its level with the most features the
 * engine has (`features`: the names it may use, default engineFeatures(); leave out "relaxed_simd" for SIMD128's
 * module); resolves to an Artifact whose `native` names the section run. */
export async function load(buffer, { name = "<memory>", features = engineFeatures() } = {}) {
  const bytes = buffer instanceof Uint8Array ? buffer : new Uint8Array(buffer);
  const file = await checkContainer(bytes, name);
  const native = chooseNative(file, features);
  const module = await WebAssembly.compile(file.section(native));
  const art = new Artifact(file, module, native);
  await art._start();
  return art;
}

/** The native section with the most feature bits within `features` (docs/artifact.md's rule, as cuvil.load's). */
function chooseNative(file, features) {
  const have = features.reduce((m, f) => m | (FEATURE_BITS[f] === undefined ? 0n : 1n << FEATURE_BITS[f]), 0n);
  const ones = (b) => [...b.toString(2)].filter((c) => c === "1").length;
  const fitting = Object.values(file.rows).filter((r) => /^native(\.\d+)?$/.test(r.name) && !(r.features & ~have));
  if (!fitting.length) {
    const lacks = Object.keys(FEATURE_BITS).filter((f) => (file.rows.native.features >> FEATURE_BITS[f]) & 1n && !features.includes(f));
    fail(`${file.name}: the module needs ${lacks.join(", ")}, which this engine lacks`);
  }
  return fitting.reduce((best, r) => (ones(r.features) > ones(best.features) ? r : best)).name;
}

/** Checks 1-3 and 5 of docs/artifact.md: {triple, rows, meta, section(name)}; throws CuvilError("artifact"). */
export async function checkContainer(bytes, name = "<memory>") {
  if (bytes.length < HEADER_SIZE) fail(`${name}: ${bytes.length} bytes is too short for a .cuv file (the header is 128)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (MAGIC.some((b, i) => bytes[i] !== b)) fail(`${name}: not a .cuv file (wrong magic)`);
  const version = view.getUint32(8, true), headerSize = view.getUint32(12, true);
  if (version > FORMAT) fail(`${name}: format version ${version} is newer than this loader's (${FORMAT})`);
  if (view.getUint32(124, true) !== crc32(bytes.subarray(0, 124))) fail(`${name}: the header's CRC does not match (a corrupt header)`);
  const fileSize = Number(view.getBigUint64(16, true));
  if (fileSize !== bytes.length) fail(`${name}: the header says ${fileSize} bytes, the file has ${bytes.length} (truncated?)`);
  const count = view.getUint32(24, true), flags = view.getUint32(28, true);
  if (version < 1 || headerSize !== HEADER_SIZE || flags || count > MAX_SECTIONS || bytes.subarray(112, 124).some((b) => b))
    fail(`${name}: a malformed header (version ${version}, size ${headerSize}, flags ${flags}, ${count} sections)`);
  const tableAt = Number(view.getBigUint64(32, true)), tableEnd = tableAt + ROW_SIZE * count;
  if (tableAt < HEADER_SIZE || tableEnd > bytes.length) fail(`${name}: the section table lies outside the file`);
  if (!equal(await sha256(bytes.subarray(tableAt, tableEnd)), bytes.subarray(80, 112)))
    fail(`${name}: the section table does not match its SHA-256 (corrupt)`);
  const rows = readRows(bytes, view, name, tableAt, tableEnd, count);
  for (const row of Object.values(rows))
    if (!equal(await sectionDigest(bytes.subarray(row.offset, row.offset + row.size), version), row.sha256))
      fail(`${name}: section '${row.name}' does not match its SHA-256 (corrupt)`);
  const triple = ascii(bytes.subarray(48, 80));
  if (triple !== TRIPLE) fail(`${name}: made for ${triple}, not ${TRIPLE} (run it with cuvil.load in Python)`);
  const section = (n) => bytes.subarray(rows[n].offset, rows[n].offset + rows[n].size);
  let meta, entries;
  try {
    meta = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(section("meta")));
    entries = new TextDecoder("ascii").decode(section("entries"));
  } catch (e) {
    fail(`${name}: meta or entries does not parse: ${e.message}`);
  }
  if (!meta || meta.format !== 1 || typeof meta.entries !== "object" || !Object.keys(meta.entries).length)
    fail(`${name}: meta is not a format-1 object with entries`);
  if (entries !== formatEntries(meta.entries)) fail(`${name}: the entries section disagrees with meta`);
  const consts = rows.consts ? rows.consts.size : 0;
  for (const [entry, e] of Object.entries(meta.entries)) {
    if (!ENTRY_NAME.test(entry)) fail(`${name}: entry name '${entry}' is not valid`);
    for (const c of e.constants)
      if (!(c.offset >= 0 && c.nbytes >= 0 && c.offset + c.nbytes <= consts && c.offset % ALIGN === 0))
        fail(`${name}: constant '${c.name}' of '${entry}' lies outside the consts section`);
    if (e.prepared.length) fail(`${name}: a wasm32 entry saves no prepared buffers (the module makes them)`);
  }
  return { name, triple, rows, meta, section };
}

function readRows(bytes, view, name, tableAt, tableEnd, count) {
  const rows = {};
  for (let k = 0; k < count; k++) {
    const at = tableAt + k * ROW_SIZE;
    const row = {
      name: ascii(bytes.subarray(at, at + 16)), offset: Number(view.getBigUint64(at + 16, true)),
      size: Number(view.getBigUint64(at + 24, true)), sha256: bytes.subarray(at + 32, at + 64),
      flags: view.getUint32(at + 64, true), features: view.getBigUint64(at + 72, true),
    };
    const zero = view.getUint32(at + 68, true) || bytes.subarray(at + 80, at + 96).some((b) => b);
    if (!row.name || rows[row.name] || zero || row.flags & ~ZLIB) fail(`${name}: section ${k} ('${row.name}') is malformed`);
    if (row.offset % ALIGN || row.offset < tableEnd || row.offset + row.size > bytes.length)
      fail(`${name}: section '${row.name}' is not 64-byte aligned inside the file after the table`);
    if (row.flags & ZLIB && !COMPRESSIBLE.includes(row.name)) fail(`${name}: section '${row.name}' must not be compressed`);
    rows[row.name] = row;
  }
  const spans = Object.values(rows).sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < spans.length; i++)
    if (spans[i].offset < spans[i - 1].offset + spans[i - 1].size) fail(`${name}: sections '${spans[i - 1].name}' and '${spans[i].name}' overlap`);
  const missing = REQUIRED.filter((n) => !rows[n]);
  if (missing.length) fail(`${name}: required section(s) ${missing.join(", ")} missing`);
  return rows;
}

/** A loaded wasm32 `.cuv`: `entries`, `metadata`, `native` (the level's section), `function(name)`; one module
 * instance for all entries. */
export class Artifact {
  constructor(file, module, native = "native") {
    this.name = file.name;
    this.native = native;
    this.metadata = file.meta;
    this._file = file;
    this._module = module;
    this._functions = {};
    this.entries = Object.keys(file.meta.entries).filter((n) => !(file.meta.entries[n].route || {}).variant_of);
  }

  async _start() {
    const imports = {};
    for (const imp of WebAssembly.Module.imports(this._module)) {
      if (imp.kind !== "function") throw new CuvilError("artifact", `${this.name}: the module imports ${imp.module}.${imp.name}`);
      (imports[imp.module] ??= {})[imp.name] = wasiStub(imp.name, () => this.memory);
    }
    this.instance = await WebAssembly.instantiate(this._module, imports);
    this.exports = this.instance.exports;
    this.memory = this.exports.memory;
    this._call("_initialize");
    if (this._call("cuvil_abi_version") !== ABI_VERSION)
      throw new CuvilError("artifact", `${this.name}: wasm ABI version ${this._call("cuvil_abi_version")}, this loader knows 1`);
    this._constsAt = this._file.rows.consts ? this._place(this._file.section("consts")) : 0;
  }

  function(name = "main") {
    const entries = this.metadata.entries;
    if (!entries[name]) throw new CuvilError("shape", `${this.name} has no entry '${name}' (entries: ${this.entries.join(", ")})`);
    return (this._functions[name] ??= new CuvilFunction(this, name, entries[name]));
  }

  _call(name, ...args) {
    try {
      return this.exports[name](...args);
    } catch (e) {
      if (e instanceof CuvilError) throw e;
      throw new CuvilError("runtime", `the wasm32 module failed in ${name}: ${e.message}`);
    }
  }

  _alloc(nbytes) {
    const at = this._call("cuvil_alloc", Math.max(Number(nbytes), 1));
    if (!at) throw new CuvilError("runtime", `the wasm32 module cannot allocate ${nbytes} bytes`);
    return at;
  }

  _place(bytes) {
    const at = this._alloc(bytes.byteLength);
    new Uint8Array(this.memory.buffer, at, bytes.byteLength).set(bytes);
    return at;
  }

  _table(values, Type) {
    const data = new Type(values.length || 1);
    data.set(values);
    return this._place(new Uint8Array(data.buffer));
  }

  _lastError() {
    const at = this._call("cuvil_last_error");
    const mem = new Uint8Array(this.memory.buffer, at, 512);
    const end = mem.indexOf(0);
    return new TextDecoder().decode(mem.subarray(0, end < 0 ? 512 : end));
  }
}

/** One entry point: `run(inputs)` takes [{data: TypedArray, shape}] (or bare typed arrays where the entry's
 * shape has no symbol), in the entry's order, and returns [{name, dtype, shape, data}]. */
export class CuvilFunction {
  constructor(art, name, e) {
    this._art = art;
    this._e = e;
    this._p = e.prefix;
    this.name = name;
    this.inputs = e.inputs.map((p) => ({ ...p }));
    this.outputs = e.outputs.map((p) => ({ ...p }));
    this._consts = null;
  }

  _constantTable() {
    const art = this._art, p = this._p;
    const addresses = this._e.constants.map((c) => art._constsAt + c.offset);
    const count = Number(art._call(p + "packed_count"));
    for (let j = 0; j < count; j++) addresses.push(art._alloc(art._call(p + "packed_bytes", BigInt(j))));
    const table = art._table(addresses, Uint32Array);
    for (let j = 0; j < count; j++) art._call(p + "prepare", table, BigInt(j));
    return table;
  }

  run(inputs) {
    if (inputs.length !== this.inputs.length)
      throw new CuvilError("shape", `${this.name}: expected ${this.inputs.length} inputs (${this.inputs.map((p) => p.name).join(", ")}), got ${inputs.length}`);
    const arrays = inputs.map((x, i) => this._input(x, this.inputs[i]));
    const ranks = this.outputs.map((p) => p.shape.length);
    const sizes = runChecks(this._e.checks, arrays.map((a) => a.shape), this._e.symbols.length, ranks.reduce((a, b) => a + b, 0));
    if (typeof sizes === "string") {
      const given = arrays.map((a, i) => `${this.inputs[i].name}: [${a.shape}]`).join(", ");
      const want = this.inputs.map((p) => `${p.name}: [${p.shape}]`).join(", ");
      throw new CuvilError("shape", `${this.name}: the input sizes (${given}) do not fit the signature (${want}): ${sizes}`);
    }
    let k = 0;
    const outShapes = ranks.map((r) => sizes.out.slice(k, (k += r)));
    return this._call(arrays, sizes.sym, outShapes);
  }

  _input(x, p) {
    const Type = DTYPES[p.dtype];
    const data = ArrayBuffer.isView(x) ? x : x.data;
    const shape = ArrayBuffer.isView(x) ? p.shape : x.shape;
    if (!(data instanceof Type)) throw new CuvilError("shape", `${this.name}: input '${p.name}' must be a ${Type.name} (dtype ${p.dtype})`);
    if (!Array.isArray(shape) || shape.length !== p.shape.length || !shape.every((d) => Number.isInteger(d) && d >= 0))
      throw new CuvilError("shape", `${this.name}: input '${p.name}' needs a shape of rank ${p.shape.length} (signature [${p.shape}]), got [${shape}]`);
    const count = shape.reduce((a, b) => a * b, 1);
    if (data.length !== count) throw new CuvilError("shape", `${this.name}: input '${p.name}' has ${data.length} elements, its shape [${shape}] needs ${count}`);
    return { data, shape };
  }

  _call(arrays, sym, outShapes) {
    const art = this._art, p = this._p;
    this._consts ??= this._constantTable();
    const outs = outShapes.map((shape, i) => {
      const Type = DTYPES[this.outputs[i].dtype];
      return { name: this.outputs[i].name, dtype: this.outputs[i].dtype, shape, data: new Type(shape.reduce((a, b) => a * b, 1)) };
    });
    const held = [];
    try {
      for (const a of arrays) held.push(art._place(new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength)));
      for (const o of outs) held.push(art._alloc(o.data.byteLength));
      const dims = art._table(sym.map(BigInt), BigInt64Array);
      const table = art._table(held, Uint32Array);
      held.push(dims, table);
      const arena = art._alloc(art._call(p + "arena_bytes", dims));
      held.push(arena);
      const rc = art._call(p + "main", table, table + 4 * arrays.length, dims, arena, this._consts);
      if (rc !== 0) {
        const text = art._lastError();
        throw new CuvilError(rc === ERROR_INDEX ? "index" : "runtime", rc === ERROR_INDEX ? text : `compiled function failed with code ${rc}${text ? ": " + text : ""}`);
      }
      outs.forEach((o, i) => {
        const at = held[arrays.length + i];
        new Uint8Array(o.data.buffer).set(new Uint8Array(art.memory.buffer, at, o.data.byteLength));
      });
    } finally {
      for (const at of held) art._call("cuvil_free", at);
    }
    return outs;
  }
}

/** cuvil_checks.h's interpreter: {sym, out}, or a message when a check fails. */
export function runChecks(code, shapes, nSym, nOut) {
  const st = [], sym = new Array(nSym).fill(0), out = new Array(nOut).fill(0);
  for (let pc = 0; pc < code.length;) {
    const op = OPCODES[code[pc]];
    const a = code.slice(pc + 1, pc + 1 + (OPERANDS[op] || 0));
    pc += 1 + a.length;
    if (op === "const") st.push(a[0]);
    else if (op === "sym") st.push(sym[a[0]]);
    else if (op === "dim") st.push(shapes[a[0]][a[1]]);
    else if (op === "bind") sym[a[0]] = st.pop();
    else if (op === "out") {
      const size = st.pop();
      if (size < 0) return `an output size would be ${size}`;
      out[a[0]] = size;
    } else {
      const y = st.pop(), x = st.pop();
      if ((op === "floordiv" || op === "mod") && y === 0) return `a size ${x} is divided by 0`;
      if (op === "eq" && x !== y) return `a size is ${x} where ${y} is needed`;
      if (op === "ge" && x < y) return `a size is ${x} where at least ${y} is needed`;
      if (op === "add") st.push(x + y);
      else if (op === "mul") st.push(x * y);
      else if (op === "floordiv") st.push(Math.floor(x / y));
      else if (op === "mod") st.push(x - Math.floor(x / y) * y);
      else if (op !== "eq" && op !== "ge") return `unknown instruction ${code[pc - 1 - a.length]}`;
    }
  }
  return { sym, out };
}

/** cuvil/runtime/entries.py's format_entries: the text `entries` must equal, byte for byte. */
export function formatEntries(entries) {
  const lines = ["cuvil-entries 1"];
  const cName = (n, i, kind) => (ENTRY_NAME.test(n) ? n : `${kind}_${i}`);
  for (const [name, e] of Object.entries(entries)) {
    lines.push(`entry ${name} ${e.prefix} ${e.inputs.length} ${e.outputs.length} ${e.symbols.length} ${e.constants.length} ${e.prepared.length}`);
    for (const s of e.symbols) lines.push(`symbol ${s}`);
    for (const kind of ["input", "output"])
      e[kind + "s"].forEach((p, i) => lines.push(`${kind} ${cName(p.name, i, kind)} ${p.dtype} ${p.shape.length}`));
    e.constants.forEach((c, k) => lines.push(`const ${k} ${c.offset} ${c.nbytes}`));
    for (const p of e.prepared) lines.push(`prepared ${p.index} ${p.offset} ${p.nbytes}`);
    lines.push(["checks", e.checks.length, ...e.checks].join(" "));
    lines.push("end");
  }
  return lines.join("\n") + "\n";
}

// The few WASI calls libc's start-up and printf may make; the module never does I/O, so output is dropped.
function wasiStub(name, memory) {
  const u32 = (at, v) => new DataView(memory().buffer).setUint32(at, v, true);
  switch (name) {
    case "environ_sizes_get":
    case "args_sizes_get":
      return (count, size) => (u32(count, 0), u32(size, 0), 0);
    case "environ_get":
    case "args_get":
      return () => 0;
    case "fd_write":
      return (fd, iovs, n, written) => {
        const dv = new DataView(memory().buffer);
        let total = 0;
        for (let i = 0; i < n; i++) total += dv.getUint32(iovs + 8 * i + 4, true);
        return u32(written, total), 0;
      };
    case "proc_exit":
      return (code) => { throw new CuvilError("runtime", `the wasm32 module exited with code ${code}`); };
    default:
      return () => 52; // ENOSYS
  }
}

let subtle = globalThis.crypto?.subtle;

async function sha256(bytes) {
  if (!subtle && typeof process !== "undefined") subtle = (await import("node:crypto")).webcrypto.subtle; // Node 18
  if (!subtle) throw new CuvilError("artifact", "checking a .cuv needs WebCrypto's SHA-256: serve the page over https or from localhost");
  return new Uint8Array(await subtle.digest("SHA-256", bytes));
}

/** A section's SHA-256 as its row holds it (docs/artifact.md): format 1 over its bytes, 2 over its pieces'. */
async function sectionDigest(bytes, version) {
  if (version < 2) return sha256(bytes);
  const pieces = [];
  for (let at = 0; at < bytes.length; at += PIECE) pieces.push(sha256(bytes.subarray(at, at + PIECE)));
  const digests = await Promise.all(pieces), all = new Uint8Array(32 * digests.length);
  digests.forEach((d, k) => all.set(d, 32 * k));
  return sha256(all);
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function equal(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function ascii(bytes) {
  const end = bytes.indexOf(0);
  return new TextDecoder("ascii").decode(end < 0 ? bytes : bytes.subarray(0, end));
}
