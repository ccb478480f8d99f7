"""The offline generator's compiler: the reference's traced aten graph to a candidate module.

graph.py decodes the probe's trace into values and nodes, plan.py splits it into kernels,
kernels/ writes each kind of kernel (one module per kind) with emit.py and writer.py,
modelnew.py writes the ``ModelNew`` that launches them, and families.py names the families
the offline generator offers from these plans, with their tunables.
"""
