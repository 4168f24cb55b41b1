"""The repository's tools (not part of the installed package), by purpose:

``scripts.sweep``  the parameter sweep of the kernel configs and the tuned table it writes
``scripts.bench``  the benchmark against a device copy and other quantizers, its report and plot,
                   and the GPU timing helpers everything else uses
``scripts.gpu``    checks that need a GPU: the sanitizers, the soak test, SASS dumps, ncu runs,
                   and ``gpu_check.sh``, which runs them all
``scripts.dev``    development tools: compile times, host profiles, two source trees side by side

Run a tool from the repository root as a module (``python -m scripts.bench.bench``) or as a file
(``python scripts/bench/bench.py``); ``--help`` describes each.
"""
