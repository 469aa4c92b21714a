"""`python -m jaxdec.cli`: the `jaxdec` console script."""

import sys

from jaxdec.cli import main

sys.exit(main())
