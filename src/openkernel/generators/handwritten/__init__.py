"""Hand-written kernel families: kernels matched from the probe's list of aten ops plus the
reference's syntax tree (the compiler, ``generators/compiler``, writes the rest from the trace).
"""
