"""Confinement of candidate workers: real subprocesses, real Landlock, real rlimits."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openkernel.evaluation.host import environment
from openkernel.evaluation.worker import sandbox


def _landlock_abi() -> int:
    try:
        return sandbox._sys(444, None, sandbox.ctypes.c_size_t(0), sandbox.ctypes.c_uint32(1))
    except OSError:
        return 0


ABI = _landlock_abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="this kernel has no Landlock")

SECRETS = {
    "OPENAI_API_KEY": "sk-test-openai-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-test-0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws/secret/0123456789",
    "GITHUB_TOKEN": "ghp_0123456789abcdef",
    "MY_SERVICE_PASSWORD": "hunter2-but-longer",
    "TORCH_HUB_TOKEN": "torch-hub-0123456789",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "LITELLM_MASTER_KEY": "litellm-master-0123",
    "SOME_URL": "https://user:pa55word@db.example.com/x",
}

ADD_KERNEL = '''
import torch, triton, triton.language as tl

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)

def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out
'''

# Runs in the worker: import torch/triton in the engine's cwd, move to scratch, confine,
# then behave like a hostile candidate and report what it could do.
CHILD = '''
import json, os, socket, sqlite3, sys
import torch, triton
from openkernel.evaluation.worker.sandbox import confine
scratch, task, engine, port, gpu, device = json.loads(sys.argv[1])
os.chdir(scratch)
out = {"confined": confine(scratch, [task], gpu)}

def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except PermissionError:
        out[name] = "PermissionError"
    except Exception as exc:
        out[name] = type(exc).__name__

db = os.path.join(engine, "runs", "kernels.sqlite3")
ppid = os.getppid()
attempt("read_db", lambda: open(db, "rb").read())
attempt("truncate_db", lambda: os.truncate(db, 0))
attempt("open_db_rw", lambda: open(db, "r+b"))
attempt("sqlite_db", lambda: sqlite3.connect(db).execute("delete from t").connection.commit())
attempt("list_engine", lambda: os.listdir(engine))
attempt("list_runs", lambda: os.listdir(os.path.join(engine, "runs")))
attempt("write_engine", lambda: open(os.path.join(engine, "evil.py"), "w"))
attempt("parent_environ", lambda: open(f"/proc/{ppid}/environ", "rb").read())
attempt("parent_cmdline", lambda: open(f"/proc/{ppid}/cmdline", "rb").read())
attempt("parent_cwd", lambda: os.readlink(f"/proc/{ppid}/cwd"))
attempt("parent_mem", lambda: open(f"/proc/{ppid}/mem", "rb"))
attempt("signal_parent", lambda: os.kill(ppid, 0))
attempt("tcp_connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=5))
attempt("write_tmp", lambda: open("/tmp/openkernel-sandbox-escape", "w"))
attempt("own_proc", lambda: open("/proc/self/status").read())
attempt("read_task", lambda: open(os.path.join(task, "task.py")).read())
attempt("write_scratch", lambda: open(os.path.join(scratch, "out.txt"), "w").write("x"))
def triton_add():
    sys.path.insert(0, scratch)
    import candidate
    x = torch.arange(1000, dtype=torch.float32, device=device)
    if not torch.equal(candidate.add(x, x), 2 * x):
        raise AssertionError("wrong sum")
attempt("triton_add", triton_add)  # on "cuda": CUDA init, Triton's gcc launcher and ptxas
print(json.dumps(out))
'''


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """An engine folder with a results database, a task folder and a scratch directory."""
    root = tmp_path / "engine"
    (root / "runs").mkdir(parents=True)
    db = root / "runs" / "kernels.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("create table t (x)")
        conn.execute("insert into t values (42)")
    task = tmp_path / "task"
    task.mkdir()
    (task / "task.py").write_text("# reference\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "candidate.py").write_text(ADD_KERNEL)
    monkeypatch.chdir(root)  # worker_env reads the engine's cwd
    env = environment.worker_env({**os.environ, **SECRETS}, scratch, "cpu", None)
    return root, db, task, scratch, env


def _run_child(engine, gpu: bool, device: str = "cpu") -> dict:
    root, db, task, scratch, env = engine
    if device == "cuda":
        env = environment.worker_env({**os.environ, **SECRETS}, scratch, "cuda", 0)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        args = json.dumps([str(scratch), str(task), str(root), port, gpu, device])
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, args], cwd=root, env=env, capture_output=True,
            text=True, timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_landlock
def test_confined_candidate_runs_triton_but_cannot_reach_the_engine(engine):
    root, db, *_ = engine
    before = db.read_bytes()
    out = _run_child(engine, gpu=False)
    assert out["confined"].startswith(f"landlock ABI {ABI}"), out["confined"]
    assert "unconfined" not in out["confined"]  # OPENBLAS_NUM_THREADS=1: no earlier threads
    assert out["triton_add"] == "ok"
    assert out["write_scratch"] == out["own_proc"] == out["read_task"] == "ok"
    for name in ("read_db", "truncate_db", "open_db_rw", "list_engine", "list_runs",
                 "write_engine", "parent_environ", "parent_cmdline", "parent_cwd", "parent_mem",
                 "write_tmp"):
        assert out[name] == "PermissionError", (name, out)
    assert out["sqlite_db"] == "OperationalError"  # sqlite's wording of EACCES
    if ABI >= 4:
        assert out["tcp_connect"] == "PermissionError"
    if ABI >= 6:
        assert out["signal_parent"] == "PermissionError"
    assert db.read_bytes() == before
    assert not (root / "evil.py").exists()


@needs_landlock
def test_gpu_mode_still_hides_the_parent(engine):
    """gpu=True opens the NVIDIA device nodes, not the engine's /proc entries or files."""
    out = _run_child(engine, gpu=True)
    assert out["confined"].startswith("landlock ABI"), out["confined"]
    for name in ("read_db", "list_engine", "parent_environ", "parent_cmdline", "parent_cwd"):
        assert out[name] == "PermissionError", (name, out)
    assert out["own_proc"] == out["triton_add"] == "ok"


@needs_landlock
@pytest.mark.gpu
def test_cuda_and_triton_work_under_confinement(engine):
    """CUDA initialises after confine(gpu=True) (measured on the H200: NVIDIA nodes + /proc)."""
    out = _run_child(engine, gpu=True, device="cuda")
    assert "NVIDIA devices" in out["confined"], out["confined"]
    assert out["triton_add"] == "ok", out
    for name in ("read_db", "truncate_db", "list_engine", "parent_environ", "parent_cwd",
                 "write_engine"):
        assert out[name] == "PermissionError", (name, out)


@needs_landlock
def test_threads_started_before_confine_are_reported(tmp_path):
    code = textwrap.dedent(f"""
        import threading, time
        from openkernel.evaluation.worker.sandbox import confine
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        print(confine({str(tmp_path)!r}, [], False))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    expected = "" if ABI >= 8 else "1 earlier threads unconfined"  # ABI 8: TSYNC
    assert expected in out


def test_worker_env_drops_secrets_and_moves_caches(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "4,5",
            "PYTHONPATH": f"relative:{tmp_path}:/nonexistent", "TRITON_INTERPRET": "1",
            "TRITON_CACHE_DIR": "/home/me/.triton", "DISPLAY": ":0", **SECRETS}
    scratch = tmp_path / "scratch"
    env = environment.worker_env(base, scratch, "cuda", 1)
    for name in SECRETS:
        assert name not in env
    assert "DISPLAY" not in env  # not on the allow-list
    assert env["PATH"] == "/usr/bin:/bin" and env["LANG"] == "C.UTF-8"
    for var in ("HOME", "TMPDIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "XDG_CACHE_HOME",
                "CUDA_CACHE_PATH"):
        assert Path(env[var]).is_dir() and Path(env[var]).is_relative_to(scratch.resolve())
    assert env["CUDA_VISIBLE_DEVICES"] == "5"  # index 1 of what the engine sees
    assert "TRITON_INTERPRET" not in env
    assert env["PYTHONDONTWRITEBYTECODE"] == env["PYTHONUNBUFFERED"] == "1"
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert str(environment.PKG_DIR.parent) in paths
    assert str(tmp_path) not in paths and "relative" not in paths  # the engine's cwd
    assert str(tmp_path) in env[environment.PROTECT_VAR]

    cpu = environment.worker_env(base, scratch, "cpu", None)
    assert cpu["TRITON_INTERPRET"] == "1" and cpu["CUDA_VISIBLE_DEVICES"] == ""
    assert environment.worker_env({}, scratch, "cuda", 0)["CUDA_VISIBLE_DEVICES"] == "0"


def test_redact_hides_secrets_echoed_by_a_candidate():
    secrets = environment.secret_values({**SECRETS, "PATH": "/usr/bin", "LANG": "C.UTF-8"})
    assert set(secrets) == set(SECRETS.values())
    output = "key=sk-test-openai-0123456789 url=https://user:pa55word@db.example.com/x ok"
    clean = environment.redact(output, secrets)
    assert "sk-test" not in clean and "pa55word" not in clean and clean.endswith(" ok")
    assert environment.redact("abc abcde", ["abc"]) == "abc abcde"  # too short to redact safely


def _limited(code: str, cpu_s: float, mem_bytes: int | None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], preexec_fn=environment.limits_preexec(cpu_s, mem_bytes),
        capture_output=True, text=True, timeout=60,
    )


def test_memory_limit_stops_a_greedy_child():
    proc = _limited("b = bytearray(2 << 30); print('allocated')", 30, 512 << 20)
    assert proc.returncode != 0 and "allocated" not in proc.stdout
    assert "MemoryError" in proc.stderr or proc.returncode < 0


def test_cpu_limit_kills_a_spinning_child():
    proc = _limited("while True: pass", 1, None)
    assert proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL)


def test_child_leads_its_own_session_without_core_dumps():
    code = ("import os, resource; print(os.getsid(0) == os.getpid() == os.getpgid(0), "
            "resource.getrlimit(resource.RLIMIT_CORE), "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= 4096)")
    proc = _limited(code, 10, None)
    assert proc.stdout.split() == ["True", "(0,", "0)", "True"], proc.stderr


def test_carve_exposes_siblings_but_not_the_engine(tmp_path):
    """An allowed tree above the engine (say /opt above /opt/engine) is granted piecewise."""
    (tmp_path / "opt" / "engine" / "runs").mkdir(parents=True)
    (tmp_path / "opt" / "cuda").mkdir()
    (tmp_path / "opt" / "readme.txt").write_text("x")
    (tmp_path / "opt" / "link").symlink_to(tmp_path / "opt" / "engine")
    engine = tmp_path / "opt" / "engine"
    roots = sandbox._carve(tmp_path / "opt", [engine])
    assert sorted(roots) == [tmp_path / "opt" / "cuda", tmp_path / "opt" / "readme.txt"]
    venv = engine / ".venv"  # inside the engine's folder: granted as asked, nothing more
    assert sandbox._carve(venv, [engine]) == [venv]
    assert sandbox._carve(engine, [engine]) == []


def test_confine_reports_instead_of_raising(monkeypatch, tmp_path):
    def no_landlock(*args):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(sandbox, "_sys", no_landlock)  # fails before anything is applied
    assert sandbox.confine(tmp_path, [], False).startswith("unconfined: no Landlock")
