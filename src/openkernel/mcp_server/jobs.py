"""What the MCP tools do, without the protocol: searches and suites in background threads,
evaluations of one kernel, submissions into running jobs, and reads of the database.

Each search runs ``openkernel.optimize`` in a thread of its own with its own ``RunControl``
(stop, submit); its progress is the event stream folded into a ``LiveJob``. Candidate code is
judged only by the evaluation pipeline's confined worker processes. Errors the caller can fix
are ``OpenKernelError`` with one message (the server turns them into tool errors).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections import deque
from datetime import datetime
from pathlib import Path

from openkernel import events as ev
from openkernel.config import Config
from openkernel.errors import OpenKernelError
from openkernel.mcp_server.answers import JobStatus, KernelInfo, Verdict
from openkernel.mcp_server.location import DatabaseLocation
from openkernel.mcp_server.reads import Reads
from openkernel.runner import overrides_from, resolve_run

# What a bad key's message names: the tools' `config` argument (not the CLI's --set, issue 58)
SAID_AS = "the config argument"
from openkernel.search.control import RunControl
from openkernel.search.external import Submission, check_author, check_code
from openkernel.costs import Spend
from openkernel.search.spending import stored_ledger
from openkernel.store import Store
from openkernel.wording import speedup_text

RECENT = 12  # lines of a job's latest verdicts and messages kept for its status


def spend_fields(spend: Spend) -> dict:
    """A job status's model-call figures."""
    return {"model_calls": spend.calls, "tokens": spend.tokens,
            "cost_usd": round(spend.cost_usd, 6), "cost": spend.cost_text()}


class LiveJob:
    """A search (or suite) this server runs: its control and its progress from the events."""

    def __init__(self, kind: str, task: str, job: str, database: str, max_iters: int = 0):
        self.kind, self.task, self.job, self.database = kind, task, job, database
        self.control = RunControl()
        self.state, self.error = "starting", ""
        self.iteration, self.max_iters, self.judged = -1, max_iters, 0
        self.best_speedup: float | None = None
        self.best_id: str | None = None
        self.best_label = ""
        self.recent: deque[str] = deque(maxlen=RECENT)
        self.spend = Spend()  # the job's model calls so far (ModelCalled says the totals)
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def see(self, event: ev.Event, prefix: str = "") -> None:
        """Fold one engine event into the status."""
        with self._lock:
            if isinstance(event, ev.RunStarted):
                self.state, self.max_iters = "running", event.max_iters
            elif isinstance(event, ev.IterationStarted):
                self.iteration = event.iteration
            elif isinstance(event, ev.IterationFinished) and event.judged == 0:
                self.iteration = max(event.iteration - 1, -1)  # it held nothing
            elif isinstance(event, ev.CandidateEvaluated):
                self.judged += 1
                speed = f" {speedup_text(event.speedup)}" if event.speedup > 0 else ""
                author = event.program.metadata.get("author")
                self.recent.append(f"{prefix}{event.label} {event.status.value}{speed}"
                                   + (f" (by {author})" if author else ""))
            elif isinstance(event, ev.BestImproved) and self.kind == "search":
                self.best_speedup, self.best_id = event.speedup, event.program.id
                self.best_label = event.program.label
            elif isinstance(event, ev.ModelCalled) and self.kind == "search":
                self.spend = event.spend
            elif isinstance(event, ev.LogEmitted) and event.level != "info":
                self.recent.append(f"{prefix}{event.level}: {event.message}")
            elif isinstance(event, ev.RunFinished) and self.kind == "search":
                self.state, self.error = event.reason, event.error or ""

    def fail(self, message: str) -> None:
        with self._lock:
            self.state, self.error = "failed", message

    def status(self) -> JobStatus:
        with self._lock:
            return JobStatus(database=self.database, task=self.task, job=self.job,
                             kind=self.kind, state=self.state, iteration=self.iteration,
                             max_iters=self.max_iters, judged=self.judged,
                             best_speedup=self.best_speedup, best_kernel_id=self.best_id,
                             best_label=self.best_label, recent=list(self.recent),
                             error=self.error, **spend_fields(self.spend))

    @property
    def live(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class Jobs(Reads):
    """The server's jobs and its handle on the database (``location``)."""

    def __init__(self, location: DatabaseLocation):
        self.location = location
        self.db = location.shown
        self.store = Store(location.database)
        self._live: dict[tuple[str, str], LiveJob] = {}
        self._lock = threading.Lock()
        self._evaluators: dict[tuple, object] = {}

    def close(self) -> None:
        for job in list(self._live.values()):
            job.control.stop()
        for evaluator in self._evaluators.values():
            evaluator.close()
        self.store.close()

    # -- judging one kernel --------------------------------------------------------------
    def _resolve(self, task: str, config: dict, extra: tuple[str, ...] = ()):
        return resolve_run(task, [*overrides_from(config or {}), *extra,
                                  *self.location.overrides()], said_as=SAID_AS)

    def evaluate(self, task: str, code: str, backend: str, config: dict) -> Verdict:
        from openkernel.evaluation.host.executor import Evaluator

        check_code(code)
        resolved, cfg = self._resolve(task, config, (f"backend={backend}",))
        key = (str(resolved.folder or resolved.reference_path), repr(sorted(cfg.model_dump().items())))
        with self._lock:
            evaluator = self._evaluators.get(key)
            if evaluator is None:
                evaluator = self._evaluators[key] = Evaluator(resolved, cfg, self.store)
        probe = evaluator.probe()
        if not probe.ok:
            raise OpenKernelError(probe.error)
        result = evaluator.evaluate(code, backend, label="mcp", source_name="<submitted>")
        return Verdict.of(result, self.db, evaluator.hardware.label)

    # -- searches and suites --------------------------------------------------------------
    def start_search(self, task: str, job: str | None, config: dict) -> JobStatus:
        job = job or datetime.now().strftime("mcp-%Y%m%d-%H%M%S")
        resolved, cfg = self._resolve(task, config, (f"job_name={job}",))
        live = LiveJob("search", cfg.task_name or resolved.name, job, self.db, cfg.max_iters)
        self._register(live)
        live.thread = threading.Thread(target=self._search, args=(live, resolved, cfg),
                                       name=f"search-{job}", daemon=True)
        live.thread.start()
        return live.status()

    def _register(self, live: LiveJob) -> None:
        with self._lock:
            old = self._live.get((live.task, live.job))
            if old is not None and old.live:
                raise OpenKernelError(f"job {live.job} of {live.task} is already running here: "
                                      "search_status follows it, stop_search stops it")
            self._live[(live.task, live.job)] = live

    def _search(self, live: LiveJob, task, cfg: Config) -> None:
        import openkernel

        try:
            for event in openkernel.optimize(task, cfg, control=live.control):
                live.see(event)
        except OpenKernelError as err:
            live.fail(str(err))
        except Exception as err:  # a bug: the job says so, the server keeps serving
            live.fail(f"internal error: {err!r}")
            traceback.print_exc(file=sys.stderr)

    def bench(self, paths: list[str], name: str | None, config: dict) -> JobStatus:
        from openkernel.bench.problems import discover

        problems, skipped = discover(paths)
        suite = name or datetime.now().strftime("bench-%Y%m%d-%H%M%S")
        live = LiveJob("suite", "", suite, self.db)
        live.max_iters = len(problems)
        live.recent.extend(f"skipped: {line}" for line in skipped)
        overrides = [*overrides_from(config or {}), *self.location.overrides()]
        resolve_run(problems[0].path, overrides, said_as=SAID_AS)  # said now, not in the thread
        self._register(live)
        live.thread = threading.Thread(target=self._suite, args=(live, problems, suite, overrides),
                                       name=f"suite-{suite}", daemon=True)
        live.thread.start()
        return live.status()

    def _suite(self, live: LiveJob, problems, suite: str, overrides: list[str]) -> None:
        from openkernel.bench.suite import run_suite

        live.state = "running"
        try:
            for out in run_suite(problems, suite, overrides, self.store,
                                 lambda p, e: live.see(e, f"{p.name}: "), live.control):
                live.iteration += 1
                live.recent.append(f"{out.problem.name}: {out.status}, {out.candidates} judged"
                                   + (f" ({out.error.splitlines()[0]})" if out.error else ""))
            live.state = "stopped" if live.control.stopped else "completed"
        except OpenKernelError as err:
            live.fail(str(err))
        except Exception as err:
            live.fail(f"internal error: {err!r}")
            traceback.print_exc(file=sys.stderr)

    def status(self, job: str, task: str | None = None) -> JobStatus:
        live = self._live_job(job, task)
        if live is not None:
            return live.status()
        row = self._stored_job(job, task)
        best = row["best_speedup"]
        latest = row["latest_run"]
        return JobStatus(database=self.db, task=row["task_name"], job=row["job_name"],
                         kind="search", state=row["state"], iteration=-1,
                         max_iters=int((latest.get("config") or {}).get("max_iters") or 0),
                         judged=row["candidates"], best_speedup=best if best > 0 else None,
                         best_kernel_id=row["best_id"], best_label=row["best_label"] or "",
                         recent=[], error=latest.get("error") or "",
                         **spend_fields(stored_ledger(self.store, row["task_name"],
                                                      row["job_name"]).snapshot()))

    def stop(self, job: str, task: str | None = None) -> JobStatus:
        live = self._live_job(job, task)
        if live is None or not live.live:
            state = live.state if live else self._stored_job(job, task)["state"]
            raise OpenKernelError(f"job {job} is not running in this server ({state}): "
                                  "nothing to stop")
        live.control.stop()
        if live.thread is not None:
            live.thread.join(timeout=2.0)
        status = live.status()
        if live.live:
            status.state = "stopping"
        return status

    def _live_job(self, job: str, task: str | None) -> LiveJob | None:
        with self._lock:
            found = [j for (t, name), j in self._live.items()
                     if name == job and (task is None or t == task)]
        if len(found) > 1:
            tasks = ", ".join(sorted(j.task for j in found))
            raise OpenKernelError(f"job {job} exists for several tasks ({tasks}): name the task")
        return found[0] if found else None

    # -- kernels from agents --------------------------------------------------------------
    def submit(self, job: str, task: str | None, code: str, parent: str | None, author: str,
               description: str) -> KernelInfo:
        """Judge a kernel into a job this server is running: it takes it between candidates.
        A job that is not running (finished, stopped, in another engine, unknown) refuses it
        with one message; nothing is stored."""
        check_author(author)
        check_code(code)
        live = self._live_job(job, task)
        if live is not None and live.kind == "suite" and live.live:
            raise OpenKernelError(f"{job} is a bench suite still running here: submit into one "
                                  "of its problems' jobs while it runs")
        if live is None or not live.live:
            row = self._stored_job(job, task)  # unknown: its own message
            self._parent(parent, row["task_name"], job)  # a bad parent is said first
            if row["state"] == "running":
                run = row["latest_run"]
                raise OpenKernelError(f"job {job} is running in another engine (host "
                                      f"{run.get('engine_host')}, pid {run.get('engine_pid')}): "
                                      "submit the kernel there")
            raise OpenKernelError(
                f"job {job} is {row['state']}: a kernel joins a running job only. Judge it "
                "alone with evaluate, or resume the job with start_search (same task and "
                "job, a higher max_iters) and submit while it runs")
        submission = Submission(code=code, author=author, description=description,
                                parent_id=self._parent(parent, live.task, live.job))
        pending = live.control.submit(submission)  # a run that is ending refuses it, said why
        return KernelInfo.of(self.store.get_kernel(pending.result().id), self.db)

    def _parent(self, parent: str | None, task: str, job: str) -> str | None:
        if not parent:
            return None
        row = self.kernel(parent)
        if (row.task_name, row.job_name) != (task, job):
            raise OpenKernelError(f"kernel {row.id} belongs to job {row.job_name} of "
                                  f"{row.task_name}, not to job {job}")
        return row.id
