"""The dashboard's read-only engine under many request threads at once (Flask serves each
callback on its own thread)."""

from __future__ import annotations

import threading

from sqlalchemy import text

from openkernel.store import Store, open_readonly


def test_readonly_engine_survives_many_threads(tmp_path):
    path = tmp_path / "k.sqlite3"
    store = Store(path)
    run = store.start_run(task_name="t", job_name="j", backend="triton")
    for i in range(200):
        store.add_kernel(id=f"k{i:04d}", run_id=run.id, task_name="t", job_name="j", iteration=0,
                         branch=i, label=f"i0-b{i}", origin="offline", status="correct")
    store.close()
    engine = open_readonly(path)
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def reader() -> None:
        try:
            start.wait()
            for _ in range(20):
                with engine.connect() as conn:
                    # Iterate row by row, as the dashboard's queries do, while others connect.
                    n = sum(1 for _ in conn.execute(text("SELECT id, label FROM kernels")))
                    assert n == 200
        except BaseException as err:  # collected: a thread's failure must fail the test
            errors.append(err)

    threads = [threading.Thread(target=reader) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
