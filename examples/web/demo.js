// The demo page's logic: load the dropped .cuv with cuvil.js, turn the image into the model's input (RGB scaled
// to [0, 1], normalised by ImageNet's mean and deviation, NCHW; examples/web/make_demo.py does the same in
// Python), run it, show the top 5 classes and the median latency of 10 runs.
import { load } from "./cuvil.js";

export const MEAN = [0.485, 0.456, 0.406], STD = [0.229, 0.224, 0.225];
const $ = (id) => document.getElementById(id);
const state = { model: null, image: null };

function status(text, name = "working") {
  $("status").textContent = text;
  $("status").dataset.state = name;
}

/** An image's pixels at the model's input size as f32[1, 3, h, w]. */
export function toInput(bitmap, h, w) {
  const canvas = $("preview");
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.imageSmoothingQuality = "high";
  ctx.drawImage(bitmap, 0, 0, w, h);
  const rgba = ctx.getImageData(0, 0, w, h).data;
  const data = new Float32Array(3 * h * w);
  for (let c = 0; c < 3; c++)
    for (let i = 0; i < h * w; i++) data[c * h * w + i] = (rgba[4 * i + c] / 255 - MEAN[c]) / STD[c];
  return { data, shape: [1, 3, h, w] };
}

async function run() {
  if (!state.model || !state.image) return;
  try {
    status("Checking and compiling the model...");
    const art = await load(await state.model.arrayBuffer(), { name: state.model.name });
    const fn = art.function("main");
    const [input] = fn.inputs;
    $("signature").textContent = `${state.model.name}: ${fn.inputs.map((p) => `${p.name}: ${p.dtype}[${p.shape}]`).join(", ")}`
      + ` -> ${fn.outputs.map((p) => `${p.dtype}[${p.shape}]`).join(", ")}`;
    if (input.dtype !== "f32" || input.shape.length !== 4 || input.shape[1] !== 3)
      throw new Error(`the model takes ${input.dtype}[${input.shape}], not an image (f32[1, 3, H, W])`);
    const [h, w] = [input.shape[2], input.shape[3]].map((d) => (typeof d === "number" ? d : 224));
    const bitmap = await createImageBitmap(state.image, { colorSpaceConversion: "none", premultiplyAlpha: "none" });
    const x = toInput(bitmap, h, w);
    const [y] = fn.run([x]);  // also the warm-up
    const times = [];
    for (let k = 0; k < 10; k++) {
      const t = performance.now();
      fn.run([x]);
      times.push(performance.now() - t);
    }
    times.sort((a, b) => a - b);
    show(Array.from(y.data), times[times.length >> 1]);
  } catch (e) {
    status(`Failed: ${e.message}`, "failed");
  }
}

function show(scores, ms) {
  const order = scores.map((s, k) => [s, k]).sort((a, b) => b[0] - a[0]).slice(0, 5);
  $("top").replaceChildren(...order.map(([s, k]) => {
    const row = document.createElement("tr");
    row.innerHTML = `<td>class ${k}</td><td>${s.toFixed(4)}</td>`;
    return row;
  }));
  $("latency").textContent = `latency: ${ms.toFixed(3)} ms (median of 10 runs, one thread)`;
  $("result").textContent = JSON.stringify({ top: order.map(([, k]) => k), scores, ms });
  status("Done.", "done");
}

function take(files) {
  for (const f of files) {
    if (f.name.endsWith(".cuv")) state.model = f;
    else state.image = f;
  }
  run();
}

$("model").addEventListener("change", (e) => take(e.target.files));
$("image").addEventListener("change", (e) => take(e.target.files));
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); take(e.dataTransfer.files); });
