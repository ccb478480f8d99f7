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


# -- a results database in a read-only place (issue 25) ------------------------------------------
import shutil  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from rich.console import Console  # noqa: E402

import openkernel.cli as cli  # noqa: E402
from openkernel.errors import OpenKernelError  # noqa: E402


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe").touch()
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


@pytest.fixture
def readonly_db(tmp_path):
    """A database the engine wrote (WAL mode, closed: no -wal/-shm beside it), in a folder
    nobody may write: chmod for a user; as root (whom chmod does not stop) the immutable
    attribute. The test checks that writing there really fails."""
    folder = tmp_path / "ro"
    folder.mkdir()
    store = Store(folder / "k.sqlite3")
    run = store.start_run(task_name="gelu", job_name="frozen", backend="triton",
                          hardware="CPU (Triton interpreter)")
    for i in range(12):
        store.add_kernel(id=f"ab{i:02d}cd", run_id=run.id, task_name="gelu", job_name="frozen",
                         iteration=0, branch=i, label=f"i0-b{i}", origin="offline",
                         status="correct", correctness=True, runtime_improvement=0.5 + i / 100,
                         score=3.5 + i / 100, code=f"k[grid](x, BLOCK={1024 << (i % 3)})")
    store.finish_run(run.id, "completed")
    store.close()
    assert sorted(p.name for p in folder.iterdir()) == ["k.sqlite3"]
    folder.chmod(0o555)
    immutable = False
    if _writable(folder):  # root: chmod does not stop it
        immutable = shutil.which("chattr") is not None and subprocess.run(
            ["chattr", "+i", str(folder)], capture_output=True).returncode == 0
    try:
        if _writable(folder):
            pytest.skip("cannot make a read-only folder here (root without chattr +i)")
        yield folder / "k.sqlite3"
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_readers_read_a_database_in_a_read_only_folder(readonly_db, capsys):
    from kernelcode.dashboard.source import DataSource

    engine = open_readonly(readonly_db)  # the dashboards' engine (kernelfoundry-gui)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM kernels")).scalar_one() == 12
    engine.dispose()
    assert len(DataSource(readonly_db).job("gelu", "frozen").rows) == 12
    assert cli.main(["runs", "--db", str(readonly_db)]) == 0
    out = capsys.readouterr().out
    assert "gelu\tfrozen\tcompleted\t12\t0.610x (i0-b11)" in out  # three figures, not 0.61x
    assert cli.main(["show", "ab05", "--db", str(readonly_db), "--field", "label"]) == 0
    assert capsys.readouterr().out.strip() == "i0-b5"  # a unique prefix of the id
    assert cli.main(["archive", "frozen", "--db", str(readonly_db)]) == 0
    out = capsys.readouterr().out
    assert "12 candidates in 3 cells, 3 with a correct elite" in out and "i0-b11 0.610x" in out
    assert sorted(p.name for p in readonly_db.parent.iterdir()) == ["k.sqlite3"]  # untouched


def test_ambiguous_or_unknown_prefix_lists_or_says(readonly_db, capsys):
    assert cli.main(["show", "ab", "--db", str(readonly_db)]) == 2
    err = capsys.readouterr().err
    assert "'ab' is the start of several kernel ids" in err
    assert err.count("gelu/frozen") == 10 and "give more characters" in err
    assert cli.main(["show", "zz", "--db", str(readonly_db)]) == 2
    assert "no kernel with id 'zz'" in capsys.readouterr().err


def test_a_writer_that_cannot_write_names_the_path_and_why(readonly_db):
    with pytest.raises(OpenKernelError) as err:
        Store(readonly_db)
    message = str(err.value)
    assert message.startswith(f"{readonly_db}: cannot write the results database: its folder "
                              f"{readonly_db.parent} is not writable (")
    assert "read-only" in message  # where readers still open it


def test_runs_at_80_columns_drops_the_hardware_then_the_dates(readonly_db):
    narrow = Console(width=80, force_terminal=True, record=True)
    old, cli.console = cli.console, narrow
    try:
        assert cli.main(["runs", "--db", str(readonly_db)]) == 0
    finally:
        cli.console = old
    lines = narrow.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if "task" in line)
    assert [c.strip() for c in header.strip("┃│ ").split("┃")] == ["task", "job", "state",
                                                                 "candidates", "best",
                                                                 "last activity"]
    row = next(line for line in lines if "frozen" in line)
    assert "completed" in row and "0.610x (i0-b11)" in row and "…" not in row
    assert "hardware left out to fit 80 columns" in " ".join(lines)
