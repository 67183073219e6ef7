"""``python -m specwatch.cli``."""

import sys

from specwatch.cli import main

sys.exit(main())
