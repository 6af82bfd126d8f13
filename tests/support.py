"""What many tests share: the repository root, and running code in a fresh Python process."""

from __future__ import annotations

import os

# The repository root: entry points, configs/ and scripts/ are found from it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
