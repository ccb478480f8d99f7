"""The MCP server: openkernel's tools and resources on the official SDK (``mcp``).

Each tool is a thin call into ``jobs.Jobs``; bad input (an unknown task or job, a bad config
key, code that does not parse) comes back as a tool error with one message, and the server
keeps serving. Blocking tools run in the SDK's worker threads, so a long evaluation never
holds up another call.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal

from openkernel.errors import OpenKernelError
from openkernel.mcp_server.answers import JobStatus, KernelInfo, RunList, Verdict  # noqa: F401 (tool schemas)
from openkernel.mcp_server.jobs import Jobs
from openkernel.mcp_server.location import DatabaseLocation

INSTRUCTIONS = """openkernel searches for faster GPU kernels (Triton or CUDA C++) for a reference
PyTorch module and proves them correct. A task is a KernelBench-format file or a task folder
(reference.py). A kernel is a whole Python module defining `ModelNew` (same interface as the
reference's `Model`). Judge one with `evaluate`; run a search with `start_search`, follow it
with `search_status`, read its best with `best_kernel`; add your own kernel to a job with
`submit` (it is judged like the search's own candidates and can become a parent of later
ones). Every answer names the results database it used."""


def _errors(fn):
    """Bad input as the SDK's tool error: one message for the agent, no traceback."""
    import functools

    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OpenKernelError as err:
            raise ToolError(str(err)) from None

    return wrapped


def build(jobs: Jobs):
    """The MCPServer with every tool and resource, bound to ``jobs``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError

    import openkernel

    server = MCPServer("openkernel", instructions=INSTRUCTIONS, version=openkernel.__version__,
                       log_level="WARNING")

    def tool(fn):
        return server.tool()(_errors(fn))

    @tool
    def evaluate(task: str, code: str, backend: Literal["triton", "cuda"] = "triton",
                 config: dict[str, Any] | None = None) -> Verdict:
        """Judge one kernel with the full evaluator and return its verdict.

        The code is built and run only in a confined worker process (never in this server):
        correctness on fresh random inputs and held-out shapes, integrity checks, timed
        trials against the reference (eager PyTorch) and torch.compile, and a profile on a
        GPU. Nothing is stored as a candidate; use `submit` to add a kernel to a job.

        Args:
            task: A task folder or KernelBench-format file (absolute, or relative to the
                server's working directory), e.g. "examples/gelu".
            code: The whole kernel module: imports, kernels, and `class ModelNew(nn.Module)`
                with the reference Model's interface.
            backend: "triton" (a Python module with Triton kernels) or "cuda" (CUDA C++
                through torch.utils.cpp_extension).
            config: Optional config keys, e.g. {"eval_config": {"correctness_seeds": 1}}.
        """
        return jobs.evaluate(task, code, backend, config or {})

    @tool
    def start_search(task: str, job: str | None = None,
                     config: dict[str, Any] | None = None) -> JobStatus:
        """Start an evolutionary search for a faster kernel; it runs in the background.

        Returns at once with the job's status; poll `search_status(job)` until its state is
        completed, stopped or failed, then read `best_kernel(task, job)`. A job name that is
        already stored resumes that job where it stopped.

        Args:
            task: A task folder or KernelBench-format file, e.g. "examples/softmax".
            job: The job's name (default mcp-<timestamp>).
            config: Config keys as a dict, dotted or nested: {"max_iters": 2,
                "branches_per_iteration": 2, "inference": [{"model": "openai/gpt-4.1"}]}.
                Unknown keys are an error. Without `inference` the offline generator runs.
        """
        return jobs.start_search(task, job, config or {})

    @tool
    def search_status(job: str, task: str | None = None) -> JobStatus:
        """How far a job (or a bench suite) got: state, iteration, candidates judged, best
        speedup and kernel, and the latest verdicts and warnings.

        Args:
            job: The job's name (as start_search returned it, or from list_runs).
            task: The task name, only needed when several tasks have a job of this name.
        """
        return jobs.status(job, task)

    @tool
    def stop_search(job: str, task: str | None = None) -> JobStatus:
        """Stop a search (or suite) this server runs: candidates in flight finish and are
        stored, no new one starts.

        Args:
            job: The job's name.
            task: The task name, only needed when several tasks have a job of this name.
        """
        return jobs.stop(job, task)

    @tool
    def best_kernel(task: str, job: str | None = None) -> KernelInfo:
        """The best correct kernel stored for a task (or for one of its jobs), with its code,
        speedups and evaluation log.

        Args:
            task: The task name (e.g. "gelu"; list_runs shows them).
            job: Only this job's best.
        """
        return jobs.best(task, job)

    @tool
    def show_kernel(kernel: str) -> KernelInfo:
        """One stored kernel by its id or a unique prefix of it: label, author, parent,
        status, speedups, code and evaluation log.

        Args:
            kernel: The kernel's id (12 hex digits) or a prefix that fits only it.
        """
        return KernelInfo.of(jobs.kernel(kernel), jobs.db)

    @tool
    def list_runs(search: str = "") -> RunList:
        """Every job in the database, live ones first: task, job, state, candidates, best.

        Args:
            search: Only jobs whose task or job name contains this (case-insensitive).
        """
        return jobs.runs(search)

    @tool
    def bench(paths: list[str], name: str | None = None,
              config: dict[str, Any] | None = None) -> JobStatus:
        """Run a suite of problems (e.g. a KernelBench level folder) in the background, one
        job each, all named after the suite; follow it with search_status(name). Running the
        same name again resumes it.

        Args:
            paths: Folders of KernelBench-format files, task folders, or files.
            name: The suite's name (default bench-<timestamp>).
            config: Config keys for every problem, as for start_search.
        """
        return jobs.bench(paths, name, config or {})

    @tool
    def submit(job: str, code: str, parent: str | None = None, author: str = "agent:mcp",
               description: str = "", task: str | None = None) -> KernelInfo:
        """Add your kernel to a job as a candidate. It is judged by the same pipeline as the
        search's own candidates, stored with its author and parent under a label u<N>, drawn
        in the job's graph, and can become a parent or an inspiration of later candidates.

        Only a job this server is running takes it, between candidates. A finished job
        refuses it: judge the kernel alone with evaluate, or resume the job with start_search
        (same task and job name, a higher max_iters) and submit while it runs.

        Args:
            job: The job's name.
            code: The whole kernel module (`class ModelNew`).
            parent: The job's kernel you started from: its id or a unique prefix.
            author: "agent:<your name>" (e.g. "agent:claude-code"), or "user" when a person
                wrote it.
            description: One line: what this kernel tries.
            task: The task name, only needed when several tasks have a job of this name.

        Returns the stored kernel with its verdict, once judged (a running job judges it as
        soon as a worker is free).
        """
        return jobs.submit(job, task, code, parent, author, description)

    def _kernel_text(kernel_id: str, field: str) -> str:
        try:
            return getattr(jobs.kernel(kernel_id), field) or ""
        except OpenKernelError as err:
            raise ResourceError(str(err)) from None

    @server.resource("openkernel://kernels/{kernel_id}/code", mime_type="text/x-python")
    def kernel_code(kernel_id: str) -> str:
        """A stored kernel's code (its id or a unique prefix)."""
        return _kernel_text(kernel_id, "code")

    @server.resource("openkernel://kernels/{kernel_id}/log", mime_type="text/plain")
    def kernel_log(kernel_id: str) -> str:
        """A stored kernel's evaluation log."""
        return _kernel_text(kernel_id, "eval_log")

    @server.resource("openkernel://jobs/{task}/{job}/kernels", mime_type="application/json")
    def job_kernels(task: str, job: str) -> str:
        """Every kernel of a job: id, label, author, parent, status, speedup, description."""
        try:
            rows = jobs.job_kernels(task, job)
        except OpenKernelError as err:
            raise ResourceError(str(err)) from None
        return json.dumps({"database": jobs.db, "kernels": [
            {"id": r.id, "label": r.label, "author": r.author or "", "parent_id": r.parent_id,
             "status": r.status, "speedup": r.runtime_improvement if r.runtime_improvement > 0
             else None, "description": r.description} for r in rows]}, indent=1)

    return server


def serve(location: DatabaseLocation, http_port: int | None = None) -> int:
    """Run the server on stdio (what editors launch) or streamable HTTP on 127.0.0.1."""
    jobs = Jobs(location)
    where = (f"http://127.0.0.1:{http_port}/mcp" if http_port is not None else "stdio")
    print(f"openkernel mcp: serving on {where}; database {location.shown} (from "
          f"{location.source})", file=sys.stderr, flush=True)
    server = build(jobs)
    try:
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host="127.0.0.1", port=http_port)
    except KeyboardInterrupt:
        pass
    finally:
        jobs.close()
    return 0
