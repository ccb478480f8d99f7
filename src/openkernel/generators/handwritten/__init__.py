"""The offline generator's template library: real, parametrised kernels.

Each template is a ``Template`` (base.py): it matches a task, renders a full candidate module
for a dict of tunables, and mutates / recombines those tunables. The first three match the
probe's list of aten ops plus the reference's syntax tree; the traced ones (traced.py) are
written from the probe's graph of aten ops (graph.py, plan.py and the kernel writers).
"""

from openkernel.generators.family import Match, Template, Tunable
from openkernel.generators.handwritten.elementwise import Elementwise
from openkernel.generators.handwritten.matmul import MatmulEpilogue
from openkernel.generators.handwritten.softmax import RowSoftmax
from openkernel.generators.compiler.families import FusedMatmul, FusedPointwise, FusedReduction

# The list-matched templates first (tuned for their one op; the elementwise one has CUDA C++),
# then the ones written from the traced graph, which cover what the others do not.
TEMPLATES: tuple[Template, ...] = (Elementwise(), RowSoftmax(), MatmulEpilogue(),
                                   FusedPointwise(), FusedReduction(), FusedMatmul())

__all__ = ["TEMPLATES", "Match", "Template", "Tunable"]
