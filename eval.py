"""``python eval.py [key=value ...]`` from a clone: the same command as ``msdet eval``
(:mod:`msdet.commands.eval`). ``--help`` lists every setting."""

import sys

from msdet.commands.eval import main

if __name__ == "__main__":
    sys.exit(main())
