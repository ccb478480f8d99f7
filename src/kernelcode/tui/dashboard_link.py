"""Starting the dashboard for a job and opening a browser on it, without ever blocking the UI.

The dashboard lives in ``kernelcode.dashboard`` (another part of the project); this module only
calls its two entry points and turns every failure into a plain sentence.
"""

from __future__ import annotations

import os
import sys
import threading
import webbrowser

_servers: dict[str, str] = {}  # db path -> base URL: one server per database per process


def start(db_path: str, task_name: str, job_name: str) -> str:
    """The job's dashboard URL, starting the server if needed (call from a worker thread).

    Raises:
        RuntimeError: the dashboard is not available; the message says why.
    """
    try:
        from kernelcode.dashboard.server import job_url, serve_in_background
    except ImportError as err:
        raise RuntimeError(f"the dashboard module is not installed or not importable ({err}); "
                           "install the ui extra: pip install 'openkernel[ui]'") from None
    try:
        base = _servers.get(db_path) or serve_in_background(db_path, host="127.0.0.1", port=0)
    except Exception as err:  # noqa: BLE001 - any failure becomes the reason shown in the app
        raise RuntimeError(f"it failed to start: {type(err).__name__}: {err}") from None
    _servers[db_path] = base
    return job_url(base, task_name, job_name)


def open_browser(url: str) -> str:
    """Ask for a browser on ``url`` in a daemon thread; returns a note for the chat.

    On Linux without a display, ``webbrowser`` would fall back to a console browser that takes
    over the terminal, so there we only show the URL (for SSH tunnels and headless hosts).
    """
    if sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display here: open the URL in a browser yourself (e.g. via an SSH tunnel)"

    def _open() -> None:
        try:
            webbrowser.open(url, new=2)
        except Exception:  # noqa: BLE001 - a missing browser must not disturb the app
            pass

    threading.Thread(target=_open, name="open-browser", daemon=True).start()
    return "opening it in your browser"
