"""Short scripts that use fp4q as an application would; run them with ``python examples/NAME.py``
or all at once with ``python examples/run_all.py`` (see examples/README.md)."""
