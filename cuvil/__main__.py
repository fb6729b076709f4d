"""`python -m cuvil`: the `cuvil` command."""
import sys

from .cli import main

sys.exit(main())
