"""The parameter sweep: ``sweep.py`` times every kernel config over a shape list and can merge the
winners into the tuned table; ``sweep_ops.py`` holds the operations it (and the benchmark) runs."""
