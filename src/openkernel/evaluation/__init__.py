"""Evaluation, split by the process the code runs in.

* ``host/``: the engine's side (worker pool, GPU turns, memory plan, reference baselines,
  profiling dispatch, turning reports into verdicts). Never imports candidate code.
* ``worker/``: the confined worker process (entry, build, correctness, integrity, timing,
  profile run, sandbox): the only code that runs beside untrusted candidates.
* ``protocol.py``: the typed job and the messages between the two.
"""
