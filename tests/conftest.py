"""Tests compile generated C at -O1: the code is the same, the C compiler is about three times faster.
Benchmarks use the real flags (-O3)."""
import os

os.environ.setdefault("CUVIL_OPT_LEVEL", "1")
