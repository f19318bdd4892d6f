"""``python -m wsprof``."""

import sys

from wsprof.cli import main

sys.exit(main())
