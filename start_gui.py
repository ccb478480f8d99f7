"""Serve the results browser from a clone: the same as ``kernelfoundry-gui`` (same options)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))  # a clone that was not installed

from kernelcode.dashboard.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
