"""Archive, features, control and schemas: the search's pure parts."""

import random
import threading
import time

from openkernel.schemas import EvalResult, Program, Status
from openkernel.search.archive import Archive
from openkernel.search.control import RunControl
from openkernel.search.features import kernel_features


def _prog(pid, speedup, code="", correct=True, params=None):
    p = Program(id=pid, code=code, metadata={"params": params or {}})
    p.add_eval_results(EvalResult(compiled=True, correctness=correct, runtime=1.0,
                                  runtime_improvement=speedup, perf_score=4 if speedup > 1 else 3))
    return p


def test_performance_score_as_the_seed_describes():
    r = EvalResult(compiled=True, correctness=True, perf_score=4, runtime=2.0, runtime_improvement=1.5)
    assert EvalResult.compute_performance_score(r) == 5.5
    r = EvalResult(compiled=True, correctness=True, perf_score=3, runtime=2.0, runtime_improvement=-1)
    assert EvalResult.compute_performance_score(r) == 3.5
    r = EvalResult(compiled=True, correctness=False, perf_score=2, runtime=2.0, runtime_improvement=-1)
    assert EvalResult.compute_performance_score(r) == 2.0


def test_status_classes():
    assert EvalResult().get_status() is Status.COMPILE_ERROR
    assert EvalResult(metadata={"timeout": "build"}).get_status() is Status.BUILD_TIMEOUT
    assert EvalResult(compiled=True, metadata={"timeout": "test"}).get_status() is Status.TEST_TIMEOUT
    assert EvalResult(compiled=True).get_status() is Status.INCORRECT
    assert EvalResult(compiled=True, correctness=True, runtime_improvement=0.9).get_status() is Status.CORRECT
    assert EvalResult(compiled=True, correctness=True, runtime_improvement=1.2).get_status() is Status.FASTER
    assert EvalResult(compiled=True, metadata={"runnable": False}).get_status() is Status.NOT_RUN
    assert EvalResult.get_eval_status(True, False) == "incorrect"


def test_program_round_trip():
    p = _prog("a", 1.3, "code", params={"BLOCK_SIZE": 1024})
    q = Program.from_dict(p.to_dict())
    assert q.kernel_exec_result.runtime_improvement == 1.3 and q.metadata["params"]["BLOCK_SIZE"] == 1024


def test_precision_records_are_stored_and_read_back(tmp_path):
    """What a program's GEMMs multiply in (set by the loop on the program, not by its
    evaluation) reaches the database row the bench's best_precision reads, and a resume."""
    from openkernel.search.records import kernel_fields, program_from_row
    from openkernel.store import Store

    p = _prog("p1", 1.4, "code", params={"TF32X3": 1})
    records = [{"kernel": "_k0_matmul", "op": "mm", "by": "triton", "precision": "3xtf32"}]
    p.metadata["precision"] = records
    store = Store(str(tmp_path / "k.sqlite3"))
    run = store.start_run(task_name="t", job_name="j", backend="triton", gpu_arch="sm_90")
    store.add_kernel(**kernel_fields(p, run_id=run.id, task_name="t", job_name="j",
                                     hardware="H200", gpu_arch="sm_90", reference_code=""))
    row = store.best_kernel("t", "sm_90")
    assert row.meta["precision"] == records and row.meta["params"] == {"TF32X3": 1}
    back = program_from_row(row)
    assert back.metadata["precision"] == records and "precision" not in back.kernel_exec_result.metadata


def test_features_from_code_and_params():
    f = kernel_features("k[grid](x, y, n, BLOCK_SIZE=1024, num_warps=4)")
    assert f == {"kind": "hand", "launches": 1, "tile": 10, "warps": 4}
    assert kernel_features("", {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8})["tile"] == 14
    assert kernel_features("kernel<<<blocks, 256>>>(x)")["warps"] == 8
    assert kernel_features("no hints") == {"kind": "hand", "launches": -1, "tile": -1, "warps": -1}


def test_archive_keeps_best_per_cell_and_samples():
    arch = Archive(exploration_ratio=0.0)
    ref = Program(id="ref", code="", is_program0=True)
    ref.add_eval_results(EvalResult(compiled=True, correctness=True, runtime_improvement=1.0))
    arch.add(ref)
    rng = random.Random(0)
    assert arch.sample_parent(rng).id == "ref"  # nothing correct yet: the reference
    assert arch.add(_prog("a", 1.2, params={"BLOCK_SIZE": 1024, "num_warps": 4}))
    assert not arch.add(_prog("b", 1.1, params={"BLOCK_SIZE": 1024, "num_warps": 4}))
    assert arch.add(_prog("c", 1.5, params={"BLOCK_SIZE": 256, "num_warps": 2}))
    assert not arch.add(_prog("bad", 9.0, correct=False, params={"BLOCK_SIZE": 64}))
    assert {p.id for p in arch.elites.values()} == {"a", "c"}
    assert arch.best.id == "c" and arch.best_speedup == 1.5
    assert arch.sample_parent(rng).id == "c"  # pure exploitation with a full tournament
    insp = arch.sample_inspirations(arch.elites[("", -1, 10, 4)], 2, rng)  # the cell of "a"
    assert [p.id for p in insp] == ["c"]


def test_heldout_failure_cannot_become_best():
    arch = Archive()
    p = _prog("x", 3.0)
    p.kernel_exec_result.metadata["heldout_ok"] = False
    assert not arch.add(p) and arch.best is None


def test_control_pause_resume_stop():
    c = RunControl()
    c.pause()
    assert c.paused
    t = threading.Thread(target=lambda: (time.sleep(0.3), c.resume()))
    t.start()
    assert c.wait_while_paused(0.05) is True
    t.join()
    c.set_backend("cuda")
    assert c.take_backend() == "cuda" and c.take_backend() is None
    c.add_instruction("  use float4 loads ")
    assert c.take_instructions() == ["use float4 loads"]
    c.pause()
    c.stop()
    assert c.wait_while_paused(0.05) is False


def test_the_seeds_schema_whole(tmp_path):
    """Program.update_Kernel and Program.populate_kernel_from_exec_result write a real kernels
    row; a build (a sweep's variant import) returns the seed's CompilationResult."""
    from openkernel.evaluation.worker.sweep import build_variant
    from openkernel.schemas import CompilationResult
    from openkernel.store import Kernel, Store

    store = Store(tmp_path / "k.sqlite3")
    run = store.start_run(task_name="t", job_name="j", backend="triton")
    p = _prog("p1", 1.4, code="k[grid](x, BLOCK=1024)", params={"template": "x", "BLOCK": 1024})
    p.metadata.update(label="i0-b2", branch=2, origin="offline", description="a kernel")
    with store.session() as s, s.begin():
        row = Kernel(run_id=run.id, task_name="t", job_name="j")
        p.update_Kernel(row)
        s.add(row)
    row = store.get_kernel("p1")
    assert (row.label, row.branch, row.status, row.runtime_improvement) == ("i0-b2", 2, "faster", 1.4)
    assert row.meta["params"]["BLOCK"] == 1024 and row.code == p.code and row.score == p.score
    slower = EvalResult(compiled=True, correctness=True, runtime=2.0, runtime_improvement=0.7,
                        perf_score=3, eval_log="again", metadata={"timing_method": "wall"})
    with store.session() as s, s.begin():
        row = s.get(Kernel, "p1")
        Program.populate_kernel_from_exec_result(row, slower)
    row = store.get_kernel("p1")
    assert (row.status, row.runtime, row.eval_log) == ("correct", 2.0, "again")
    assert row.meta["timing_method"] == "wall" and row.meta["params"]["BLOCK"] == 1024  # kept
    store.close()
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("class ModelNew:\n    pass\n")
    bad.write_text("raise ImportError('no such extension')\n")
    built, failed = build_variant(str(good), 0), build_variant(str(bad), 1)
    assert isinstance(built, CompilationResult) and built.compile_success and built.idx == 0
    assert built.binary.ModelNew.__name__ == "ModelNew"
    assert not failed.compile_success and failed.binary is None and "no such extension" in failed.error


def test_a_sweep_won_by_a_neighbour_is_described_as_the_kept_point():
    """Issue 58: "BLOCK=2048 ...; a sweep of 3" over stored code with BLOCK=4096. The kept
    kernel is the sweep's winner: its description says so first, and keeps what was proposed."""
    from types import SimpleNamespace

    from openkernel.search.judging import _mark_template

    proposed = {"BLOCK": 2048, "num_warps": 4}
    program = Program(id="k", code="template", metadata={
        "params": {"template": "elementwise", **proposed},
        "description": "gelu elementwise, BLOCK=2048, 4 warps (curated start point); a sweep of 3: "
                       "BLOCK 2048/4096/1024"})
    combos = [{"params": {"BLOCK": b, "num_warps": 4}} for b in (2048, 4096, 1024)]
    result = EvalResult(compiled=True, correctness=True, runtime=1.0, runtime_improvement=0.9,
                        template_results={"combinations": combos, "winner": combos[1]["params"],
                                          "winner_code": "BLOCK = 4096"})
    program.add_eval_results(result)
    _mark_template(program, result, SimpleNamespace(code="template"))
    assert program.code == "BLOCK = 4096"
    assert program.metadata["params"] == {"template": "elementwise", "BLOCK": 4096, "num_warps": 4}
    assert program.metadata["description"] == (
        "gelu elementwise, BLOCK=4096, 4 warps (curated start point); the winner of a sweep of 3 "
        "(BLOCK 2048/4096/1024) over the proposed BLOCK=2048")
    # a knob the description did not name is said first; warps are words
    from openkernel.search.judging import _kept_point
    assert _kept_point("tiled matmul, 4 warps", {"BM": 64, "num_warps": 4}, {"BM": 128, "num_warps": 8},
                       2) == "BM=128: tiled matmul, 8 warps; the winner of a sweep of 2 over the " \
                             "proposed BM=64, num_warps=4"
    # the proposed point winning leaves the description as it was
    same = Program(id="s", code="template", metadata={"params": {"template": "e", **proposed},
                                                      "description": "as proposed"})
    kept = EvalResult(compiled=True, template_results={"combinations": combos, "winner": proposed})
    same.add_eval_results(kept)
    _mark_template(same, kept, SimpleNamespace(code="template"))
    assert same.metadata["description"] == "as proposed"


def test_a_stalled_search_says_what_became_of_the_candidates_after_its_best():
    """Issue 57: a search that stops improving says why in its log (slower than their parents,
    failed, the space spent)."""
    from openkernel.search.history import stalled

    def judged(pid, it, speed, parent=None, status=True):
        p = _prog(pid, speed, correct=status)
        p.parent_id, p.iteration_found = parent, it
        p.metadata.update(label=f"i{it}-b{pid[-1]}")
        return p

    best = judged("b0", 1, 1.5)
    later = [judged("c1", 2, 1.2, "b0"), judged("c2", 2, 1.4, "b0"),
             judged("c3", 3, -1.0, "b0", status=False), judged("c4", 3, 1.3, "c1")]
    history = {1: [best], 2: later[:2], 3: later[2:]}
    said = stalled(history, best, 3, "every combination has been judged")
    assert said.startswith("The best (i1-b0, 1.50x) has not improved since iteration 1: of the 4 "
                           "candidates after it, 2 slower than their parent, "), said
    assert "1 faster than their parent, not the best" in said and "1 incorrect" in said
    assert said.endswith("; and every combination has been judged.")
    assert stalled(history, later[3], 3) == ""  # the best came in the last iteration
    assert stalled({}, None, 3) == ""
