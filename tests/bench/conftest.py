"""The harness's smoke tests compile at -O1: the code is the same, the compiler is three times faster."""
import os

os.environ.setdefault("CUVIL_OPT_LEVEL", "1")
