-- A results database written by openkernel before Alembic (main at 03a9c96): one offline
-- job of examples/gelu, max_iters=1, 2 branches; sqlite3 iterdump. tests/store/test_migrations.py loads it.
BEGIN TRANSACTION;
CREATE TABLE critiques (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	task_name VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	iteration INTEGER NOT NULL, 
	text TEXT NOT NULL, 
	source VARCHAR(20) NOT NULL, 
	kernel_id VARCHAR(32), 
	label VARCHAR(40), 
	role VARCHAR(20), 
	bottleneck VARCHAR(40), 
	headroom FLOAT, 
	model VARCHAR(200), 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "critiques" VALUES(1,1,'gelu','old job',0,'Best so far i0-b0: 0.17x over the reference. Timings here are Triton-interpreter timings on the CPU: they rank candidates only roughly and say nothing about a GPU. Run on a GPU to profile.','rules','8fc5eb98f673','i0-b0','best','',NULL,'','2026-12-01 15:57:14.020813');
CREATE TABLE kernels (
	id VARCHAR(32) NOT NULL, 
	run_id INTEGER NOT NULL, 
	task_name VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	iteration INTEGER NOT NULL, 
	branch INTEGER NOT NULL, 
	label VARCHAR(40) NOT NULL, 
	parent_id VARCHAR(32), 
	inspiration_ids JSON NOT NULL, 
	is_program0 BOOLEAN NOT NULL, 
	origin VARCHAR(20) NOT NULL, 
	model VARCHAR(200) NOT NULL, 
	hardware VARCHAR(200) NOT NULL, 
	gpu_arch VARCHAR(100) NOT NULL, 
	backend VARCHAR(20) NOT NULL, 
	language VARCHAR(20) NOT NULL, 
	description TEXT NOT NULL, 
	prompt TEXT NOT NULL, 
	answer TEXT NOT NULL, 
	reference_code TEXT NOT NULL, 
	code TEXT NOT NULL, 
	user_instructions TEXT NOT NULL, 
	status VARCHAR(20) NOT NULL, 
	compiled BOOLEAN NOT NULL, 
	correctness BOOLEAN NOT NULL, 
	runtime FLOAT NOT NULL, 
	runtime_stats JSON NOT NULL, 
	runtime_improvement FLOAT NOT NULL, 
	improve_over_compile FLOAT NOT NULL, 
	perf_score INTEGER NOT NULL, 
	score FLOAT NOT NULL, 
	features JSON NOT NULL, 
	profiler_data JSON NOT NULL, 
	template_results JSON, 
	metadata JSON NOT NULL, 
	eval_log TEXT NOT NULL, 
	generation_log TEXT NOT NULL, 
	tokens_used INTEGER NOT NULL, 
	generation_s FLOAT NOT NULL, 
	evaluation_s FLOAT NOT NULL, 
	created_at DATETIME NOT NULL, 
	evaluated_at DATETIME, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "kernels" VALUES('c1094bcdf621',1,'gelu','old job',-1,0,'ref',NULL,'[]',1,'reference','','CPU (Triton interpreter)','cpu','pytorch','python','the reference (program 0)','','','import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """GELU (exact, erf form) over a large activation tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
','import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """GELU (exact, erf form) over a large activation tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
','','correct',1,1,-1.0,'{}',1.0,-1.0,3,4.0,'{}','{}','{}','{"params": {}}','The reference implementation (program 0): speedup 1.0x by definition.','',0,0.0,0.0,'2026-12-01 15:57:03.034058','2026-12-01 15:57:03.032728');
INSERT INTO "kernels" VALUES('8fc5eb98f673',1,'gelu','old job',0,0,'i0-b0','c1094bcdf621','[]',0,'offline','offline:elementwise','CPU (Triton interpreter)','cpu','triton','python','gelu elementwise, BLOCK=4096, UNROLL=1, 4 warps (curated start point); a sweep of 3: BLOCK 4096/2048, UNROLL 1/2','Offline generator (no model): template `elementwise`: one activation applied elementwise (masked tail, 64-bit offsets).
Task: gelu; backend: triton; ops: aten.gelu.default.
Why this template: the reference runs one elementwise op (aten.gelu) on one tensor.
Device: Triton interpreter (CPU), so tunables come from the CPU choices (few, large programs).
Parent: ref (c1094bcdf621), status correct, no template params (reference).
Step: curated start point.
Params: BLOCK=4096, UNROLL=1, num_warps=4.
Tunables:
  BLOCK in [1024, 2048, 4096, 8192]: elements per block (a power of two)
  UNROLL in [1, 2, 4]: consecutive blocks per program
  num_warps in [4]: warps per program
Sweep (judged together, the fastest correct one is kept): BLOCK=4096, UNROLL=1, num_warps=4; BLOCK=2048, UNROLL=1, num_warps=4; BLOCK=4096, UNROLL=2, num_warps=4.','Offline generator (no model): template `elementwise`: one activation applied elementwise (masked tail, 64-bit offsets).
Task: gelu; backend: triton; ops: aten.gelu.default.
Why this template: the reference runs one elementwise op (aten.gelu) on one tensor.
Device: Triton interpreter (CPU), so tunables come from the CPU choices (few, large programs).
Parent: ref (c1094bcdf621), status correct, no template params (reference).
Step: curated start point.
Params: BLOCK=4096, UNROLL=1, num_warps=4.
Tunables:
  BLOCK in [1024, 2048, 4096, 8192]: elements per block (a power of two)
  UNROLL in [1, 2, 4]: consecutive blocks per program
  num_warps in [4]: warps per program
Sweep (judged together, the fastest correct one is kept): BLOCK=4096, UNROLL=1, num_warps=4; BLOCK=2048, UNROLL=1, num_warps=4; BLOCK=4096, UNROLL=2, num_warps=4.

```python
import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 8192
dim = 8192

BLOCK = 4096
UNROLL = 1
NUM_WARPS = 4

@triton.jit
def _act_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    # 64-bit offsets: tensors past 2**31 elements must not wrap.
    base = tl.program_id(0).to(tl.int64) * (BLOCK * UNROLL)
    for u in tl.static_range(UNROLL):
        offs = base + u * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements  # the ragged tail of the last program
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """gelu in one Triton kernel (computes in float32, stores the input dtype)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (triton.cdiv(n, BLOCK * UNROLL),)
        _act_kernel[grid](x, y, n, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=NUM_WARPS)
        return y
```
','import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """GELU (exact, erf form) over a large activation tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
','import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 8192
dim = 8192

BLOCK = 4096
UNROLL = 2
NUM_WARPS = 4

@triton.jit
def _act_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    # 64-bit offsets: tensors past 2**31 elements must not wrap.
    base = tl.program_id(0).to(tl.int64) * (BLOCK * UNROLL)
    for u in tl.static_range(UNROLL):
        offs = base + u * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements  # the ragged tail of the last program
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """gelu in one Triton kernel (computes in float32, stores the input dtype)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (triton.cdiv(n, BLOCK * UNROLL),)
        _act_kernel[grid](x, y, n, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=NUM_WARPS)
        return y
','','correct',1,1,3.49807535003492375835e+01,'{"median": 34.98075350034924, "mean": 35.748513800717774, "std": 4.092134417121658, "min": 29.891151003539562, "max": 44.04332600097405, "cv": 0.11447005713114412, "n_trials": 10, "speedup_ci": [0.010226648795002631, 0.35582688273970414], "tie": false, "stop_reason": "decided: slower than the reference", "adaptive": true, "unit": "ms", "reference": {"median": 5.905736001295736, "mean": 5.5297532002441585, "std": 3.2531052382182626, "min": 0.25149200155283324, "max": 10.753736001788639, "cv": 0.58829121669926, "n_trials": 10}}',1.68828152922342711317e-01,-1.0,3,3.16882815292234276682e+00,'{"tile": 6, "warps": 2}','{"estimate": true, "source": "analytic (FLOPs counted from the reference''s ops, minimum bytes)", "bytes": 524288.0, "flops": 65536.0, "arithmetic_intensity": 0.125}','{"space": {"BLOCK": ["2048", "4096"], "UNROLL": ["1", "2"], "num_warps": ["4"]}, "defaults": {"BLOCK": 4096, "UNROLL": 1, "num_warps": 4}, "space_size": 4, "bound": 16, "sampled": false, "combinations": [{"params": {"BLOCK": 4096, "UNROLL": 1, "num_warps": 4}, "status": "correct", "runtime_stats": {"median": 28.368135997880017, "mean": 30.719993454113137, "std": 7.3542322054060625, "min": 20.875317000900395, "max": 42.404359999636654, "cv": 0.23939563061402266, "n_trials": 11}, "runtime": 28.368135997880017, "speedup": 0.21609290793272734, "error": ""}, {"params": {"BLOCK": 2048, "UNROLL": 1, "num_warps": 4}, "status": "correct", "runtime_stats": {"median": 32.41301299931365, "mean": 39.27641900075039, "std": 15.540779005093965, "min": 23.687379001785303, "max": 64.62209000164876, "cv": 0.39567708565276927, "n_trials": 11}, "runtime": 32.41301299931365, "speedup": 0.1891262932126298, "error": ""}, {"params": {"BLOCK": 4096, "UNROLL": 2, "num_warps": 4}, "status": "correct", "runtime_stats": {"median": 17.353533999994397, "mean": 22.310876454866957, "std": 7.13502280883364, "min": 16.513730999577092, "max": 37.680139001167845, "cv": 0.3198002025275518, "n_trials": 11}, "runtime": 17.353533999994397, "speedup": 0.35325098624954165, "error": ""}], "winner": {"BLOCK": 4096, "UNROLL": 2, "num_warps": 4}, "sweep_s": 5.58, "timing_method": "wall clock (time.perf_counter), A/B interleaved, median", "reference_stats": {"median": 6.1301530004129745, "mean": 5.821651091867931, "std": 3.7030916150947157, "min": 1.2939250009367242, "max": 15.39770000090357, "cv": 0.6360895829479442, "n_trials": 11}, "template": "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\nbatch_size = 8192\ndim = 8192\n\nBLOCK = 4096\nUNROLL = 1\nNUM_WARPS = 4\n\n@triton.jit\ndef _act_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, UNROLL: tl.constexpr):\n    # 64-bit offsets: tensors past 2**31 elements must not wrap.\n    base = tl.program_id(0).to(tl.int64) * (BLOCK * UNROLL)\n    for u in tl.static_range(UNROLL):\n        offs = base + u * BLOCK + tl.arange(0, BLOCK)\n        mask = offs < n_elements  # the ragged tail of the last program\n        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)\n        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))\n        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)\n\n\nclass ModelNew(nn.Module):\n    \"\"\"gelu in one Triton kernel (computes in float32, stores the input dtype).\"\"\"\n\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        x = x.contiguous()\n        y = torch.empty_like(x)\n        n = x.numel()\n        if n == 0:\n            return y\n        grid = (triton.cdiv(n, BLOCK * UNROLL),)\n        _act_kernel[grid](x, y, n, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=NUM_WARPS)\n        return y\n"}','{"hardware": "CPU (Triton interpreter)", "device": "cpu", "phase_reached": "benchmark", "memory": {"footprint_bytes": 524288, "plan_level": 0, "precision_set": "main"}, "integrity_checks": ["static_scan", "patched_functions", "kernel_launches", "background_thread", "lazy_output", "inputs_modified", "reference_memory_reuse", "memoization", "precision", "torch_compute", "held_out_shapes"], "heldout_ok": true, "heldout_source": "task hook", "confinement": "landlock ABI 7: read-only system/python/task paths (75 rules); read-write /tmp/pg18/scratch/w-f58e6509df86 + /dev/shm; /proc: own pid + non-process entries; TCP denied; signals/abstract sockets scoped; no_new_privs; capabilities dropped", "weights_copied": false, "timing_method": "wall clock, Triton interpreter (CPU)", "max_rel_error": 6.205895850687551e-08, "max_abs_error": 9.5367431640625e-07, "label": "i0-b0", "backend": "triton", "evaluation_s": 4.905, "phase_s": {"setup": 3.434, "build": 0.019, "warmup": 0.172, "queued": 0.0, "test": 0.617, "benchmark": 0.663}, "gpu_slot": null, "prestarted": false, "worker": {"preload_s": 3.307, "idle_s": 0.0}, "template": {"params": {"BLOCK": 4096, "UNROLL": 2, "num_warps": 4}, "combinations": 3, "space_size": 4, "sampled": false}, "params": {"template": "elementwise", "BLOCK": 4096, "UNROLL": 2, "num_warps": 4}, "llm": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0, "price": ""}}','Template: 3 combination(s) of 4 screened on one input set and timed together.
  BLOCK=4096, UNROLL=2, num_warps=4: 17.3535 ms, 0.35x <- winner
  BLOCK=4096, UNROLL=1, num_warps=4: 28.3681 ms, 0.22x
  BLOCK=2048, UNROLL=1, num_warps=4: 32.4130 ms, 0.19x
The winner (BLOCK=4096, UNROLL=2, num_warps=4) had the full checks:
precision check against float64 on the main input set: passed
correct on 3 seed(s), in-place rewritten inputs and 2 held-out input set(s) (task hook)
runtime 34.9808 ms (median of 10, CV 11.45%), reference 5.9057 ms: 0.17x (wall clock, Triton interpreter (CPU)); speedup 95% interval 0.010-0.356x; timing stopped: decided: slower than the reference
sandbox: landlock ABI 7: read-only system/python/task paths (75 rules); read-write /tmp/pg18/scratch/w-f58e6509df86 + /dev/shm; /proc: own pid + non-process entries; TCP denied; signals/abstract sockets scoped; no_new_privs; capabilities dropped','',0,2.30130997806554660201e-04,1.05212225369978114026e+01,'2026-12-01 15:57:13.557888','2026-12-01 15:57:13.556940');
INSERT INTO "kernels" VALUES('be434b39395b',1,'gelu','old job',0,1,'i0-b1','c1094bcdf621','[]',0,'offline','offline:elementwise','CPU (Triton interpreter)','cpu','triton','python','gelu elementwise, BLOCK=2048, UNROLL=2, 4 warps (curated start point); a sweep of 3: BLOCK 2048/1024, UNROLL 2/4','Offline generator (no model): template `elementwise`: one activation applied elementwise (masked tail, 64-bit offsets).
Task: gelu; backend: triton; ops: aten.gelu.default.
Why this template: the reference runs one elementwise op (aten.gelu) on one tensor.
Device: Triton interpreter (CPU), so tunables come from the CPU choices (few, large programs).
Parent: ref (c1094bcdf621), status correct, no template params (reference).
Step: curated start point.
Params: BLOCK=2048, UNROLL=2, num_warps=4.
Tunables:
  BLOCK in [1024, 2048, 4096, 8192]: elements per block (a power of two)
  UNROLL in [1, 2, 4]: consecutive blocks per program
  num_warps in [4]: warps per program
Sweep (judged together, the fastest correct one is kept): BLOCK=2048, UNROLL=2, num_warps=4; BLOCK=2048, UNROLL=4, num_warps=4; BLOCK=1024, UNROLL=2, num_warps=4.','Offline generator (no model): template `elementwise`: one activation applied elementwise (masked tail, 64-bit offsets).
Task: gelu; backend: triton; ops: aten.gelu.default.
Why this template: the reference runs one elementwise op (aten.gelu) on one tensor.
Device: Triton interpreter (CPU), so tunables come from the CPU choices (few, large programs).
Parent: ref (c1094bcdf621), status correct, no template params (reference).
Step: curated start point.
Params: BLOCK=2048, UNROLL=2, num_warps=4.
Tunables:
  BLOCK in [1024, 2048, 4096, 8192]: elements per block (a power of two)
  UNROLL in [1, 2, 4]: consecutive blocks per program
  num_warps in [4]: warps per program
Sweep (judged together, the fastest correct one is kept): BLOCK=2048, UNROLL=2, num_warps=4; BLOCK=2048, UNROLL=4, num_warps=4; BLOCK=1024, UNROLL=2, num_warps=4.

```python
import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 8192
dim = 8192

BLOCK = 2048
UNROLL = 2
NUM_WARPS = 4

@triton.jit
def _act_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    # 64-bit offsets: tensors past 2**31 elements must not wrap.
    base = tl.program_id(0).to(tl.int64) * (BLOCK * UNROLL)
    for u in tl.static_range(UNROLL):
        offs = base + u * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements  # the ragged tail of the last program
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """gelu in one Triton kernel (computes in float32, stores the input dtype)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (triton.cdiv(n, BLOCK * UNROLL),)
        _act_kernel[grid](x, y, n, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=NUM_WARPS)
        return y
```
','import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """GELU (exact, erf form) over a large activation tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
','import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 8192
dim = 8192

BLOCK = 2048
UNROLL = 2
NUM_WARPS = 4

@triton.jit
def _act_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    # 64-bit offsets: tensors past 2**31 elements must not wrap.
    base = tl.program_id(0).to(tl.int64) * (BLOCK * UNROLL)
    for u in tl.static_range(UNROLL):
        offs = base + u * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements  # the ragged tail of the last program
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """gelu in one Triton kernel (computes in float32, stores the input dtype)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (triton.cdiv(n, BLOCK * UNROLL),)
        _act_kernel[grid](x, y, n, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=NUM_WARPS)
        return y
','','correct',1,1,3.13994930002081673592e+01,'{"median": 31.399493000208167, "mean": 31.265443399752257, "std": 1.3824730827649097, "min": 27.573729999858188, "max": 32.90124499835656, "cv": 0.04421728696084522, "n_trials": 10, "speedup_ci": [0.0964100598138474, 0.25480622312922074], "tie": false, "stop_reason": "decided: slower than the reference", "adaptive": true, "unit": "ms", "reference": {"median": 4.587895000440767, "mean": 4.49741289994563, "std": 1.1859959946546754, "min": 2.147318002243992, "max": 7.025957998848753, "cv": 0.2637062731485057, "n_trials": 10}}',1.46113664969378664881e-01,-1.0,3,3.14611366496937883141e+00,'{"tile": 5, "warps": 2}','{"estimate": true, "source": "analytic (FLOPs counted from the reference''s ops, minimum bytes)", "bytes": 524288.0, "flops": 65536.0, "arithmetic_intensity": 0.125}','{"space": {"BLOCK": ["1024", "2048"], "UNROLL": ["2", "4"], "num_warps": ["4"]}, "defaults": {"BLOCK": 2048, "UNROLL": 2, "num_warps": 4}, "space_size": 4, "bound": 16, "sampled": false, "combinations": [{"params": {"BLOCK": 2048, "UNROLL": 2, "num_warps": 4}, "status": "correct", "runtime_stats": {"median": 35.538899999664864, "mean": 43.23229677781152, "std": 16.902396855623522, "min": 27.007753000361845, "max": 72.63961599892355, "cv": 0.3909668954784397, "n_trials": 9}, "runtime": 35.538899999664864, "speedup": 0.16510088950007282, "error": ""}, {"params": {"BLOCK": 2048, "UNROLL": 4, "num_warps": 4}, "status": "correct", "runtime_stats": {"median": 49.42861699964851, "mean": 42.09459777889101, "std": 13.061378034466866, "min": 23.83045000169659, "max": 58.51947200062568, "cv": 0.3102863246983369, "n_trials": 9}, "runtime": 49.42861699964851, "speedup": 0.11870661891754994, "error": ""}, {"params": {"BLOCK": 1024, "UNROLL": 2, "num_warps": 4}, "status": "correct", "runtime_stats": {"median": 59.85103299826733, "mean": 61.30302077791485, "std": 14.665052299167911, "min": 39.38808699967922, "max": 82.06960700044874, "cv": 0.23922234358231123, "n_trials": 9}, "runtime": 59.85103299826733, "speedup": 0.09803513336133513, "error": ""}], "winner": {"BLOCK": 2048, "UNROLL": 2, "num_warps": 4}, "sweep_s": 6.22, "timing_method": "wall clock (time.perf_counter), A/B interleaved, median", "reference_stats": {"median": 5.867504001798807, "mean": 6.217097666699879, "std": 3.2270228190404824, "min": 1.2929139993502758, "max": 12.561191000713734, "cv": 0.5190561564321428, "n_trials": 9}, "template": "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\nbatch_size = 8192\ndim = 8192\n\nBLOCK = 2048\nUNROLL = 2\nNUM_WARPS = 4\n\n@triton.jit\ndef _act_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr, UNROLL: tl.constexpr):\n    # 64-bit offsets: tensors past 2**31 elements must not wrap.\n    base = tl.program_id(0).to(tl.int64) * (BLOCK * UNROLL)\n    for u in tl.static_range(UNROLL):\n        offs = base + u * BLOCK + tl.arange(0, BLOCK)\n        mask = offs < n_elements  # the ragged tail of the last program\n        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)\n        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))\n        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)\n\n\nclass ModelNew(nn.Module):\n    \"\"\"gelu in one Triton kernel (computes in float32, stores the input dtype).\"\"\"\n\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        x = x.contiguous()\n        y = torch.empty_like(x)\n        n = x.numel()\n        if n == 0:\n            return y\n        grid = (triton.cdiv(n, BLOCK * UNROLL),)\n        _act_kernel[grid](x, y, n, BLOCK=BLOCK, UNROLL=UNROLL, num_warps=NUM_WARPS)\n        return y\n"}','{"hardware": "CPU (Triton interpreter)", "device": "cpu", "phase_reached": "benchmark", "memory": {"footprint_bytes": 524288, "plan_level": 0, "precision_set": "main"}, "integrity_checks": ["static_scan", "patched_functions", "kernel_launches", "background_thread", "lazy_output", "inputs_modified", "reference_memory_reuse", "memoization", "precision", "torch_compute", "held_out_shapes"], "heldout_ok": true, "heldout_source": "task hook", "confinement": "landlock ABI 7: read-only system/python/task paths (75 rules); read-write /tmp/pg18/scratch/w-e99cd13fae59 + /dev/shm; /proc: own pid + non-process entries; TCP denied; signals/abstract sockets scoped; no_new_privs; capabilities dropped", "weights_copied": false, "timing_method": "wall clock, Triton interpreter (CPU)", "max_rel_error": 6.205895850687551e-08, "max_abs_error": 9.5367431640625e-07, "label": "i0-b1", "backend": "triton", "evaluation_s": 4.716, "phase_s": {"setup": 3.146, "build": 0.03, "warmup": 0.149, "queued": 0.0, "test": 0.801, "benchmark": 0.59}, "gpu_slot": null, "prestarted": false, "worker": {"preload_s": 3.014, "idle_s": 0.0}, "template": {"params": {"BLOCK": 2048, "UNROLL": 2, "num_warps": 4}, "combinations": 3, "space_size": 4, "sampled": false}, "params": {"template": "elementwise", "BLOCK": 2048, "UNROLL": 2, "num_warps": 4}, "llm": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0, "price": ""}}','Template: 3 combination(s) of 4 screened on one input set and timed together.
  BLOCK=2048, UNROLL=2, num_warps=4: 35.5389 ms, 0.17x <- winner
  BLOCK=2048, UNROLL=4, num_warps=4: 49.4286 ms, 0.12x
  BLOCK=1024, UNROLL=2, num_warps=4: 59.8510 ms, 0.10x
The winner (BLOCK=2048, UNROLL=2, num_warps=4) had the full checks:
precision check against float64 on the main input set: passed
correct on 3 seed(s), in-place rewritten inputs and 2 held-out input set(s) (task hook)
runtime 31.3995 ms (median of 10, CV 4.42%), reference 4.5879 ms: 0.15x (wall clock, Triton interpreter (CPU)); speedup 95% interval 0.096-0.255x; timing stopped: decided: slower than the reference
sandbox: landlock ABI 7: read-only system/python/task paths (75 rules); read-write /tmp/pg18/scratch/w-e99cd13fae59 + /dev/shm; /proc: own pid + non-process entries; TCP denied; signals/abstract sockets scoped; no_new_privs; capabilities dropped','',0,1.85754997801268473267e-04,1.09808425970004464033e+01,'2026-12-01 15:57:14.017801','2026-12-01 15:57:14.017068');
CREATE TABLE llm_calls (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	task_name VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	iteration INTEGER NOT NULL, 
	kernel_id VARCHAR(32), 
	label VARCHAR(40) NOT NULL, 
	model VARCHAR(200) NOT NULL, 
	purpose VARCHAR(20) NOT NULL, 
	prompt_tokens INTEGER NOT NULL, 
	completion_tokens INTEGER NOT NULL, 
	cost_usd FLOAT NOT NULL, 
	price VARCHAR(20) NOT NULL, 
	latency_s FLOAT NOT NULL, 
	attempts INTEGER NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
CREATE TABLE reference_timings (
	task_digest VARCHAR(32) NOT NULL, 
	hardware VARCHAR(200) NOT NULL, 
	kind VARCHAR(20) NOT NULL, 
	runtime FLOAT NOT NULL, 
	runtime_stats JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (task_digest, hardware, kind)
);
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	task_name VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	backend VARCHAR(20) NOT NULL, 
	gpu_arch VARCHAR(100) NOT NULL, 
	hardware VARCHAR(200) NOT NULL, 
	generator VARCHAR(20) NOT NULL, 
	models JSON NOT NULL, 
	config JSON NOT NULL, 
	task_path TEXT NOT NULL, 
	status VARCHAR(20) NOT NULL, 
	error TEXT NOT NULL, 
	started_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	engine_host VARCHAR(200) NOT NULL, 
	engine_pid INTEGER, 
	heartbeat_at DATETIME, 
	PRIMARY KEY (id)
);
INSERT INTO "runs" VALUES(1,'gelu','old job','triton','cpu','CPU (Triton interpreter)','offline','["offline"]','{"task": "examples/gelu", "task_name": "gelu", "job_name": "old job", "backend": "triton", "gpu_arch": null, "max_iters": 1, "branches_per_iteration": 2, "start_from_best": false, "kernels_iter_0_path": null, "inference": [], "use_feedback_llm": false, "user_instructions": "", "eval_config": {"build_timeout_s": 180.0, "test_timeout_s": 180.0, "correctness_seeds": 3, "max_workers": null, "prestart_workers": null, "cpu_time_limit_s": 900.0, "memory_limit_gb": 16.0, "gpu_memory_fraction": 0.9, "adaptive_trials": true, "profile": true, "profile_original_model": false, "precompile_torch_header": true}, "paths": {"kernels_db_path": "/tmp/pg18/old.sqlite3", "scratch_dir": "/tmp/pg18/scratch", "build_cache_dir": "~/.cache/openkernel/builds"}, "search": {"exploration_ratio": 0.3, "num_inspirations": 2, "seed": 1}, "prompt": {"allow_templated": false, "max_template_combinations": 16}, "critic": {"model": null, "use_llm": true}, "budget": {"max_usd": null, "max_tokens": null}, "traces": {"enabled": false, "dir": "runs/traces"}, "hardware": {"label": "CPU (Triton interpreter)", "device": "cpu", "gpu_arch": "cpu", "num_gpus": 0, "gpu_archs": [], "interpreter": true, "peak_bandwidth_gbs": null, "peak_tflops": {}, "gpu_memory_bytes": 0}, "peak_gflops": null, "footprint": {"param_bytes": 0, "input_bytes": 262144, "output_bytes": 262144, "peak_bytes": 524288, "measured": false, "mutates_inputs": false, "small_set": {}, "small_peak_bytes": 0}}','/work/wt18pg/examples/gelu','completed','','2026-12-01 15:57:03.028820','2026-12-01 15:57:14.023891','vm',21707,'2026-12-01 15:57:13.038153');
CREATE TABLE suite_problems (
	suite VARCHAR(200) NOT NULL, 
	task_name VARCHAR(200) NOT NULL, 
	job_name VARCHAR(200) NOT NULL, 
	position INTEGER NOT NULL, 
	path TEXT NOT NULL, 
	task_digest VARCHAR(32) NOT NULL, 
	outcome VARCHAR(20) NOT NULL, 
	error TEXT NOT NULL, 
	added_at DATETIME NOT NULL, 
	PRIMARY KEY (suite, task_name)
);
CREATE INDEX ix_runs_task_name ON runs (task_name);
CREATE INDEX ix_runs_job_name ON runs (job_name);
CREATE INDEX ix_runs_task_job ON runs (task_name, job_name);
CREATE INDEX ix_kernels_status ON kernels (status);
CREATE INDEX ix_kernels_task_arch_score ON kernels (task_name, gpu_arch, score);
CREATE INDEX ix_kernels_run_id ON kernels (run_id);
CREATE INDEX ix_kernels_job_candidates ON kernels (task_name, job_name, is_program0, correctness, score, status, runtime_improvement, created_at);
CREATE INDEX ix_kernels_task_job ON kernels (task_name, job_name);
CREATE INDEX ix_critiques_task_job ON critiques (task_name, job_name, iteration);
CREATE INDEX ix_critiques_run_id ON critiques (run_id);
CREATE INDEX ix_llm_calls_run_id ON llm_calls (run_id);
CREATE INDEX ix_llm_calls_kernel_id ON llm_calls (kernel_id);
CREATE INDEX ix_llm_calls_task_job ON llm_calls (task_name, job_name);
COMMIT;
