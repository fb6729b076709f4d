// bench/wasm.py's Node.js side: one wasm32 .cuv run with cuvil.js and the same model's ONNX file run with
// onnxruntime-web's wasm backend (one thread, SIMD), interleaved. `node bench/wasm_node.mjs SPEC.json`, SPEC =
// {cuv, onnx, input: {file, shape}, out}; then one command a line on stdin, one JSON answer a line on stdout:
//   check     -> {"cuvil": file of cuvil.js's output, "ort": file of onnxruntime-web's}
//   round N   -> {"cuvil": [seconds per call ...], "ort": [...]}: N calls of each, the order alternating by round
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { load } from "../cuvil/runtime/js/cuvil.js";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const raw = readFileSync(spec.input.file);
const x = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));

const fn = (await load(readFileSync(spec.cuv))).function("main");
const input = [{ data: x, shape: spec.input.shape }];
const peers = { cuvil: async () => fn.run(input)[0].data };

if (spec.onnx) {
  const ort = await import("onnxruntime-web");
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.simd = true;
  const session = await ort.InferenceSession.create(readFileSync(spec.onnx), {
    executionProviders: ["wasm"], graphOptimizationLevel: "all",
  });
  const feed = { [session.inputNames[0]]: new ort.Tensor("float32", x, spec.input.shape) };
  peers.ort = async () => (await session.run(feed))[session.outputNames[0]].data;
}

let round = 0;
for await (const line of createInterface({ input: process.stdin })) {
  const [op, n] = line.trim().split(" ");
  const answer = {};
  if (op === "check") {
    for (const [name, run] of Object.entries(peers)) {
      const y = await run();
      writeFileSync(`${spec.out}.${name}.bin`, new Uint8Array(y.buffer, y.byteOffset, y.byteLength));
      answer[name] = `${spec.out}.${name}.bin`;
    }
  } else if (op === "round") {
    const names = Object.keys(peers);
    if (round++ % 2) names.reverse();
    for (const name of names) {
      const times = [];
      for (let k = 0; k < Number(n); k++) {
        const t = process.hrtime.bigint();
        await peers[name]();
        times.push(Number(process.hrtime.bigint() - t) / 1e9);
      }
      answer[name] = times;
    }
  } else break;
  process.stdout.write(JSON.stringify(answer) + "\n");
}
