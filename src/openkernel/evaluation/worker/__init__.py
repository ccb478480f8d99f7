"""The confined side of evaluation: code that runs in a worker process, beside candidate code.

Everything here runs in ``python -m openkernel.evaluation.worker``, a process with no secrets
in its environment that locks itself in with Landlock (``sandbox.py``) before it imports a
candidate. It never imports the engine's side (``openkernel.evaluation.host``), the store or
the search.
"""
