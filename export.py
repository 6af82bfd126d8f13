"""``python export.py [key=value ...]`` from a clone: the same command as ``msdet export``
(:mod:`msdet.commands.export`). ``--help`` lists every setting."""

import sys

from msdet.commands.export import main

if __name__ == "__main__":
    sys.exit(main())
