"""Serving the dashboard: in the foreground (kernelfoundry-gui) or from a thread (the TUI's ``d``).

A real WSGI server (werkzeug's threaded ``make_server``) rather than ``app.run``: it binds
before returning, so the caller learns the actual port when it asked for port 0, and it can
run in a daemon thread that dies with the TUI.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from werkzeug.serving import BaseWSGIServer, make_server

from kernelcode.dashboard.app import create_app, job_path

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def job_url(base_url: str, task_name: str, job_name: str) -> str:
    """The URL of a job's page on a running dashboard.

    Args:
        base_url: e.g. ``http://127.0.0.1:8885`` (as returned by ``serve_in_background``).
        task_name: the job's task.
        job_name: the job.
    """
    return base_url.rstrip("/") + job_path(task_name, job_name)


def make_dashboard_server(db_path: str | Path, host: str = "127.0.0.1", port: int = 8885,
                          refresh_ms: int = 2000) -> BaseWSGIServer:
    """A bound, threaded WSGI server for the dashboard of ``db_path`` (not yet serving)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request in the TUI
    app = create_app(db_path, refresh_ms=refresh_ms)
    return make_server(host, port, app.server, threaded=True)


def base_url(server: BaseWSGIServer, host: str) -> str:
    """``http://host:port`` of a bound server (IPv6 hosts bracketed)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{server.server_port}"


def serve_in_background(db_path: str | Path, host: str = "127.0.0.1", port: int = 0) -> str:
    """Start the dashboard in a daemon thread and return its base URL.

    The database is opened read-only and lazily: a database that does not exist yet shows a
    clear message in the browser until it does.

    Args:
        db_path: the results database.
        host: interface to bind (loopback by default).
        port: 0 picks a free port.

    Returns:
        The base URL with the bound port, e.g. ``http://127.0.0.1:53017``.
    """
    server = make_dashboard_server(db_path, host, port)
    thread = threading.Thread(target=server.serve_forever, name="kernelcode-dashboard", daemon=True)
    thread.start()
    return base_url(server, host)
