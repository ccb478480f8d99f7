"""The Dash app factory: one app per results database, routed by URL.

Routes: ``/`` (runs, and the benchmark suites), ``/job/<task_name>/<job_name>`` (one job,
names percent-encoded, see ``job_path``), ``/kernel/<id>`` (one kernel), ``/suite/<name>`` (a
benchmark suite's table and figures). Every callback is wrapped by ``guarded`` so a bad
database or an unexpected error becomes a message on the page, never a traceback; the app runs
with ``debug=False`` so Dash's dev tools never show one either.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from urllib.parse import quote, unquote

from dash import Dash, Input, Output, dcc, html
from dash.exceptions import PreventUpdate

from kernelcode.dashboard.components import message_page
from kernelcode.dashboard.source import DataSource
from openkernel.errors import OpenKernelError
from openkernel.db_location import shown

log = logging.getLogger("kernelcode.dashboard")
ASSETS = Path(__file__).parent / "assets"


def job_path(task_name: str, job_name: str) -> str:
    """The URL path of a job's page (names may hold spaces or slashes)."""
    return f"/job/{quote(task_name, safe='')}/{quote(job_name, safe='')}"


def guarded(fallback):
    """Wrap a callback so that errors turn into ``fallback(message)`` instead of a 500.

    ``OpenKernelError`` messages (missing or foreign database) are shown as they are; any other
    exception is logged with its traceback on the server and shown as one line.
    """

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except PreventUpdate:
                raise
            except OpenKernelError as err:
                return fallback(str(err))
            except Exception as err:  # a bug: keep the traceback in the server log only
                log.exception("dashboard callback %s failed", fn.__name__)
                return fallback(f"Something went wrong while drawing this ({type(err).__name__}: {err}).")

        return wrapper

    return decorate


def route(source: DataSource, pathname: str | None, search: str | None):
    """The page for a URL path (pure enough to unit-test without a browser)."""
    from kernelcode.dashboard.pages import job, kernel, runs, suite

    problem = source.check()
    if problem:
        return message_page("Cannot open the results database", problem +
                            ". Start kernelfoundry-gui with --db pointing at an openkernel "
                            "results database (runs/kernels.sqlite3 by default).", back=False)
    parts = [unquote(p) for p in (pathname or "/").strip("/").split("/") if p]
    if not parts:
        return runs.layout(source)
    if parts[0] == "job" and len(parts) == 3:
        return job.layout(source, parts[1], parts[2])
    if parts[0] == "kernel" and len(parts) == 2:
        return kernel.layout(source, parts[1])
    if parts[0] == "suite" and len(parts) == 2:
        return suite.layout(source, parts[1])
    return message_page("Page not found", f"There is no page at {pathname}. Jobs live at "
                        "/job/<task_name>/<job_name>, kernels at /kernel/<id>, benchmark "
                        "suites at /suite/<name>.")


def create_app(db_path: str | Path, refresh_ms: int = 2000) -> Dash:
    """Build the dashboard for one results database (opened read-only, lazily).

    Args:
        db_path: the results database: a SQLite file or a PostgreSQL URL.
        refresh_ms: how often a job page checks for new kernels.

    Returns:
        The Dash app; serve ``app.server`` (a Flask WSGI app).
    """
    from kernelcode.dashboard.pages import job, kernel, runs

    source = DataSource(db_path)
    app = Dash(__name__, assets_folder=str(ASSETS), suppress_callback_exceptions=True,
               title="kernelfoundry results", update_title=None)
    app.layout = html.Div([
        dcc.Location(id="url"),
        html.Header([dcc.Link("kernelfoundry results", href="/", className="brand"),
                     html.Span(shown(db_path), className="db-path", title="read-only")],
                    className="topbar"),
        html.Main(id="page"),
    ])

    @app.callback(Output("page", "children"), Input("url", "pathname"), Input("url", "search"))
    @guarded(lambda msg: message_page("Cannot show this page", msg))
    def _route(pathname, search):
        return route(source, pathname, search)

    runs.register(app, source)
    job.register(app, source, refresh_ms)
    kernel.register(app, source)
    app.server.config["KERNELCODE_SOURCE"] = source
    return app
