"""``python -m jaximp``: see :mod:`jaximp._cli`."""

import sys

from jaximp._cli import main

if __name__ == "__main__":
    sys.exit(main())
