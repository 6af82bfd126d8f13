"""``python -m msdet.engine.tools.selftest``: the self-test's command line."""

import sys

from msdet.engine.tools.selftest.report import main

sys.exit(main())
