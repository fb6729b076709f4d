"""The CUDA backend: generated CUDA C for the shared fusion groups, cuBLASLt GEMMs, and a host runtime over the
driver API that replays each shape's CUDA Graph (docs/backend-cuda.md)."""
