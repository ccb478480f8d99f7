"""A private PostgreSQL server for the tests: Debian's binaries, a cluster in a temp folder,
on 127.0.0.1 at a free port, trust authentication, fsync off (the tests never need it).

PostgreSQL refuses to run as root, so as root (CI) the cluster belongs to the ``postgres``
user Debian's package makes (or ``nobody``) and its commands run as that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "openkernel"


def find_bin() -> Path | None:
    """The folder of ``initdb`` and ``postgres`` (Debian keeps them out of PATH), or None."""
    found = shutil.which("initdb")
    if found and Path(found).resolve().with_name("postgres").exists():
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """``with PostgresServer() as pg: pg.new_database("x")`` -> a ``postgresql://`` URL."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="openkernel-pg-"))
        self.user = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    self.user = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    def _run_as(self) -> dict:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def __enter__(self) -> "PostgresServer":
        data = self.root / "data"
        env = {**os.environ, "LC_ALL": "C", "HOME": str(self.root)}
        subprocess.run([str(self.bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-A", "trust",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True, env=env,
                       cwd=self.root, **self._run_as())
        self.log = open(self.root / "server.log", "wb")  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(
            [str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port), "-h", "127.0.0.1",
             "-k", str(self.root), "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=200"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=self.root, **self._run_as())
        deadline = time.time() + 60
        while True:
            ready = subprocess.run([str(self.bindir / "pg_isready"), "-h", "127.0.0.1", "-p",
                                    str(self.port)], capture_output=True)
            if ready.returncode == 0:
                break
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("PostgreSQL did not start: "
                                   + (self.root / "server.log").read_text(errors="replace")[-2000:])
            time.sleep(0.2)
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def password_role(self, role: str, password: str) -> str:
        """A superuser role that must give its password (SCRAM) on 127.0.0.1, the others
        staying on trust; returns its URL without the password."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
            conn.execute(f"CREATE ROLE \"{role}\" LOGIN SUPERUSER PASSWORD '{password}'")
            hba = self.root / "data" / "pg_hba.conf"  # the first line that matches decides
            hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
            conn.execute("SELECT pg_reload_conf()")
        url = f"postgresql://{role}@127.0.0.1:{self.port}/postgres"
        deadline = time.time() + 10
        while time.time() < deadline:  # the server reloads its rules in the background
            try:
                psycopg.connect(url, connect_timeout=5).close()
            except psycopg.OperationalError:
                break
            time.sleep(0.1)
        return url

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: SIGTERM's waits for clients
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)
