"""msdet's command line: ``msdet train|eval|predict|export`` and the tools, one console script.

:mod:`msdet.commands.main` dispatches ``msdet COMMAND ...`` to a command's ``main(argv)``;
:mod:`~msdet.commands.train`, :mod:`~msdet.commands.eval`, :mod:`~msdet.commands.predict` and
:mod:`~msdet.commands.export` are the four entry points (``train.py`` and its siblings at the
repository root call them). The top layer: it imports the engine and the tools, nothing in
msdet imports it.
"""
