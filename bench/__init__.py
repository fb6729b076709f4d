"""Cuvil's benchmarks: `python -m bench` (the suite against the peers), bench/gemm.py, bench/import_time.py."""
