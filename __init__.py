"""msdet: YOLOX object detection trained on MindSpore, for Ascend NPUs and the CPU.

The package is this repository's root (``pyproject.toml``): ``msdet.commands`` is the command
line, ``msdet.engine`` the training, evaluation and inference engine, ``msdet.models`` the
YOLOX port. Importing ``msdet`` itself loads nothing else.
"""

__version__ = "0.3.0"
