"""``python -m gossipfl ...``: the command line without an installed entry point."""

import sys

from gossipfl.cli import main

sys.exit(main())
