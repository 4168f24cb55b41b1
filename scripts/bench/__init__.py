"""The benchmark (``bench.py``) with its contenders, measurements and report, the Triton contender,
the plot of a run's JSON (``plot.py``), a quick timing of every shipped config (``first_timing.py``),
and the GPU timing helpers (``timing.py``)."""
