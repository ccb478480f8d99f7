"""``kernel-code [TASK_OR_CONFIG] [--set k=v ...]``: open the app and start the search."""

from __future__ import annotations

import argparse
import os
import sys

from kernelcode import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernel-code",
        description="Run a kernel search live in the terminal. With no argument it runs the "
                    "shipped example (offline generator; Triton under its interpreter without "
                    "a GPU).")
    parser.add_argument("target", nargs="?", metavar="TASK_OR_CONFIG",
                        help="a task file or folder, or a run config YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config key (repeatable), "
                        "e.g. --set max_iters=3 --set paths.kernels_db_path=runs/k.sqlite3")
    parser.add_argument("--version", action="version", version=f"kernel-code {__version__}")
    return parser


def not_a_terminal() -> str:
    """Why the app cannot draw here (empty when it can): it needs a terminal on stdin, stdout
    and stderr (Textual reads keys from stdin, draws on stderr and sizes from stdout). Piped
    (``| tee log``), the first frame came at the terminal's size and the rest at 80x24."""
    streams = {"input": sys.stdin, "output": sys.stdout, "error output": sys.stderr}
    off = [name for name, stream in streams.items() if not (stream and stream.isatty())]
    if not off:
        return ""
    names = off[0] if len(off) == 1 else ", ".join(off[:-1]) + " and " + off[-1]
    return (f"its {names} {'is' if len(off) == 1 else 'are'} not a terminal "
            "(piped to tee, or redirected to a file?). kernel-code draws a full-screen app: "
            "run it in a terminal without the pipe, or use `openkernel run` for a plain log "
            "that can be piped.")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kernel-code`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    not_tty = not_a_terminal()
    if not_tty:
        print(f"kernel-code: {not_tty}", file=sys.stderr)
        return 2
    # litellm fetches a price map at import unless told not to; a terminal app must not wait on it.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from kernelcode.tui.app import create_app

    app = create_app(args.target, args.overrides)
    app.run()
    # Bad input was shown in the app; the exit status still says so for scripts (2, as the
    # openkernel CLI does for an OpenKernelError).
    if app.state.phase == "error":
        from openkernel.redaction import redact

        print(f"kernel-code: {redact(app.state.error)}", file=sys.stderr)
        return 2
    return 1 if app.state.phase == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
