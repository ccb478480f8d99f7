"""The offline generator's template library: real, parametrised kernels matched by aten ops.

Each template is a ``Template`` (base.py): it matches a task from the probe's aten ops plus the
reference's syntax tree (for scalar arguments), renders a full candidate module for a dict of
tunables, and mutates / recombines those tunables.
"""

from openkernel.generators.templates.base import Match, Template, Tunable
from openkernel.generators.templates.elementwise import Elementwise
from openkernel.generators.templates.matmul import MatmulEpilogue
from openkernel.generators.templates.softmax import RowSoftmax

TEMPLATES: tuple[Template, ...] = (Elementwise(), RowSoftmax(), MatmulEpilogue())

__all__ = ["TEMPLATES", "Match", "Template", "Tunable"]
