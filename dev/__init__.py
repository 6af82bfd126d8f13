"""Maintainer tools, in a clone only (not in the wheel): the developer scripts (``test.sh``,
``lint.sh``, ``check_*.sh``) and the extractors that rebuild the chip check's bundled data
from a CANN install (:mod:`msdet.dev.cann_tables`, with :mod:`msdet.dev.select_format`) and
from MindSpore's sources (:mod:`msdet.dev.ms_mapping`). The top layer: it may import any of
msdet, and nothing in msdet imports it.
"""
