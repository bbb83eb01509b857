"""`python -m specmoe.cli`, as the `specmoe` console script."""

import sys

from specmoe.cli import main

sys.exit(main())
