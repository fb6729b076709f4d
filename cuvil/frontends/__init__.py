"""Frontends translate models from other frameworks into Cuvil IR. Each imports its framework lazily, so
`import cuvil` stays free of them; `cuvil.load_onnx` reaches `cuvil.frontends.onnx` on first use."""
