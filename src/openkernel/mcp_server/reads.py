"""Reads of the MCP server's database: a stored job, a kernel by id or prefix, a job's kernels,
the best kernel, every job. A mixin of ``jobs.Jobs`` (which holds ``store`` and ``db``); each
miss is an ``OpenKernelError`` that names the database.
"""

from __future__ import annotations

from sqlalchemy import select

from openkernel.errors import OpenKernelError
from openkernel.mcp_server.answers import JobRow, KernelInfo, RunList
from openkernel.store import Kernel, Store


class Reads:
    store: Store
    db: str  # the database as answers name it

    def _stored_job(self, job: str, task: str | None) -> dict:
        rows = [r for r in self.store.list_jobs(job)
                if r["job_name"] == job and (task is None or r["task_name"] == task)]
        if not rows:
            raise OpenKernelError(f"no job {job!r}{f' of task {task!r}' if task else ''} in "
                                  f"{self.db} (list_runs lists them)")
        if len(rows) > 1:
            tasks = ", ".join(sorted(r["task_name"] for r in rows))
            raise OpenKernelError(f"job {job} exists for several tasks ({tasks}): name the task")
        return rows[0]

    def kernel(self, id_or_prefix: str) -> Kernel:
        """A stored kernel by its id or a unique prefix of it."""
        prefix = id_or_prefix.strip()
        if not prefix:
            raise OpenKernelError("no kernel id given")
        row = self.store.get_kernel(prefix)
        if row is not None:
            return row
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self.store.session() as s:
            rows = list(s.scalars(select(Kernel).where(Kernel.id.like(f"{escaped}%", escape="\\"))
                                  .limit(5)))
        if not rows:
            raise OpenKernelError(f"no kernel with id or prefix {prefix!r} in {self.db}")
        if len(rows) > 1:
            raise OpenKernelError(f"prefix {prefix!r} fits several kernels "
                                  f"({', '.join(r.id for r in rows)}...): give more of the id")
        return rows[0]

    def job_kernels(self, task: str, job: str) -> list[Kernel]:
        rows = self.store.job_kernels(task, job)
        if not rows:
            raise OpenKernelError(f"no kernels of job {job!r} of task {task!r} in {self.db}")
        return rows

    def best(self, task: str, job: str | None) -> KernelInfo:
        if job is None:
            row = self.store.best_kernel(task)
            where = f"task {task!r}"
        else:
            found = self._stored_job(job, task)
            row = self.store.get_kernel(found["best_id"]) if found["best_id"] else None
            where = f"job {job} of task {task!r}"
        if row is None:
            raise OpenKernelError(f"no correct kernel stored for {where} in {self.db}")
        return KernelInfo.of(row, self.db)

    def runs(self, search: str = "") -> RunList:
        rows = self.store.list_jobs(search)
        return RunList(database=self.db, jobs=[JobRow(
            task=r["task_name"], job=r["job_name"], state=r["state"],
            candidates=r["candidates"],
            best_speedup=r["best_speedup"] if r["best_speedup"] > 0 else None,
            best_label=r["best_label"] or "", best_kernel_id=r["best_id"],
            hardware=r["hardware"], last_activity=r["last"]) for r in rows])
