// bench/wasm.py's Node.js side: wasm32 .cuv files run with cuvil.js and the same model's ONNX file run with
// onnxruntime-web's wasm backend (one thread, SIMD128), interleaved. `node [--experimental-wasm-relaxed-simd]
// bench/wasm_node.mjs SPEC.json`, SPEC = {cuvil: {peer: {cuv, features}}, onnx, input: {file, shape}, out}
// (`features`: cuvil.js load's, null for the engine's); then one command a line on stdin, one JSON answer a line:
//   check     -> {peer: file of its output, ..., "ort": file of onnxruntime-web's}
//   round N   -> {peer: [seconds per call ...], ..., cpu: {peer: CPU seconds per call of this process},
//                inside: {cuvil peer: seconds per call inside the module's entry}}: N calls of each, the order
//                rotating by round (run's time outside the entry is cuvil.js's: checks, copies, allocations)
//   levels    -> {peer: the .cuv section cuvil.js runs ("native": SIMD128, "native.1": relaxed-SIMD)}
//   warm S    -> {peer: calls made}: each peer called for S seconds (at least 30 calls), so that V8's background
//                tier-up to TurboFan is done before timing and its CPU time is charged to no round
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { engineFeatures, load } from "../cuvil/runtime/js/cuvil.js";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const raw = readFileSync(spec.input.file);
const x = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
const input = [{ data: x, shape: spec.input.shape }];
const peers = {}, levels = {}, inside = {};
for (const [name, { cuv, features }] of Object.entries(spec.cuvil)) {
  const art = await load(readFileSync(cuv), { features: features || engineFeatures() });
  const fn = art.function("main");
  timeEntry(art, fn, name);
  peers[name] = async () => fn.run(input)[0].data;
  levels[name] = art.native;
}

if (spec.onnx) {
  const ort = await import("onnxruntime-web");
  ort.env.wasm.numThreads = 1; // its one build is SIMD128 with threads (no relaxed-SIMD); one thread here
  const session = await ort.InferenceSession.create(readFileSync(spec.onnx), {
    executionProviders: ["wasm"], graphOptimizationLevel: "all",
  });
  const feed = { [session.inputNames[0]]: new ort.Tensor("float32", x, spec.input.shape) };
  peers.ort = async () => (await session.run(feed))[session.outputNames[0]].data;
}

/** Wrap the module's entry of `fn` (cuvil.js calls it through art.exports) so that its time adds to inside[name]. */
function timeEntry(art, fn, name) {
  const entry = fn._p + "main", call = art.exports[entry];
  inside[name] = 0;
  art.exports = { ...art.exports, [entry]: (...args) => {
    const t = process.hrtime.bigint();
    try {
      return call(...args);
    } finally {
      inside[name] += Number(process.hrtime.bigint() - t) / 1e9;
    }
  } };
}

let round = 0;
for await (const line of createInterface({ input: process.stdin })) {
  const [op, n] = line.trim().split(" ");
  let answer = {};
  if (op === "check") {
    for (const [name, run] of Object.entries(peers)) {
      const y = await run();
      writeFileSync(`${spec.out}.${name}.bin`, new Uint8Array(y.buffer, y.byteOffset, y.byteLength));
      answer[name] = `${spec.out}.${name}.bin`;
    }
  } else if (op === "levels") {
    answer = levels;
  } else if (op === "warm") {
    for (const [name, run] of Object.entries(peers)) {
      const end = process.hrtime.bigint() + BigInt(Math.round(Number(n) * 1e9));
      let calls = 0;
      while (calls < 30 || process.hrtime.bigint() < end) await run(), calls++;
      answer[name] = calls;
    }
  } else if (op === "round") {
    const names = Object.keys(peers);
    const turn = round++ % names.length;
    answer.cpu = {}, answer.inside = {};
    for (const name of [...names.slice(turn), ...names.slice(0, turn)]) {
      const times = [], cpu0 = process.cpuUsage();
      if (name in inside) inside[name] = 0;
      for (let k = 0; k < Number(n); k++) {
        const t = process.hrtime.bigint();
        await peers[name]();
        times.push(Number(process.hrtime.bigint() - t) / 1e9);
      }
      const cpu = process.cpuUsage(cpu0);
      answer[name] = times;
      answer.cpu[name] = (cpu.user + cpu.system) / 1e6 / Number(n);
      if (name in inside) answer.inside[name] = inside[name] / Number(n);
    }
  } else break;
  process.stdout.write(JSON.stringify(answer) + "\n");
}
