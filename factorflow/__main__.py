"""``python -m factorflow``: the command line (see ``factorflow.cli``)."""

import sys

from factorflow.cli import main

sys.exit(main())
