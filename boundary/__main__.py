"""``python -m boundary``: the same entry point as the ``boundary`` console script.

Where it sits: the top, beside the console script: it runs ``boundary.cli.main``.
"""

import sys

from boundary.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
