"""python -m bench.gpu_check: see the package's docstring (``--help``)."""

import sys

from .driver import main

sys.exit(main())
