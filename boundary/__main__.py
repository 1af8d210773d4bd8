"""``python -m boundary``: the same entry point as the ``boundary`` console script."""

import sys

from boundary.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
