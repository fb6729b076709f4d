"""Serve the demo page on http://localhost:8000/ (`python examples/web/serve.py [PORT]`): this folder, plus the
installed package's cuvil.js at /cuvil.js (ES modules load only over HTTP, not from file://)."""
from __future__ import annotations

import functools
import http.server
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cuvil_js() -> Path:
    """The loader shipped in the package (cuvil/runtime/js/cuvil.js)."""
    import cuvil.runtime

    return Path(cuvil.runtime.__file__).with_name("js") / "cuvil.js"


class Handler(http.server.SimpleHTTPRequestHandler):
    """This folder's files, and /cuvil.js from the package."""
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript",
                      ".cuv": "application/octet-stream"}

    def translate_path(self, path: str) -> str:
        if path.split("?")[0] == "/cuvil.js":
            return str(cuvil_js())
        return super().translate_path(path)

    def log_message(self, *args):
        pass


def server(port: int = 8000, folder: Path = HERE) -> http.server.ThreadingHTTPServer:
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=str(folder)))


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    print(f"http://127.0.0.1:{port}/  (Ctrl-C stops)")
    server(port).serve_forever()
