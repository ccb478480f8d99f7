"""The engine's side of evaluation: worker processes, GPU turns, the memory plan, verdicts.

Nothing here imports candidate code or touches CUDA; every job runs in a worker process
(``openkernel.evaluation.worker``), spoken to through ``openkernel.evaluation.protocol``.
"""
