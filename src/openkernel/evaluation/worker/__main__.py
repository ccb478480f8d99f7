"""``python -m openkernel.evaluation.worker --fd N``: see ``main.py``."""

import sys

from openkernel.evaluation.worker.main import main

sys.exit(main())
