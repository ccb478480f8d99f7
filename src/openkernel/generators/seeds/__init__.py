"""Inductor's kernels as seeds: its output rewritten as a standalone candidate (rewrite.py,
render.py), offered as the ``inductor_seed`` family (family.py)."""
