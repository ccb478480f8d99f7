"""Run configuration: pydantic models that reject unknown keys, loaded from YAML.

Keys follow the product brief (seeds/optimization-strategies.txt). ``--set a.b=value``
overrides any key; values are parsed as YAML scalars, so ``--set max_iters=3`` is an int.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from openkernel.errors import ConfigError

# sm_90, sm_80, sm_100, and the arch-specific variants (sm_90a) that unlock wgmma/TMA.
GPU_ARCH = re.compile(r"sm_\d{2,3}a?")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelPrice(_Strict):
    """What a model's tokens cost, for models litellm has no price for (self-hosted ones)."""

    input_usd_per_mtok: float = Field(ge=0, description="US dollars per million prompt tokens.")
    output_usd_per_mtok: float = Field(ge=0, description="US dollars per million answer tokens.")


class ModelConfig(_Strict):
    """One model server under ``inference``; several entries make an ensemble."""

    model: str = Field(description="A litellm model string, e.g. openai/gpt-4o-mini, "
                       "anthropic/claude-sonnet-4-5, ollama_chat/qwen2.5-coder, hosted_vllm/NAME.")
    api_base: str | None = Field(None, description="Server URL for self-hosted or proxied models.")
    api_key_env: str | None = Field(
        None, description="Name of the environment variable holding the API key (never the key).")
    weight: float = Field(1.0, gt=0, description="Sampling weight within the ensemble.")
    temperature: float = Field(0.7, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int = Field(8192, gt=0, description="Upper bound on the answer's length.")
    timeout_s: float = Field(300.0, gt=0, description="Time limit of one request, a streamed "
                             "answer's whole time included.")
    num_retries: int = Field(3, ge=0, description="Retries with backoff on transient errors.")
    max_consecutive_failures: int | None = Field(
        3, ge=1, description="Calls to this model that may fail in a row (each after its "
        "retries) before it is paused for the rest of the run: an ensemble goes on with its "
        "other models; with none left the run stops, saying why. null: never pause.")
    stream: bool = Field(True, description="Stream the answer (kernel-code shows it as it "
                         "arrives); false for servers that cannot stream.")
    price: ModelPrice | None = Field(None, description="Local price entry: used instead of "
                                     "litellm's price map (needed for self-hosted models; "
                                     "without either, calls cost $0 and are labelled unknown).")


BASELINES = ("eager", "compile", "autotune", "cudagraphs")  # the reference timings, in order


class BaselineTimeouts(_Strict):
    """The wall of each reference timing (``eval_config.baseline_timeout_s``): seconds of its
    own first call or compilation. Past it the baseline is stored as timed out, with the
    seconds it ran, and the problem goes on with the others."""

    eager: float = Field(60.0, gt=0, description="The reference's first eager call (a forward "
                         "slower than this is not timed at all).")
    compile: float = Field(45.0, gt=0, description="torch.compile (default mode) of the "
                           "reference and its first call.")
    autotune: float = Field(180.0, gt=0, description="torch.compile max-autotune-no-cudagraphs "
                            "of the reference (it benchmarks GEMM/convolution choices on the "
                            "GPU) and its first call.")
    cudagraphs: float = Field(60.0, gt=0, description="torch.compile(mode='reduce-overhead') "
                              "of the reference and its first calls (warm-up, then the CUDA "
                              "graph's capture).")


class EvalConfig(_Strict):
    """How each candidate is built, checked and timed."""

    build_timeout_s: float = Field(180.0, gt=0, description="Limit on import + compile of one "
                                   "candidate (CUDA C++ builds through nvcc take ~50 s).")
    test_timeout_s: float = Field(180.0, gt=0, description="Limit on correctness + benchmark of "
                                  "one candidate after it built.")
    correctness_seeds: int = Field(3, ge=1, le=32, description="Fresh random input sets the "
                                   "candidate must match the reference on.")
    max_workers: int | None = Field(None, ge=1, description="Candidates evaluated at once "
                                    "(building side by side; tests and timing take turns, one "
                                    "per GPU); default: on a GPU half the CPU cores, at most 8 "
                                    "per GPU; 2 on the CPU. With executor: ray, at most this "
                                    "many over the cluster, each GPU's actor taking its node's "
                                    "default share.")
    prestart_workers: bool | None = Field(None, description="Keep workers waiting for the next "
                                          "candidates with torch imported and (on a GPU) their "
                                          "CUDA context made; default: on with a GPU, off on "
                                          "the CPU.")
    fork_workers: bool = Field(True, description="Fork workers from a process that imported "
                               "torch and the evaluator once (a fork server), instead of "
                               "starting each anew: a worker's start drops from seconds to "
                               "milliseconds (plus its CUDA context on a GPU).")
    keep_spares_s: float = Field(60.0, ge=0, description="Seconds the spare workers outlive "
                                 "their run, for the next run of this process (a bench's next "
                                 "problem, the MCP server's next job) to take; 0: stopped "
                                 "with the run.")
    cpu_time_limit_s: float = Field(900.0, gt=0, description="RLIMIT_CPU of a worker process.")
    memory_limit_gb: float = Field(16.0, gt=0, description="Address-space limit of a CPU worker "
                                   "(not applied on a GPU, where CUDA reserves large ranges).")
    gpu_memory_fraction: float = Field(0.9, gt=0, le=1, description="Share of device memory a "
                                       "worker may allocate through torch.")
    adaptive_trials: bool = Field(True, description="Stop timing a candidate once its "
                                  "comparison with the reference (and the best so far) is "
                                  "decided by a confidence interval, instead of always spending "
                                  "the whole timing budget.")
    check_timed_calls: bool = Field(True, description="Time the candidate and the reference in "
                                    "rounds, each on an input set of its own drawn from a "
                                    "random seed when the round starts, and compare every "
                                    "timed call's output with the reference's (and its inputs "
                                    "unchanged, no thread or process left behind): a kernel "
                                    "that behaves only while checked is caught. false: one "
                                    "input set, no timed output looked at; only to measure "
                                    "what the checks cost (the result says it was unchecked).")
    overlap_checks: bool = Field(True, description="On a GPU, correctness, integrity and "
                                 "held-out-shape checks of different candidates share the GPU "
                                 "(as many at once as the memory plan fits); only timed trials "
                                 "and profiles hold it alone. Measured on the H200: timings as "
                                 "stable (CV 0.14 % against 0.19 % off), four candidates judged "
                                 "in 0.46x the wall time; false: every check alone too.")
    fused_comparison: bool = Field(True, description="On a GPU, compare float32 and float64 "
                                   "outputs with one kernel that reads each element once (the "
                                   "same float64 arithmetic per element as the PyTorch passes, "
                                   "checked against them when each worker makes it) instead of "
                                   "~13 PyTorch passes a block: 0.0062 s against 0.085 s a 6 GiB "
                                   "output on the H200. A GPU worker makes it while it waits for "
                                   "its job (0.2-0.3 s there, before all 182 jobs of kb22-s30); "
                                   "false: the PyTorch passes.")
    float64_once: bool | None = Field(None, description="Make the reference's float64 answer "
                                      "of the main input set (what the precision check "
                                      "compares with) once per task, in a worker of its own, "
                                      "and keep it beside the build cache for every "
                                      "candidate's check and later runs; default: on a GPU "
                                      "(in each check it would hold about twice the "
                                      "footprint), and on the CPU where it is costly (1e10 "
                                      "FLOPs or more), where the answer takes at most 256 MiB.")
    max_autotune_baseline: bool = Field(False, description="On a GPU, also time the reference "
                                        "under torch.compile(mode='max-autotune-no-cudagraphs'), "
                                        "the strongest compiler baseline, beside eager and the "
                                        "default mode (`openkernel bench` turns it on: its table "
                                        "reports speedups over it).")
    cudagraphs_baseline: bool = Field(False, description="On a GPU, also time the reference "
                                      "under torch.compile(mode='reduce-overhead'): the default "
                                      "mode's kernels replayed as CUDA graphs, the fair yardstick "
                                      "for a candidate that replays one (`openkernel bench` "
                                      "turns it on: its table reports speedups over it).")
    allow_tf32: bool = Field(False, description="Opt in to TF32 for float32 GEMMs "
                             "(torch.backends.cuda.matmul.allow_tf32) in every worker: the "
                             "reference, torch.compile's baselines and the candidates all run "
                             "under it, and every suite table says so. Off: float32 GEMMs "
                             "compute in full float32, PyTorch's default (convolutions follow "
                             "cuDNN's own default, TF32 on).")
    baselines: list[Literal["eager", "compile", "autotune", "cudagraphs"]] | None = Field(
        None, description="Which reference timings to make, each under its own wall "
        "(baseline_timeout_s): eager, compile (torch.compile's default mode), autotune "
        "(max-autotune-no-cudagraphs), cudagraphs (reduce-overhead). Default: eager and compile "
        "on a GPU, plus autotune with max_autotune_baseline and cudagraphs with "
        "cudagraphs_baseline; none on the CPU, where torch.compile makes C++, not what a "
        "GPU kernel competes with. [] makes none.")
    baseline_timeout_s: BaselineTimeouts = Field(
        default_factory=BaselineTimeouts, description="The wall of each reference timing: "
        "{eager: 60, compile: 45, autotune: 180, cudagraphs: 60} seconds (one number sets "
        "all four).")
    fresh_baselines: bool = Field(False, description="Time the reference again even when its "
                                  "timings for this task, hardware and software are stored, "
                                  "and capture Inductor's code for it again "
                                  "(`--fresh-baselines`).")
    sweep_timeout_s: float = Field(600.0, gt=0, description="Wall of a templated candidate's "
                                   "sweep (building, screening and timing its combinations; "
                                   "waiting for the GPU's turn not counted).")
    profile: bool = Field(True, description="On a GPU with Nsight Compute (ncu) installed, profile "
                          "each correct candidate; its summary reaches later prompts.")
    profile_scope: Literal["leaders", "every"] = Field(
        "leaders", description="Which correct candidates ncu profiles: 'leaders', those within "
        "5% of the fastest kernel judged so far in the run (the first, a new fastest, or near "
        "it: the kernels worth reading); the others get the roofline estimate, labelled one, "
        "and their log says why; 'every': each one (a profile holds the GPU alone ~1 s).")
    profile_original_model: bool = Field(False, description="Profile the reference too (once per "
                                         "task), as a baseline shown next to each profile.")
    profile_memory: bool = Field(False, description="On a GPU with ncu, profile each correct "
                                 "candidate once more for Nsight Compute's memory workload "
                                 "tables (the dashboard's memory heatmap); off: it costs a run.")
    precompile_torch_header: bool = Field(True, description="With the cuda backend on a GPU "
                                          "host with GCC: compile <torch/extension.h> once per "
                                          "torch install and flag set (~40 s), so each CUDA C++ "
                                          "build skips ~18 CPU seconds of header parsing.")

    @field_validator("baseline_timeout_s", mode="before")
    @classmethod
    def _one_wall_for_all(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value <= 0:
                raise ValueError("must be more than 0 seconds")
            return {name: value for name in BASELINES}
        return value

    @field_validator("baselines")
    @classmethod
    def _eager_first(cls, value: list[str] | None) -> list[str] | None:
        """Every compiled baseline is timed against eager in the same rounds."""
        if value and "eager" not in value:
            raise ValueError("list eager too: the compiled baselines are timed against it "
                             "(e.g. [eager, compile])")
        return None if value is None else [b for b in BASELINES if b in value]


class PathsConfig(_Strict):
    kernels_db_path: str = Field("runs/kernels.sqlite3", description="Results database: a SQLite "
                                 "file, relative to where the run starts, or a postgresql://"
                                 "user@host/db URL (psycopg 3: openkernel[postgres]), which "
                                 "engines on several hosts share, each writing its own jobs.")
    scratch_dir: str = Field("runs/scratch", description="Per-candidate scratch directories.")
    build_cache_dir: str = Field("~/.cache/openkernel/builds", description="Built CUDA "
                                 "extensions and Triton kernels, one folder per candidate code "
                                 "(GPU only), so an identical candidate is never built twice.")


class SearchConfig(_Strict):
    """MAP-Elites sampling."""

    exploration_ratio: float = Field(0.3, ge=0, le=1, description="Share of parents drawn "
                                     "uniformly from all elites rather than the best.")
    num_inspirations: int = Field(2, ge=0, le=8, description="Other elites shown in the prompt.")
    seed: int | None = Field(None, description="Random seed of the search (parent sampling, "
                             "offline mutations); None draws one.")


class CriticConfig(_Strict):
    """Who writes the diagnosis that joins the next iteration's prompts."""

    model: ModelConfig | None = Field(None, description="The critic's model (a litellm string or "
                                      "an inference-style entry); default: the first inference "
                                      "model. A string naming an inference model reuses its "
                                      "entry (api_base, api_key_env, price).")
    use_llm: bool = Field(True, description="With a model (critic.model or the first inference "
                          "model), ask it for the diagnosis; false keeps the rule-based critic.")

    @field_validator("model", mode="before")
    @classmethod
    def _model_string(cls, value: Any) -> Any:
        return {"model": value} if isinstance(value, str) else value


class BudgetConfig(_Strict):
    """Limits that stop a job between candidates (the whole job: a resumed run counts what its
    earlier runs spent)."""

    max_usd: float | None = Field(None, gt=0, description="Stop once the job's model calls cost "
                                  "this many US dollars (calls at an unknown price count $0).")
    max_tokens: int | None = Field(None, gt=0, description="Stop once the job's model calls used "
                                   "this many tokens (prompt and answer).")


class TracesConfig(_Strict):
    """Trace capture: one Parquet row per judged candidate (README: Traces)."""

    enabled: bool = Field(False, description="Write traces as the job goes (opt-in).")
    dir: str = Field("runs/traces", description="Folder of the trace dataset, relative to where "
                     "the run starts.")


class PromptConfig(_Strict):
    """What the prompts ask for (seeds/optimization-strategies.txt)."""

    allow_templated: bool = Field(False, description="Let the model answer with a templated "
                                  "kernel (TEMPLATE_PARAMS): every combination of its options is "
                                  "built, checked and timed, and the fastest correct one is "
                                  "judged in full. The prompt then carries a worked example for "
                                  "the backend in use.")
    max_template_combinations: int = Field(16, ge=1, le=4096, description="At most this many "
                                           "combinations of one template are judged; past it, "
                                           "the defaults and a seeded uniform sample of the rest.")


class RayConfig(_Strict):
    """Where candidates are judged with ``executor: ray`` (README: Past one machine)."""

    address: str | None = Field(None, description="The Ray cluster to join: \"auto\" (the "
                                "one started on this machine with `ray start`) or host:port "
                                "of its head (the GCS port, 6379 by default). None: the cluster running on "
                                "this machine if there is one, else a local Ray started for "
                                "the run and stopped after it.")
    gpus: int | None = Field(None, ge=1, description="GPU actors to keep, one per GPU (each "
                             "asks Ray for num_gpus=1); default: every GPU the cluster has, "
                             "GPU nodes that join mid-run included. A lost actor is replaced "
                             "once a GPU is free.")
    cpus_per_gpu: float = Field(1.0, gt=0, description="CPU resources each GPU actor reserves "
                                "from Ray for the builds of its candidates.")
    start_timeout_s: float = Field(300.0, gt=0, description="Limit on starting the actors and "
                                   "probing the task on each before the first candidate; "
                                   "actors not placed by then (too few free GPUs) join when "
                                   "Ray places them. Also how long a candidate waits for a "
                                   "GPU actor when every one is lost.")


class Config(_Strict):
    """A whole run. Every key is optional; an empty file runs the defaults."""

    task: str | None = Field(None, description="Task file or folder; a relative path is read "
                             "from the config file's folder.")
    task_name: str | None = Field(None, description="Name the run is filed under; default: the "
                                  "task's file or folder name.")
    job_name: str | None = Field(None, description="Name of this job; re-running a job resumes it. "
                                 "Default: run-<timestamp>.")
    backend: Literal["triton", "cuda"] = Field("triton", description="Kernel language.")
    gpu_arch: str | list[str] | None = Field(
        None, description="Target architecture (e.g. sm_90) or several ([sm_90, sm_80], or "
        "sm_90,sm_80): "
        "candidates are judged on a GPU of the first one present and, when correct, timed on "
        "one GPU of each other one present; CUDA C++ is compiled for all of them. Results are "
        "filed under the first one present. Default: detected.")
    max_iters: int = Field(5, ge=0, description="Iterations of the search (0: the probe and the "
                           "baselines only, e.g. a bench storing every problem's reference timings).")
    branches_per_iteration: int = Field(4, ge=1, description="Candidates per iteration.")
    start_from_best: bool = Field(False, description="Seed the archive with the best stored "
                                  "kernel for this task_name and gpu_arch.")
    kernels_iter_0_path: str | None = Field(None, description="A kernel file to start from.")
    inference: list[ModelConfig] = Field(default_factory=list, description="Models; empty: the "
                                         "built-in offline generator.")
    use_feedback_llm: bool = Field(False, description="Condense long build/test logs with a "
                                   "second model call before they reach prompts.")
    user_instructions: str = Field("", description="Appended to the task's USER_INSTRUCTIONS.")
    eval_config: EvalConfig = Field(default_factory=EvalConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    traces: TracesConfig = Field(default_factory=TracesConfig)
    executor: Literal["local", "ray"] = Field("local", description="Who judges candidates: "
                                              "local (worker processes on this machine) or "
                                              "ray (one actor per GPU of a Ray cluster; "
                                              "pip install 'openkernel[ray]').")
    ray: RayConfig = Field(default_factory=RayConfig)

    @field_validator("inference", mode="before")
    @classmethod
    def _one_model_as_list(cls, value: Any) -> Any:
        if isinstance(value, (dict, str)):
            value = [value]
        if isinstance(value, list):
            return [{"model": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("gpu_arch", mode="before")
    @classmethod
    def _arch_labels(cls, value: Any) -> Any:
        """sm_NN, a list of them, or the seed's comma form (``sm_90,sm_80``), normalised to
        lower case; [] means detected."""
        if value is None or value == []:
            return None
        if isinstance(value, str) and "," in value:
            value = [v for v in value.split(",") if v.strip()]
        if isinstance(value, str):
            return _arch_label(value)
        if isinstance(value, (list, tuple)):
            return [_arch_label(v) for v in value]
        raise ValueError(f"{value!r} is not an architecture: expected sm_NN or a list of "
                         "them, e.g. sm_90 or [sm_90, sm_80]")

    @property
    def gpu_archs(self) -> list[str]:
        """The configured targets in order, without repeats; [] when detected."""
        value = self.gpu_arch
        return list(dict.fromkeys([value] if isinstance(value, str) else value or []))

    @property
    def uses_llm(self) -> bool:
        return bool(self.inference)

    @property
    def critic_model(self) -> ModelConfig | None:
        """The LLM critic's model, or None for the rule-based critic."""
        if not self.critic.use_llm:
            return None
        chosen = self.critic.model
        if chosen is None:
            return self.inference[0] if self.inference else None
        bare = chosen.model_fields_set <= {"model"}
        same = next((m for m in self.inference if m.model == chosen.model), None)
        return same if bare and same is not None else chosen


def _arch_label(value: Any) -> str:
    label = str(value).strip().lower() if isinstance(value, str) else ""
    if not GPU_ARCH.fullmatch(label):
        raise ValueError(f"{value!r} is not an architecture: expected sm_NN or sm_NNa, "
                         "e.g. sm_90, sm_80 or sm_90a")
    return label


def _format_validation_error(err: ValidationError, source: str) -> str:
    problems = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            problems.append(f"unknown key '{where}'")
        else:  # a validator's ValueError reads "Value error, <our message>"
            problems.append(f"'{where}': {e['msg'].removeprefix('Value error, ')}")
    return f"{source}: " + "; ".join(problems)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b=value`` into (["a", "b"], parsed YAML value)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value (e.g. max_iters=3)")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {text!r}: the key is empty")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    data = dict(data)
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
            node[part] = child = dict(child)
            node = child
        node[path[-1]] = value
    return data


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    return data


def build_config(
    base: dict | None = None, overrides: list[str] | None = None, source: str = "config"
) -> Config:
    """Validate a dict (from YAML) plus ``--set`` overrides into a Config."""
    data = apply_overrides(base or {}, overrides or [])
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, source)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Load a YAML config (or the defaults) and apply ``--set`` overrides."""
    data = read_yaml(path) if path else {}
    return build_config(data, overrides, source=str(path) if path else "--set")
