"""``kernelfoundry-gui``: browse a results database in the browser (read-only)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_DB = Path("runs") / "kernels.sqlite3"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="kernelfoundry-gui", description=(
        "Browse openkernel results: the generation graph of each job and every recorded field. "
        "The database is opened read-only."))
    p.add_argument("--db", default=str(DEFAULT_DB),
                   help="results database: a SQLite file (default: runs/kernels.sqlite3 relative to "
                        "the current folder) or a postgresql:// URL (read in read-only transactions)")
    p.add_argument("--port", type=int, default=8885, help="port to serve on (default 8885)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1; anything else exposes prompts and code)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Check the database, then serve until interrupted. Exit 2 on bad input, no traceback."""
    args = parse_args(argv)
    from kernelcode.dashboard.source import open_db
    from openkernel.errors import OpenKernelError
    from openkernel.db_location import shown

    try:
        open_db(args.db).dispose()  # fail now, with one clear line, not in the browser
    except OpenKernelError as err:
        print(f"kernelfoundry-gui: {err}. Pass --db PATH (or a postgresql:// URL) of an openkernel "
              "results database.", file=sys.stderr)
        return 2
    from kernelcode.dashboard.server import LOOPBACK, base_url, make_dashboard_server

    if args.host not in LOOPBACK:
        print(f"kernelfoundry-gui: warning: serving on {args.host}, not loopback: anyone who can reach "
              "this machine can read every prompt, answer and kernel in the database.", file=sys.stderr)
    try:
        server = make_dashboard_server(args.db, args.host, args.port)
    except OSError as err:
        print(f"kernelfoundry-gui: cannot listen on {args.host}:{args.port} ({err.strerror})", file=sys.stderr)
        return 2
    print(f"kernelfoundry-gui: serving {shown(args.db)} (read-only) at {base_url(server, args.host)}  (Ctrl+C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
