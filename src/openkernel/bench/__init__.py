"""Benchmark suites: ``openkernel bench PATH...`` runs one job per problem and summarises them.

* ``problems.py``: finding the problems under the paths given (KernelBench-format files, task
  folders, level folders of a KernelBench clone);
* ``suite.py``: running them one after the other, resumable by the suite's name;
* ``summary.py``: the per-problem table and the suite's figures (KernelBench's fast_p,
  geometric-mean speedups over eager and over torch.compile), read from the database, so the
  CLI and the dashboard show the same numbers.
"""
