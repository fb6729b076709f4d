// Runs one entry of a wasm32 .cuv with cuvil.js under Node.js, for tests/backends/wasm: `node run_node.mjs
// SPEC.json`, where SPEC is {cuv, entry, inputs: [{file, shape}], out, features (optional: load's)}; writes each
// output's raw bytes to OUT.<k>.bin and {outputs: [{dtype, shape}], native} (or {error: {kind, message}}) to OUT.json.
import { readFileSync, writeFileSync } from "node:fs";
import { CuvilError, DTYPES, engineFeatures, load } from "../../../cuvil/runtime/js/cuvil.js";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
let result;
try {
  const art = await load(readFileSync(spec.cuv), { name: spec.cuv, features: spec.features || engineFeatures() });
  const fn = art.function(spec.entry || "main");
  const inputs = spec.inputs.map((x, i) => {
    const raw = readFileSync(x.file);
    const Type = DTYPES[x.dtype || fn.inputs[i].dtype];
    const copy = new Uint8Array(raw.byteLength);
    copy.set(raw);
    return { data: new Type(copy.buffer), shape: x.shape };
  });
  const outs = fn.run(inputs);
  outs.forEach((o, k) => writeFileSync(`${spec.out}.${k}.bin`, new Uint8Array(o.data.buffer)));
  result = { outputs: outs.map((o) => ({ dtype: o.dtype, shape: o.shape })), signature: fn.inputs, native: art.native };
} catch (e) {
  if (!(e instanceof CuvilError)) throw e;
  result = { error: { kind: e.kind, message: e.message } };
}
writeFileSync(`${spec.out}.json`, JSON.stringify(result));
