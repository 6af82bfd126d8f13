"""``python -m msdet.tools.selftest``: the self-test's command line."""

import sys

from msdet.tools.selftest.report import main

sys.exit(main())
