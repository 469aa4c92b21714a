"""`python -m jaxdec`: the `jaxdec` console script, for where the script is not on PATH."""

import sys

from jaxdec.cli import main

sys.exit(main())
