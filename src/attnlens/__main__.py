"""``python -m attnlens``: the command line (:mod:`attnlens.cli`)."""

import sys

from attnlens.cli import main

sys.exit(main())
