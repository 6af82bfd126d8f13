"""``python train.py [key=value ...]`` from a clone: the same command as ``msdet train``
(:mod:`msdet.commands.train`). ``--help`` lists every setting."""

import sys

from msdet.commands.train import main

if __name__ == "__main__":
    sys.exit(main())
