"""A forward replayed as a CUDA graph: the tunable ``CUDA_GRAPH`` and the code it writes.

Where launch overhead can matter (a call's work is small beside what its launches cost), a
candidate's forward may capture its kernels into a ``torch.cuda.CUDAGraph`` on the first call
for an input signature (each input's shape, strides, dtype and device, and where the module's
parameters and buffers live), then copy each call's inputs into the graph's static buffers and
replay it. What the written module does, and why:

* warm-up: the first call of a signature runs the kernels once eagerly on the caller's stream,
  so Triton compiles outside the capture, then captures them on the process's capture stream
  of the device (one for every module) and replays. torch's examples warm up on the capture
  stream instead, so that state made lazily per stream exists before the capture; here the
  only such state is a library call's cuBLAS workspace, and launches on a stream the caller
  does not time would read as hidden work to the evaluator;
* cuBLAS workspace: PyTorch keeps one per stream and hands it to every later call there, a
  capture included, which bakes its address into the graph. So every capture is made between
  two clearings of PyTorch's workspaces, as torch.compile's CUDA-graph trees make theirs: the
  capture's own workspace comes from its graph's pool and no later capture is handed it. Else
  graphs of other instances share the first capture's workspace: it pins that instance's
  pool after the instance is gone (memory), and PyTorch versions that clear a stream's
  workspace when a graph on it is destroyed leave the others replaying into freed memory
  (pytorch/pytorch#193402: wrong outputs or an illegal address, blamed on the candidate). The
  clearing is process-wide: a cuBLAS call of another thread at that moment may lose its
  workspace to the allocator, but only a sweep's first calls, whose outputs are dropped, run
  beside a capture;
* outputs: a replay overwrites the graph's static outputs, so each call returns clones (one
  copy an output); a caller holding an earlier output never sees it change, and the copies are
  timed with the rest;
* weights: the graph reads the parameters and buffers where they live, so ``load_state_dict``
  (an in-place copy) is seen by the next replay; a module whose tensors moved captures anew;
* a new signature (held-out sizes) captures a new graph; at most ``_GRAPHS`` are kept, the
  least recently used one dropped;
* memory: every graph of a model instance captures into one pool, so a new signature's graph
  reuses what earlier captures freed (their intermediates) instead of a pool of its own each
  (level3/4 LeNet5 on the H200: the graphed candidate's worker at 4.3x the problem's footprint,
  the others 3.1-3.3x). That is safe because each replay is whole in itself: its inputs are
  copied into buffers made outside the pool, every intermediate is written before it is read,
  and its outputs are cloned at once, so another graph's replay writing over the same memory in
  between leaves nothing stale (a graph's cuBLAS workspace is such scratch too). The pool is
  the instance's, not the module's: PyTorch's allocator cannot capture into a pool whose
  graphs are all gone while a block of it lives on, and asserts; a second instance made after
  the first was freed met that on the H200 when a cuBLAS workspace outlived the captures
  (level3/4 LeNet5, kb22-s27-b). The warm-up's own memory goes back to the GPU before a capture
  (not held beside the graph's); captures take turns (one capture stream per device for the
  process, whatever module or thread calls);
* on the CPU, under the Triton interpreter, with autograd recording, or inside another capture:
  the plain eager forward.

The tunable is offered only where a call's work is small beside its launches (:func:`offered`),
so timing decides between the two forwards; under the interpreter it is pinned to 0 (there is
no graph to replay).
"""

from __future__ import annotations

from openkernel.generators.family import Tunable
from openkernel.records import TaskProbe

CUDA_GRAPH = Tunable("CUDA_GRAPH", (0, 1), (0,), "1: on a GPU the forward is captured as a CUDA "
                     "graph per input signature and replayed (inputs copied into its buffers, "
                     "outputs cloned); 0: the kernels are launched one by one")

# Work one launch's cost hides, on an H200: a Triton launch costs ~10-20 us of host time, in
# which HBM moves ~32 MiB and the SMs do ~1 GFLOP of fp32.
LAUNCH_BYTES = 32 << 20
LAUNCH_FLOPS = 1e9

REPLAY = '''
import sys
import threading
import types

_GRAPHS = 4  # input signatures whose CUDA graphs are kept (the least recently used one goes)
# One capture stream per device for every module of the process, and one capture at a time on
# it (a sweep imports a module per combination); each capture between two clearings of the
# cuBLAS workspaces, which PyTorch keeps per stream (32 MiB each on a Hopper GPU).
_SHARED = sys.modules.setdefault("_openkernel_capture", types.ModuleType("_openkernel_capture"))
_CAPTURE_STREAMS = _SHARED.__dict__.setdefault("streams", {})  # device -> its capture stream
_CAPTURING = _SHARED.__dict__.setdefault("lock", threading.Lock())


def _replayed(module, kernels, inputs):
    """``kernels(*inputs)`` replayed from a CUDA graph of its launches (captured on the first call
    of the inputs' signature), the outputs cloned; eager where no graph can be replayed."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    if (not tensors or not all(t.is_cuda for t in tensors)
            or os.environ.get("TRITON_INTERPRET") == "1"
            or torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
            or torch.cuda.is_current_stream_capturing()):
        return kernels(*inputs)
    state = [*module.parameters(), *module.buffers()]  # read in place by the graph
    key = (tuple((tuple(t.shape), t.stride(), t.dtype, t.device) if isinstance(t, torch.Tensor)
                 else repr(t) for t in inputs), tuple(t.data_ptr() for t in state))
    graphs = module.__dict__.setdefault("_cuda_graphs", {})
    entry = graphs.pop(key, None)
    if entry is None:
        while len(graphs) >= _GRAPHS:
            graphs.pop(next(iter(graphs)))
        entry = _capture(module, kernels, inputs, tensors[0].device)
    graphs[key] = entry  # the most recently used last
    graph, static_inputs, static_outputs = entry
    for buffer, t in zip(static_inputs, inputs):
        if isinstance(t, torch.Tensor):
            buffer.copy_(t)
    graph.replay()
    return _cloned(static_outputs)  # the next replay overwrites the static outputs


def _capture(module, kernels, inputs, device):
    """Warm up on the caller's stream (Triton compiles there, never inside a capture), then
    capture the launches on the capture stream of the inputs' device, into the pool the
    module's graphs share there (replayed one at a time, each whole)."""
    with torch.cuda.device(device):
        static_inputs = [torch.empty_like(t).copy_(t) if isinstance(t, torch.Tensor) else t
                         for t in inputs]
        kernels(*static_inputs)
        with _CAPTURING:
            torch._C._cuda_clearCublasWorkspaces()  # this capture's is made in its graph's pool
            torch.cuda.empty_cache()  # the warm-up's memory: not held beside the graph's
            graph = torch.cuda.CUDAGraph()
            if device not in _CAPTURE_STREAMS:
                _CAPTURE_STREAMS[device] = torch.cuda.Stream(device)
            pools = module.__dict__.setdefault("_cuda_pools", {})
            if device not in pools:
                pools[device] = torch.cuda.graph_pool_handle()
            try:
                with torch.cuda.graph(graph, pool=pools[device], stream=_CAPTURE_STREAMS[device],
                                      capture_error_mode="thread_local"):
                    static_outputs = kernels(*static_inputs)
            finally:
                torch._C._cuda_clearCublasWorkspaces()  # ...and handed to no later capture
    return graph, static_inputs, static_outputs


def _cloned(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_cloned(o) for o in out)
    return out
'''

FORWARD = ['    def forward(self, *inputs):',
           '        """The kernels (_kernels) replayed from a CUDA graph on a GPU (_replayed)."""',
           '        return _replayed(self, self._kernels, inputs)', '']

NOTE = "; on a GPU replayed as a CUDA graph per input signature (inputs copied in, outputs cloned)"


def offered(probe: TaskProbe | None, launches: int) -> bool:
    """Whether launch overhead can matter for a forward of ``launches`` kernels and library
    calls: the reference's work per call (the probe's bytes moved and FLOPs) is at most what
    that many launches' cost hides (``LAUNCH_BYTES``, ``LAUNCH_FLOPS`` each)."""
    if probe is None or probe.bytes_moved <= 0 or launches < 1:
        return False
    return probe.bytes_moved <= launches * LAUNCH_BYTES and probe.flops <= launches * LAUNCH_FLOPS


def graphed(lines: list[str], forward: str = "    def forward(") -> list[str]:
    """A ModelNew's lines with its forward renamed ``_kernels`` and a replaying forward before
    it (the module must also hold :data:`REPLAY` and import ``os``)."""
    out = []
    for line in lines:
        if line.startswith(forward):
            out += FORWARD + [line.replace("def forward(", "def _kernels(", 1)]
        else:
            out.append(line)
    return out
