"""``python -m jaximp``: see :mod:`jaximp._cli`."""

from jaximp._cli import main

if __name__ == "__main__":
    main()
