"""Kernel descriptions: validated configs, the spec each one renders to, the
architectures they target, the shipped variants and the tuned tables.

Pure Python: nothing here imports CUDA, so configs and specs can be built,
checked and rendered on a machine without a GPU.
"""
