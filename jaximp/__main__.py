"""``python -m jaximp``: see :mod:`jaximp._frontends.cli`."""

import sys

from jaximp._frontends.cli import main

if __name__ == "__main__":
    sys.exit(main())
