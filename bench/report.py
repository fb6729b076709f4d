"""The suite's outputs: a Markdown report, a JSON file and a PNG bar chart of the ratios to ONNX Runtime."""
from __future__ import annotations

import json
import re

from .peers import BASELINE

CUVIL_ROUTES = ("cuvil jit", "cuvil torch", "cuvil onnx")
SHORT = {"failed": "failed", "mismatch": "wrong output", "n/a": "-"}


def by_workload(results: list) -> dict:
    table: dict = {}
    for r in results:
        table.setdefault(r.workload, {})[r.peer] = r
    return table


def best_route(row: dict):
    timed = [row[p] for p in CUVIL_ROUTES if p in row and row[p].median is not None]
    return min(timed, key=lambda r: r.median) if timed else None


def ratio(res, row: dict):
    base = row.get(BASELINE)
    if res is None or res.median is None or base is None or base.median is None:
        return None
    return res.median / base.median


def _ms(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def cell(res, row: dict) -> str:
    if res is None:
        return "-"
    if res.median is None:
        return SHORT.get(res.status, res.status)
    r = ratio(res, row)
    return f"{_ms(res.median)} / {_ms(res.p90)}" + (f" ({r:.2f})" if r is not None and res.peer != BASELINE else "")


def latency_tables(results: list, peer_names: list, pressure: dict) -> list:
    table = by_workload(results)
    others = [p for p in peer_names if p not in CUVIL_ROUTES]
    routes = [p for p in peer_names if p in CUVIL_ROUTES]
    lines = ["### Latency: median / p90 ms (median's ratio to ONNX Runtime)", "",
             "| workload | " + " | ".join(others) + " | Cuvil (best route) | route | CPU pressure |",
             "|---|" + "---|" * (len(others) + 3)]
    for wl, row in table.items():
        best = best_route(row)
        lines.append(f"| {wl} | " + " | ".join(cell(row.get(p), row) for p in others) +
                     f" | **{cell(best, row) if best else 'failed'}** | {best.peer[6:] if best else '-'} | "
                     f"{_percent(pressure.get(wl))} |")
    lines += ["", "### Cuvil by route", "", "| workload | " + " | ".join(routes) + " |", "|---|" + "---|" * len(routes)]
    for wl, row in table.items():
        lines.append(f"| {wl} | " + " | ".join(cell(row.get(p), row) for p in routes) + " |")
    return lines


def _percent(x) -> str:
    return "-" if x is None else f"{x:.0f}%"


def failures(results: list) -> list:
    bad = [r for r in results if r.status in ("failed", "mismatch")]
    if not bad:
        return []
    return ["", "### Failed or wrong (not timed)", ""] + [f"- {r.workload}, {r.peer}: {r.status}: {r.error}"
                                                          for r in bad]


def compile_table(probes: dict, peer_names: list, kernels_s: float | None) -> list:
    if not probes:
        return []
    routes = [p for p in peer_names if p in CUVIL_ROUTES]
    others = [p for p in peer_names if p not in CUVIL_ROUTES and p not in ("numpy", "torch eager")]
    lines = ["", "### First call in a fresh process, seconds (Cuvil: cold cache / warm cache)", "",
             "| workload | " + " | ".join(routes + others) + " |", "|---|" + "---|" * (len(routes) + len(others))]
    for wl, row in probes.items():
        cells = [_pair(row.get(p)) for p in routes] + [_first(row.get(p)) for p in others]
        lines.append(f"| {wl} | " + " | ".join(cells) + " |")
    if kernels_s is not None:
        lines += ["", f"Cuvil's kernel library and call extension are compiled once per machine ({kernels_s:.1f} s "
                      "here, not counted in the cold times above); cold = a fresh process with an otherwise empty "
                      "`CUVIL_CACHE_DIR`, warm = a fresh process that finds the model in the cache."]
    return lines


def _first(p) -> str:
    if not p:
        return "-"
    if "error" in p:
        return "failed"
    return "-" if p.get("n/a") else f"{p['first_s']:.2f}"


def _pair(p) -> str:
    if not p:
        return "-"
    return f"{_first(p['cold'])} / {_first(p['warm'])}"


def memory_table(results: list, probes: dict, peer_names: list) -> list:
    if not probes:
        return []
    table = by_workload(results)
    lines = ["", "### Memory: peak RSS of a fresh process once the PyTorch model and inputs exist, MiB (in parentheses:"
             " what the peer added to the RSS of that moment)", "",
             "| workload | " + " | ".join(peer_names) + " | Cuvil arena (plan) | Cuvil weights |",
             "|---|" + "---|" * (len(peer_names) + 2)]
    for wl, row in probes.items():
        cells = []
        for p in peer_names:
            x = row.get(p)
            x = x.get("warm") if isinstance(x, dict) and "warm" in x else x
            cells.append(f"{x['rss_mb']:.0f} (+{x['rss_delta_mb']:.0f})" if x and "rss_mb" in x else "-")
        best = best_route(table.get(wl, {}))
        arena = f"{best.arena_bytes / 2**20:.2f}" if best and best.arena_bytes is not None else "-"
        weights = f"{best.weights_bytes / 2**20:.1f}" if best and best.weights_bytes is not None else "-"
        lines.append(f"| {wl} | " + " | ".join(cells) + f" | {arena} | {weights} |")
    return lines


def profile_table(results: list) -> list:
    rows = [r for r in results if r.profile and "overhead" in r.profile]
    if not rows:
        return []
    lines = ["", "### cuvil.profile on each Cuvil route: instrumentation overhead and where the time goes", "",
             "| workload | route | instrumented / normal | kernels | slowest kernel (share, GFLOP/s) |",
             "|---|---|---|---|---|"]
    for r in rows:
        p = r.profile
        top = p["top"][0] if p["top"] else None
        slow = f"{top['kernel']} [{top['ops']}] {100 * top['share']:.0f}%, {top['gflops'] or 0:.0f}" if top else "-"
        lines.append(f"| {r.workload} | {r.peer[6:]} | {p['overhead']:.3f}x | {p['kernels']} | {slow} |")
    return lines


def markdown(meta: dict, results: list, probes: dict, peer_names: list) -> str:
    lines = [f"Command: `{meta['command']}`", "",
             f"Machine: {meta['machine']}; load average {meta['load_before']} before, {meta['load_after']} after; "
             f"{meta['noise']}. Versions: {meta['versions']}. OpenBLAS: {meta['openblas']}. Threads: "
             f"{meta.get('threads')}, rounds: {meta.get('rounds')}, {meta.get('date', '')}. CPU pressure: the share of "
             f"a workload's timing rounds in which some task waited for a CPU (/proc/pressure/cpu).", ""]
    lines += latency_tables(results, peer_names, meta.get("pressure", {})) + failures(results)
    lines += compile_table(probes, peer_names, meta.get("kernels_s"))
    lines += memory_table(results, probes, peer_names) + profile_table(results)
    extras = meta.get("dispatch_us")
    if extras:
        lines += ["", "### Dispatch overhead of a trivial compiled function (x + 1 on 4 floats), microseconds", "",
                  "| " + " | ".join(extras) + " |", "|" + "---|" * len(extras),
                  "| " + " | ".join(f"{v:.2f}" for v in extras.values()) + " |"]
    if meta.get("import_time"):
        lines += ["", f"Import time: {meta['import_time']}"]
    return "\n".join(lines) + "\n"


def save_json(path: str, meta: dict, results: list, probes: dict) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": [r.to_dict() for r in results], "probes": probes}, f, indent=1)


def load_json(path: str) -> tuple:
    """(meta, results, probes) of a saved run, to render its report again."""
    from .harness import Result

    data = json.load(open(path))
    results = [Result(**{k: v for k, v in r.items() if k not in ("median_ms", "p90_ms")}) for r in data["results"]]
    return data["meta"], results, data["probes"]


def chart(path: str, results: list, peer_names: list) -> None:
    """Grouped horizontal bars: each peer's median latency over ONNX Runtime's, per workload (log scale)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = by_workload(results)
    names = [p for p in peer_names if p not in CUVIL_ROUTES and p != BASELINE] + ["Cuvil (best route)"]
    workloads = list(table)
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.55 * len(workloads) * max(1, len(names)) / 3))
    height = 0.8 / len(names)
    for i, name in enumerate(names):
        values = []
        for wl in workloads:
            row = table[wl]
            r = ratio(best_route(row) if name.startswith("Cuvil") else row.get(name), row)
            values.append(r if r is not None else 0)
        ys = [k + i * height for k in range(len(workloads))]
        ax.barh(ys, values, height, label=name, color="black" if name.startswith("Cuvil") else None)
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    lo, hi = ax.get_xlim()
    ax.set_xticks([t for t in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 50) if lo <= t <= hi])
    ax.set_yticks([k + 0.4 - height / 2 for k in range(len(workloads))], workloads)
    ax.invert_yaxis()
    ax.set_xlabel("median latency / ONNX Runtime's (lower is faster; log scale; missing bar: not run or failed)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def update_docs(doc_path: str, generated: str) -> None:
    """Replace the text between the `bench:begin` and `bench:end` markers of the docs page."""
    text = open(doc_path).read()
    new = re.sub(r"(<!-- bench:begin -->\n).*?(<!-- bench:end -->)", lambda m: m.group(1) + generated + m.group(2),
                 text, flags=re.S)
    with open(doc_path, "w") as f:
        f.write(new)
