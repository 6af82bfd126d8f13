"""The configuration: where it lives, and the one loader every command composes it with."""

from __future__ import annotations

import os

# The repository (or installed package) root and its YAML config groups.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "configs")
