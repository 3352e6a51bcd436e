"""The commands: each module here is one command a user types, thin (parse the command line, call
the library, print), declared as a console entry point in ``pyproject.toml``. The module forms
that README shows (``python -m hlgt.solve``, ``python -m hlgt.train.evaluate``, ...) run the same
commands."""
