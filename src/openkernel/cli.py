"""`openkernel`: run a search, evaluate one kernel, list runs, show a stored kernel or a job's
archive, export, move or upgrade a database."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from openkernel.errors import OpenKernelError
from openkernel.redaction import redact

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


# One wording for every command's --set (issue 58: bench --help had no text for it)
SET_HELP = ("a config key, dotted for nested ones, e.g. max_iters=3 or "
            "eval_config.profile=false (YAML values; repeat --set for more; the keys: the "
            "README's Configuration section)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="openkernel", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="search for a faster kernel")
    run.add_argument("target", nargs="?", help="task file/folder or run config YAML "
                     "(default: configs/default.yaml)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help=SET_HELP)
    run.add_argument("--fresh-baselines", action="store_true", help="time the reference again "
                     "(and capture Inductor's code for it again) even when its timings are "
                     "stored for this task, hardware and software")

    ev = sub.add_parser("eval", help="evaluate one hand-written candidate")
    ev.add_argument("task", help="task file or folder")
    ev.add_argument("candidate", help="a Python file defining ModelNew")
    ev.add_argument("--json", action="store_true", help="print the EvalResult as JSON")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help=SET_HELP)

    runs = sub.add_parser("runs", help="list tasks and jobs in the database (tab-separated "
                          "when piped)")
    runs.add_argument("--db", default=None, help="database: file or postgresql:// URL (default runs/kernels.sqlite3)")
    runs.add_argument("--search", default="", help="only jobs whose task or job name holds this")

    show = sub.add_parser("show", help="print one stored kernel: every field")
    show.add_argument("kernel_id", help="its id, or the start of it (unique in the database)")
    show.add_argument("--db", default=None)
    show.add_argument("--json", action="store_true", help="every field as one JSON object")
    show.add_argument("--field", default=None, metavar="NAME",
                      help="print one field alone (e.g. code, prompt, answer, metadata)")

    archive = sub.add_parser("archive", help="a job's MAP-Elites archive: the cells its "
                             "candidates filled and each cell's best (elite)")
    archive.add_argument("job", nargs="?", default=None, help="the job (default: the most "
                         "recently active one)")
    archive.add_argument("--task", default=None, help="the task, where two tasks have the job")
    archive.add_argument("--db", default=None, help="database: file or postgresql:// URL "
                         "(default runs/kernels.sqlite3)")

    export = sub.add_parser("export", help="write traces or fine-tuning pairs from a database")
    what = export.add_subparsers(dest="what", required=True)
    traces = what.add_parser("traces", help="the trace dataset (Parquet), one file per job")
    traces.add_argument("--db", default=None, help="database: file or postgresql:// URL (default runs/kernels.sqlite3)")
    traces.add_argument("--out", required=True, help="folder of the dataset")
    traces.add_argument("--task", default=None, help="only this task")
    traces.add_argument("--job", default=None, help="only this job")
    sft = what.add_parser("sft", help="(prompt, answer) pairs of the best correct candidates")
    sft.add_argument("--top", type=float, default=0.1,
                     help="share of each task's correct candidates, best first (default 0.1)")
    sft.add_argument("--out", required=True, help="JSONL file to write")
    sft.add_argument("--db", default=None, help="database: file or postgresql:// URL (default runs/kernels.sqlite3)")
    sft.add_argument("--traces", default=None, help="read a trace dataset folder instead")
    sft.add_argument("--min-speedup", type=float, default=None, metavar="X",
                     help="leave out kernels slower than X times the reference (1: only those "
                     "at least as fast); each pair says whether it is slower than the reference")

    bench = sub.add_parser("bench", help="run a suite of problems (e.g. a KernelBench level "
                           "folder), one job each; resumable by --name")
    bench.add_argument("paths", nargs="+", metavar="PATH", help="a folder of KernelBench-format "
                       "files, a task folder, or a file")
    bench.add_argument("--name", default=None, help="the suite's name, also each problem's job "
                       "name; run again with the same name to resume (default bench-<timestamp>)")
    bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help=SET_HELP + "; every problem of the suite takes it")
    bench.add_argument("--json", dest="json_path", default=None, metavar="FILE",
                       help="write the table and figures as JSON")
    bench.add_argument("--retry-failed", action="store_true", help="on a resumed suite, run "
                       "again the problems that failed or timed out (by default only unfinished "
                       "ones run)")
    bench.add_argument("--problem-timeout", type=float, default=None, metavar="S",
                       help="end a problem still running after S seconds (what it judged stays "
                       "stored; it is marked timed out) and go on with the next")
    bench.add_argument("--fresh-baselines", action="store_true", help="time every reference "
                       "again (and capture Inductor's code for it again) even when its timings "
                       "are stored for this task, hardware and software")

    db = sub.add_parser("db", help="the results database: copy it, upgrade its tables, describe it")
    dbs = db.add_subparsers(dest="db_command", required=True)
    copy = dbs.add_parser("copy", help="copy a database between SQLite and PostgreSQL (either "
                          "way), resumably, and verify the copy")
    copy.add_argument("source", help="file or postgresql:// URL (migrated first)")
    copy.add_argument("destination", help="file (made if missing) or postgresql:// URL")
    copy.add_argument("--append", action="store_true", help="add to a destination that holds "
                      "rows not from the source")
    copy.add_argument("--batch", type=int, default=500, help="rows read and written at a time")
    for name, text in (("upgrade", "migrate the tables to this openkernel's (as an engine does "
                        "when it opens the database)"),
                       ("info", "where the database is, its schema revision and its row counts")):
        cmd = dbs.add_parser(name, help=text)
        cmd.add_argument("--db", default=None, help="database: file or postgresql:// URL "
                         "(default runs/kernels.sqlite3)")
    mcp = sub.add_parser("mcp", help="serve openkernel's tools to coding agents (Model Context "
                         "Protocol): stdio, or streamable HTTP on 127.0.0.1")
    mcp.add_argument("--db", default=None, help="results database: file or postgresql:// URL "
                     "(default: $OPENKERNEL_DB, else kernels.sqlite3 in the user data directory)")
    mcp.add_argument("--http", type=int, default=None, metavar="PORT",
                     help="serve streamable HTTP on http://127.0.0.1:PORT/mcp instead of stdio")
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, its flags that stand for config keys added to ``--set``."""
    args = _parser().parse_args(argv)
    if getattr(args, "fresh_baselines", False):
        args.overrides.append("eval_config.fresh_baselines=true")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return {"run": cmd_run, "eval": cmd_eval, "runs": cmd_runs, "show": cmd_show,
                "archive": cmd_archive, "export": cmd_export,
                "bench": cmd_bench, "db": cmd_db, "mcp": cmd_mcp}[args.command](args)
    except OpenKernelError as err:
        err_console.print("[bold red]error:[/] ", end="", highlight=False)
        # "[postgres]" is not markup; a provider may have echoed a key into the message
        err_console.print(redact(str(err)), highlight=False, markup=False)
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted: every candidate judged so far is stored")
        return 130
    except BrokenPipeError:  # `openkernel show ID | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def cmd_run(args) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    import openkernel
    from openkernel import events as ev
    from openkernel.records import device_words
    from openkernel.wording import speedup_text

    finished = started = None
    # Shown from the run's start only: a run refused its input prints its one error line alone.
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console,
                        transient=False)
    bar = None
    try:
        for event in openkernel.optimize(args.target, overrides=args.overrides):
            if isinstance(event, ev.RunStarted):
                started = event
                progress.start()
                total = event.max_iters * event.branches_per_iteration
                bar = progress.add_task(f"{event.task_name}/{event.job_name}", total=total,
                                        best="best: -",
                                        completed=min(event.resumed_candidates, total))
                generator = ("offline templates" if event.generator == "offline"
                             else f"model{'s' if len(event.models) > 1 else ''}: "
                                  f"{', '.join(event.models)}")
                progress.console.print(f"{device_words(event.hardware, event.backend)} | "
                                       f"{event.backend} | {generator} | db: {event.db_path}",
                                       highlight=False)
            elif isinstance(event, ev.CandidateEvaluated) and bar is not None:
                progress.update(bar, advance=1, best=f"best: {speedup_text(event.best_speedup)}")
                progress.console.print(f"  {event.label:8} {event.status.value:17} "
                                       f"{speedup_text(event.speedup):>8}  "
                                       f"{event.program.metadata.get('description', '')}",
                                       highlight=False)
            elif isinstance(event, ev.LogEmitted):
                style = {"error": "red", "warning": "yellow"}.get(event.level, "dim")
                progress.console.print(redact(event.message), style=style, highlight=False,
                                       markup=False)
            elif isinstance(event, ev.CriticDiagnosed):
                progress.console.print(f"[cyan]critic:[/] {event.text}", highlight=False)
            elif isinstance(event, ev.BudgetReached):
                progress.console.print(f"[yellow]{event.reason}[/]", highlight=False)
            elif isinstance(event, ev.RunFinished):
                finished = event
                if bar is not None:  # the bar ends at what was done (the line below says why)
                    done = progress.tasks[0].completed
                    progress.update(bar, total=done, completed=done)
    finally:
        if bar is not None:  # stopping one never started would print an empty line
            progress.stop()
    if finished is None:
        return 1
    if finished.reason == "failed":
        if started is None:  # it never started: bad input (a key, the task, the generator)
            raise OpenKernelError(finished.error or "the run could not start")
        err_console.print("[bold red]run failed:[/] ", end="", highlight=False)
        err_console.print(redact(finished.error or ""), highlight=False, markup=False)
        _print_spend(finished, why=False)
        # the models failed (a revoked key, a dead server): something to fix, as bad input is
        return 2 if finished.stopped_by == "models" else 1
    best = speedup_text(finished.best_speedup, missing="none correct")
    counted = (finished.tally.words() if finished.tally
               else _plural(finished.candidates, "candidate"))
    new = (f" ({finished.new_candidates} in this run)"
           if finished.new_candidates != finished.candidates else "")
    console.print(f"[bold]{finished.reason}[/]: {counted}{new}, "
                  f"best speedup {best} (kernel {finished.best_program_id or '-'}), database "
                  f"{finished.db_path}", highlight=False)
    if finished.ended_early and finished.candidates < finished.planned:
        console.print(f"ended at {finished.candidates} of {finished.planned} planned: "
                      f"{finished.ended_early}", highlight=False)
    _print_spend(finished)
    return 0


def _print_spend(finished, why: bool = True) -> None:
    """Why the run stopped by itself, and what its model calls used, per model."""
    from openkernel.costs import format_tokens, format_usd

    if finished.error and why:
        console.print(f"stopped because {finished.error}", highlight=False)
    spend = finished.spend
    if spend is None:
        return
    estimated = (f" ({spend.estimated_calls} calls' tokens estimated: the server sent no "
                 "usage, or its stream was cut off before it did)" if spend.estimated_calls else "")
    console.print(f"model calls: {spend.calls}, {spend.prompt_tokens:,} tokens in, "
                  f"{spend.completion_tokens:,} out, cost {spend.cost_text()}{estimated}",
                  highlight=False)
    if len(spend.models) < 2 and not spend.unpriced_calls:
        return
    table = Table("model", "calls", "tokens in", "tokens out", "cost")
    for m in spend.models:
        cost = format_usd(m.cost_usd) + (" + unknown" if m.unpriced_calls else "")
        table.add_row(m.model, str(m.calls), format_tokens(m.prompt_tokens),
                      format_tokens(m.completion_tokens), cost)
    console.print(table)


def cmd_eval(args) -> int:
    from openkernel.evaluation.host.executor import Evaluator
    from openkernel.runner import resolve_run

    candidate = Path(args.candidate)
    if not candidate.is_file():
        raise OpenKernelError(f"{candidate}: no such candidate file")
    task, config = resolve_run(args.task, args.overrides)
    evaluator = Evaluator(task, config, None)
    try:
        probe = evaluator.probe()
        if not probe.ok:
            raise OpenKernelError(probe.error)
        code = candidate.read_text(encoding="utf-8")
        if _is_template(code, candidate):
            result, _ = evaluator.evaluate_template(code, config.backend, label=candidate.name)
        else:
            result = evaluator.evaluate(code, config.backend, label=candidate.name,
                                        source_name=str(candidate))
    finally:
        evaluator.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
        return 0
    status = result.get_status()
    console.print(f"[bold]{status.value}[/]: {status.label}", highlight=False)
    if result.runtime > 0:
        from openkernel.evaluation.host.ncu import format_profile
        from openkernel.wording import speedup_text

        console.print(f"runtime {result.runtime:.4f} ms, speedup "
                      f"{speedup_text(result.runtime_improvement)}"
                      f" ({result.runtime_stats.get('n_trials', '?')} trials)", highlight=False)
        if result.profiler_data:  # Nsight Compute's, or the analytic estimate, said as one
            console.print(format_profile(result.profiler_data), highlight=False, markup=False)
    if result.eval_log:
        console.print(result.eval_log, highlight=False, markup=False)
    return 0


def _is_template(code: str, path: Path) -> bool:
    """A file declaring TEMPLATE_PARAMS is judged at every combination (README "Templated
    kernels"); a malformed declaration is reported before anything is built."""
    from openkernel.templating import TemplateError, parse

    try:
        return parse(code) is not None
    except TemplateError as err:
        raise OpenKernelError(f"{path}: bad template: {err}") from None


def _reader(db: str | None):
    """The database opened read-only: readers never write (nor migrate), so a results file in
    a read-only place, or one another user's engine writes, reads as well."""
    from openkernel.store import open_readonly

    return open_readonly(_db_path(db))


# Columns of `openkernel runs`, and which go first when a terminal is too narrow for all:
# the hardware, then the dates (the names, the state and the best always stay).
_RUNS_COLUMNS = ("task", "job", "state", "candidates", "best", "hardware", "last activity")
_RUNS_DROPPED_FIRST = ("hardware", "last activity", "candidates")


def _fit_columns(columns: tuple[str, ...], rows: list[tuple[str, ...]], width: int) -> list[str]:
    """The columns that fit ``width`` (each cell padded and bordered), dropping in order."""
    need = {c: max([len(c)] + [len(r[i]) for r in rows]) + 3 for i, c in enumerate(columns)}
    keep = list(columns)
    for name in _RUNS_DROPPED_FIRST:
        if sum(need[c] for c in keep) + 1 <= width:
            break
        keep.remove(name)
    return keep


def cmd_runs(args) -> int:
    from openkernel.store import summary
    from openkernel.wording import Tally, speedup_text

    engine = _reader(args.db)
    try:
        with engine.connect() as conn:
            rows = summary.list_jobs(conn, args.search or "", limit=None)[0]
    finally:
        engine.dispose()
    columns = _RUNS_COLUMNS

    def cells(row: dict) -> tuple[str, ...]:
        best = (f"{speedup_text(row['best_speedup'])} ({row['best_label']})"
                if row["best_speedup"] > 0 else "-")
        return (row["task_name"], row["job_name"], row["state"],
                Tally.of(row["status"]).words(noun=False), best, row["hardware"] or "-",
                row["last"])

    if not console.is_terminal:  # piped: whole names, one tab-separated line per job
        print("\t".join(columns))
        for row in rows:
            print("\t".join(cells(row)))
        return 0
    all_cells = [(*cells(r)[:-1], r["last"][:16]) for r in rows]  # to the minute on screen
    keep = _fit_columns(columns, all_cells, console.width)
    table = Table(*keep)
    for name, share in (("task", 4), ("job", 2)):  # the names you resume by: never cut
        column = table.columns[keep.index(name)]
        column.overflow = "fold"
        longest = max((len(r[f"{name}_name"]) for r in rows), default=0)
        column.min_width = min(longest, console.width // share)
    for row in all_cells:
        table.add_row(*(row[columns.index(c)] for c in keep))
    console.print(table)
    hidden = [c for c in columns if c not in keep]
    if hidden:
        console.print(f"[dim]{', '.join(hidden)} left out to fit {console.width} columns "
                      "(piped, `openkernel runs` prints every column)[/]", highlight=False)
    if not rows:
        console.print("no runs in this database yet", highlight=False)
    return 0


# Long text fields, printed last, each under its name.
_TEXT_FIELDS = ("description", "user_instructions", "prompt", "answer", "code", "eval_log",
                "generation_log", "reference_code")


def cmd_show(args) -> int:
    from openkernel.cli_reads import kernel_by_prefix
    from openkernel.db_location import shown
    from openkernel.store import open_readonly

    path = _db_path(args.db)
    engine = open_readonly(path)
    try:
        values = kernel_by_prefix(engine, args.kernel_id, shown(path))
    finally:
        engine.dispose()
    if args.field:
        if args.field not in values:
            raise OpenKernelError(f"no field {args.field!r}; fields: {', '.join(sorted(values))}")
        value = values[args.field]
        print(value if isinstance(value, str) else json.dumps(value, indent=2, default=str))
        return 0
    if args.json:
        print(json.dumps(values, indent=2, default=str))
        return 0
    for name, value in values.items():
        if name in _TEXT_FIELDS:
            continue
        shown = json.dumps(value, default=str) if isinstance(value, (dict, list)) else value
        console.print(f"[bold]{name}:[/] ", end="", highlight=False)
        console.print(str(shown), highlight=False, markup=False)  # values are not markup
    for name in _TEXT_FIELDS:
        console.print(f"\n[bold]{name}:[/]", highlight=False)
        console.print(values.get(name) or "(empty)", highlight=False, markup=False)
    return 0


def cmd_archive(args) -> int:
    from openkernel.cli_reads import find_job, job_kernels
    from openkernel.wording import speedup_text
    from openkernel.search.occupancy import grid, occupancy

    engine = _reader(args.db)
    try:
        job = find_job(engine, args.job, args.task)
        kernels = job_kernels(engine, job["task_name"], job["job_name"])
    finally:
        engine.dispose()
    cells = occupancy(kernels)
    console.print(f"[bold]{job['task_name']}/{job['job_name']}[/] ({job['state']}): "
                  f"{_plural(sum(c.tried for c in cells), 'candidate')} in "
                  f"{_plural(len(cells), 'cell')}, "
                  f"{sum(c.elite_id is not None for c in cells)} with a correct elite",
                  highlight=False)
    if not cells:
        console.print("no candidate placed yet", highlight=False)
        return 0
    kinds, tiles, at = grid(cells)
    # Transposed from the dashboard's heatmap: few kinds across, many tiles down, so it fits.
    table = Table("tile · warps", *kinds, title="archive: the elite of each cell (green: "
                  "faster than the reference; blue: correct)")
    for tile in tiles:
        out = [tile]
        for kind in kinds:
            cell = at.get((kind, tile))
            if cell is None:
                out.append("")
            elif cell.elite_id is None:
                out.append(f"[dim]none correct of {cell.tried}[/]")
            else:
                colour = "green" if cell.elite_speedup > 1 else "blue"
                out.append(f"[{colour}]{cell.elite_label} {speedup_text(cell.elite_speedup)}[/]"
                           f" [dim]best of {cell.tried}[/]")
        table.add_row(*out)
    console.print(table)
    return 0


def _write_json(path: Path, data: dict) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def _db_path(db: str | None) -> Path | str:
    """The --db file (which must exist) or URL (a postgresql:// one: reached when opened)."""
    if db and "://" in db:
        return db
    path = Path(db or "runs/kernels.sqlite3")
    if not path.is_file():
        raise OpenKernelError(f"{path}: no such database (run a search first, or pass --db)")
    return path


def cmd_export(args) -> int:
    return cmd_export_traces(args) if args.what == "traces" else cmd_export_sft(args)


def cmd_export_traces(args) -> int:
    from openkernel.export import export_traces

    written = export_traces(_db_path(args.db), args.out, task=args.task, job=args.job)
    for path, rows in written:
        console.print(f"{rows:6d} candidates  {path}", highlight=False)
    console.print(f"{sum(n for _, n in written)} candidates of {len(written)} jobs in {args.out} "
                  "(schema: README, Traces)", highlight=False)
    return 0


def cmd_export_sft(args) -> int:
    from openkernel.export import export_sft

    source = {"traces": args.traces} if args.traces else {"db": _db_path(args.db)}
    pairs = export_sft(args.out, top=args.top, min_speedup=args.min_speedup, **source)
    least = (f", at least {args.min_speedup:g}x the reference" if args.min_speedup is not None
             else "")
    console.print(f"{len(pairs)} instruction pairs (the best {args.top:.0%} of each task's "
                  f"correct model-written candidates{least}) in {args.out}", highlight=False)
    slower = sum(p["slower_than_reference"] for p in pairs)
    if slower:
        console.print(f"{slower} of them slower than the reference (slower_than_reference: "
                      "true); --min-speedup 1 leaves such kernels out", highlight=False)
    return 0


def cmd_db(args) -> int:
    """`openkernel db copy | upgrade | info`."""
    if args.db_command == "copy":
        return _db_copy(args)
    from openkernel.store import info

    if args.db_command == "upgrade":
        before, after, where = info.upgrade(_db_path(args.db))
        said = f"upgraded from {before or 'no revision'} to {after}" if before != after else \
            f"already at {after}"
        console.print(f"{where}: {said}", highlight=False)
        return 0
    about = info.describe(_db_path(args.db))
    for key, value in about.lines():
        console.print(f"[bold]{key}:[/] ", end="", highlight=False)
        console.print(value, highlight=False, markup=False)
    return 0


def _db_copy(args) -> int:
    from openkernel.store.copy import copy_database

    if args.batch < 1:
        raise OpenKernelError(f"--batch {args.batch}: give at least 1")
    try:
        report = copy_database(args.source, args.destination, append=args.append,
                               batch=args.batch, progress=lambda line: console.print(
                                   f"  {line}", highlight=False, markup=False))
    except KeyboardInterrupt:
        err_console.print("interrupted: the runs copied so far are whole in the destination; "
                          "run the same command again to resume (nothing is copied twice)")
        return 130
    console.print(f"{report.source} -> {report.destination}: {report.runs_copied} run(s) "
                  f"copied, {report.runs_there} already there", highlight=False, markup=False)
    table = Table("table", "source rows", "destination rows", "source digest",
                  "destination digest", "check")
    for c in report.checks:
        table.add_row(c.table, str(c.source_rows), str(c.destination_rows), c.source_digest,
                      c.destination_digest, "ok" if c.ok else f"{c.missing} source row(s) not there")
    width = console.width
    if not console.is_terminal:
        console.width = 160  # piped: the digests whole
    try:
        console.print(table)
    finally:
        console.width = width
    if not report.ok:
        err_console.print("[bold red]the copy differs from its source[/] (see the table): the "
                          "source was changed meanwhile, or the destination refused rows",
                          highlight=False)
        return 1
    console.print("verified: " + ("every source row is in the destination" if report.appended
                                  else "the same rows at both ends"), highlight=False)
    return 0


def cmd_bench(args) -> int:
    from datetime import datetime

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from openkernel import events as ev
    from openkernel.bench.problems import discover
    from openkernel.bench.suite import open_store, run_suite
    from openkernel.bench.summary import suite_summary
    from openkernel.search.control import RunControl

    if args.problem_timeout is not None and not args.problem_timeout > 0:
        raise OpenKernelError(f"--problem-timeout {args.problem_timeout:g}: expected a number of "
                              "seconds above 0")
    problems, skipped = discover(args.paths)
    for line in skipped:
        err_console.print(f"[yellow]skipped:[/] {line}", highlight=False)
    suite = args.name or datetime.now().strftime("bench-%Y%m%d-%H%M%S")
    store = open_store(problems, args.overrides)
    control = RunControl()
    console.print(f"suite [bold]{suite}[/]: {len(problems)} problem(s), database {store.shown}",
                  highlight=False)
    interrupted = False
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[now]}"), TimeElapsedColumn(), console=console) as progress:
        bar = progress.add_task(suite, total=len(problems), now="")

        def on_event(problem, event):
            if isinstance(event, ev.CandidateEvaluated):
                progress.update(bar, now=f"{problem.name} {event.label} {event.status.value}")
            elif isinstance(event, ev.RunStarted):
                progress.update(bar, now=f"{problem.name}: probing and building")

        try:
            for out in run_suite(problems, suite, args.overrides, store, on_event, control,
                                 retry_failed=args.retry_failed,
                                 problem_timeout=args.problem_timeout):
                progress.advance(bar)
                why = out.error or "; ".join(out.log[:1])
                # the time the table gives it (its runs', from the database): the two agree
                table = suite_summary(store.engine, suite)
                row = next((p for p in table.problems if p.name == out.problem.name), None)
                seconds = row.time_s if row is not None else out.seconds
                line = (f"  {out.problem.name:40} {out.status:10} {out.candidates:3d} judged "
                        f"{seconds:6.1f} s" + (f"  {why.splitlines()[0][:100]}" if why and out.status != "completed" else ""))
                if out.evaluator_faults:
                    line += f"  [red]{out.evaluator_faults} evaluator fault(s)[/]"
                if out.baseline_error:
                    line += f"  [yellow]{out.baseline_error[:80]}[/]"
                progress.console.print(line, highlight=False)
                if args.json_path:  # after each problem: a killed suite still leaves its table
                    _write_json(Path(args.json_path), table.to_json())
        except KeyboardInterrupt:
            control.stop()
            interrupted = True
    summary = suite_summary(store.engine, suite)
    _print_suite(summary)
    if args.json_path:
        _write_json(Path(args.json_path), summary.to_json())
        console.print(f"wrote {args.json_path}", highlight=False)
    if interrupted:
        err_console.print(f"interrupted: every candidate judged so far is stored; resume with "
                          f"--name {suite}")
        return 130
    return 0


def cmd_mcp(args) -> int:
    try:
        import mcp  # noqa: F401 - the SDK, an optional extra
    except ImportError:
        raise OpenKernelError("openkernel mcp needs the MCP SDK: pip install 'openkernel[mcp]'") from None
    from openkernel.mcp_server.location import resolve
    from openkernel.mcp_server.server import serve

    return serve(resolve(args.db), args.http)


def _ratio(value: float | None) -> str:
    from openkernel.wording import speedup_text

    return speedup_text(value)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _print_suite(summary) -> None:
    from openkernel.bench.summary import depth_text, own_split, problem_depth

    table = Table("problem", "status", "correct", "speedup", "vs compile", "vs autotune",
                  "vs cudagraphs", "eager ms", "compile ms", "autotune ms", "cudagraphs ms",
                  "by iteration", "judged", "faults", "time s",
                  "fixed s", "own s", "note", title=f"suite {summary.suite}: {summary.precision}")
    for p in summary.problems:
        note = [(p.error.splitlines() or [""])[0][:70]] if not p.correct else []
        table.add_row(p.name, p.status, "yes" if p.correct else "no", _ratio(p.speedup),
                      _ratio(p.over_compile), _ratio(p.over_autotune), _ratio(p.over_cudagraphs),
                      f"{p.eager_ms:.4g}" if p.eager_ms else "-",
                      f"{p.compile_ms:.4g}" if p.compile_ms else "-",
                      f"{p.autotune_ms:.4g}" if p.autotune_ms else "-",
                      f"{p.cudagraphs_ms:.4g}" if p.cudagraphs_ms else "-", problem_depth(p),
                      str(p.candidates),
                      str(p.evaluator_faults), f"{p.time_s:.1f}",
                      _seconds(p.fixed_s) + (" stored" if p.baselines_stored else ""),
                      _seconds(p.candidate_s),
                      "; ".join(x for x in note + [p.baseline_note, p.flagged_note] if x)
                      if not p.correct else
                      "; ".join(x for x in [
                          f"library-bound ({p.library_bound}): our own kernel"
                          if p.library_bound else p.baseline_note,
                          "replays a CUDA graph: like for like vs cudagraphs" if p.cuda_graph
                          else "", p.flagged_note] if x))
    # Piped: wide enough that no problem name is cut (a terminal shows what fits it).
    width = console.width
    if not console.is_terminal:
        console.width = 240
    try:
        console.print(table)
    finally:
        console.width = width
    fast = "  ".join(f"fast_{k} {v:.2f}" for k, v in summary.fast_p.items())
    console.print(f"{fast}  |  geomean over eager {_ratio(summary.geomean_eager)} "
                  f"({summary.n_correct} correct of {len(summary.problems)}), over torch.compile "
                  f"{_ratio(summary.geomean_compile)} ({summary.n_compile}), over max-autotune "
                  f"{_ratio(summary.geomean_autotune)} ({summary.n_autotune}), over cudagraphs "
                  f"{_ratio(summary.geomean_cudagraphs)} ({summary.n_cudagraphs})"
                  + (f"; {summary.n_cuda_graph} best kernel(s) replay a CUDA graph"
                     if summary.n_cuda_graph else ""), highlight=False)
    if summary.n_compile:
        slower = summary.n_compile - summary.n_compile_faster - summary.n_compile_tie
        console.print(f"against torch.compile, of {summary.n_compile}: {summary.n_compile_faster} "
                      f"faster, {summary.n_compile_tie} tie (the 95% interval holds 1.0), "
                      f"{slower} slower", highlight=False)
    if depth_text(summary):
        console.print(f"depth: {depth_text(summary)}", highlight=False)
    if summary.library_bound:
        console.print(f"library-bound (the reference is a lone GEMM or convolution; our own "
                      f"kernel's ratio): {len(summary.library_bound)}, geomean over torch.compile "
                      f"{_ratio(summary.geomean_compile_library_bound)}", highlight=False)
    console.print(f"fixed cost (probe and baselines) median {_seconds(summary.fixed_s_median)} s, "
                  f"a candidate's own time median {_seconds(summary.candidate_s_median)} s"
                  + (f" ({own_split(summary)})" if own_split(summary) else "")
                  + (f"; {summary.n_timed_out} problem(s) timed out" if summary.n_timed_out
                     else ""), highlight=False)
    if summary.started_anew:  # seconds more each, and hidden by spares: said, not left to find
        console.print(f"{summary.started_anew} candidate(s) judged in workers started anew, not "
                      f"forked: {summary.fork_error}", highlight=False)


if __name__ == "__main__":
    sys.exit(main())
