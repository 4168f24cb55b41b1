"""Checks that need an NVIDIA GPU: ``gpu_check.sh`` runs the GPU tests, the sanitizers
(``sanitize.sh`` over ``sanitize_workload.py``), the soak test and a quick benchmark; ``sass_dump.py``
dumps and compares the SASS of every shipped variant; ``ncu_one.py`` launches one op (one quantize config) for ncu."""
