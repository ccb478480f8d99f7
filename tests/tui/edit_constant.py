"""A scripted $EDITOR for the kernel-code tests: halves the kernel's block size in place.

``EDIT_MODE=unchanged`` leaves the file as it is; ``EDIT_MODE=fail`` exits 1 (an editor that
gave up); otherwise the number given as ``BLOCK=`` is halved everywhere it appears (the grid
too), and a file without one exits 3.
"""

import os
import re
import sys
from pathlib import Path

path = Path(sys.argv[-1])
mode = os.environ.get("EDIT_MODE", "")
if mode == "fail":
    sys.exit(1)
if mode != "unchanged":
    code = path.read_text()
    found = re.search(r"\bBLOCK\s*=\s*(\d+)", code)
    if found is None:
        sys.exit(3)
    path.write_text(code.replace(found.group(1), str(int(found.group(1)) // 2)))
