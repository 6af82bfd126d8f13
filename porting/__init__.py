"""The porting toolkit: check msdet's YOLOX against the PyTorch original, module by module.

``python -m msdet.porting.compare`` is the command line (see :mod:`porting.compare`). The rows
it prints come from :mod:`porting.forward` (inference, per module and whole network),
:mod:`porting.detections` (NMS), :mod:`porting.training` (one training step) and are
formatted by :mod:`porting.report`. This package sits above ``models``, ``ops`` and
``engine``: it imports them, nothing imports it.
"""
