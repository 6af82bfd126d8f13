"""``python predict.py [key=value ...]`` from a clone: the same command as ``msdet predict``
(:mod:`msdet.commands.predict`). ``--help`` lists every setting."""

import sys

from msdet.commands.predict import main

if __name__ == "__main__":
    sys.exit(main())
