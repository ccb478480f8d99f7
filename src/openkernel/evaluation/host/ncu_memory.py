"""Nsight Compute's memory workload tables for one kernel: the command, the parser, the table.

With ``eval_config.profile_memory`` a correct candidate is profiled once more, under ``ncu
--section MemoryWorkloadAnalysis_Tables --csv --page raw``: the section collects the counters
of Nsight Compute's memory tables (its own choice of metrics, so none is guessed here), and the
raw page prints them as columns, one row per kernel launch after a row of units. The table kept
in ``profiler_data["memory_tables"]`` is what the dashboard draws as its memory heatmap: memory
units (L1/TEX, L2, DRAM) by transfer kind (global, local and shared loads and stores; L2 and
DRAM reads and writes), each cell its instructions, requests, sectors (or shared-memory
wavefronts), bytes and hit rate, summed over the candidate's launches (hit rates weighted by
sectors). A counter this GPU or ncu version does not report leaves its cell's value out.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from openkernel.evaluation.protocol import NVTX_RANGE

SECTION = "MemoryWorkloadAnalysis_Tables"
SECTOR_BYTES = 32
UNITS = ("L1/TEX", "L2", "DRAM")
KINDS = ("global load", "global store", "local load", "local store", "shared load",
         "shared store", "read", "write")
QUANTITIES = ("instructions", "requests", "sectors", "wavefronts", "bytes", "hit_rate_pct")


def _l1(space: str, op: str, kind: str) -> dict[str, tuple[str, str, str]]:
    pipe = f"pipe_lsu_mem_{space}_op_{op}"
    return {f"smsp__sass_inst_executed_op_{space}_{op}.sum": ("L1/TEX", kind, "instructions"),
            f"l1tex__t_requests_{pipe}.sum": ("L1/TEX", kind, "requests"),
            f"l1tex__t_sectors_{pipe}.sum": ("L1/TEX", kind, "sectors"),
            f"l1tex__t_sector_{pipe}_hit_rate.pct": ("L1/TEX", kind, "hit_rate_pct")}


# Nsight Compute metric -> (memory unit, transfer kind, quantity)
METRICS: dict[str, tuple[str, str, str]] = {
    **_l1("global", "ld", "global load"), **_l1("global", "st", "global store"),
    **_l1("local", "ld", "local load"), **_l1("local", "st", "local store"),
    "smsp__sass_inst_executed_op_shared_ld.sum": ("L1/TEX", "shared load", "instructions"),
    "smsp__sass_inst_executed_op_shared_st.sum": ("L1/TEX", "shared store", "instructions"),
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": ("L1/TEX", "shared load", "wavefronts"),
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": ("L1/TEX", "shared store", "wavefronts"),
    "lts__t_requests_srcunit_tex_op_read.sum": ("L2", "read", "requests"),
    "lts__t_sectors_srcunit_tex_op_read.sum": ("L2", "read", "sectors"),
    "lts__t_sector_op_read_hit_rate.pct": ("L2", "read", "hit_rate_pct"),
    "lts__t_requests_srcunit_tex_op_write.sum": ("L2", "write", "requests"),
    "lts__t_sectors_srcunit_tex_op_write.sum": ("L2", "write", "sectors"),
    "lts__t_sector_op_write_hit_rate.pct": ("L2", "write", "hit_rate_pct"),
    "dram__sectors_read.sum": ("DRAM", "read", "sectors"),
    "dram__bytes_read.sum": ("DRAM", "read", "bytes"),
    "dram__sectors_write.sum": ("DRAM", "write", "sectors"),
    "dram__bytes_write.sum": ("DRAM", "write", "bytes"),
}
_SCALE = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


@dataclass(frozen=True)
class MemoryProfile:
    """The profiler a memory-tables run is made under (a key of its own among spare workers)."""

    binary: str


def memory_command(ncu: str, python_argv: list[str]) -> list[str]:
    """ncu around a worker command: the memory tables' counters of the candidate's kernels."""
    return [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--nvtx", "--nvtx-include",
            f"{NVTX_RANGE}/", "--section", SECTION, "--target-processes", "all", *python_argv]


def _value(text: str, unit: str) -> float | None:
    text = (text or "").strip().replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    unit = (unit or "").strip()
    if len(unit) > 1 and unit[0] in _SCALE and unit[1:].isalpha() and unit[1:].islower():
        value *= _SCALE[unit[0]]  # "Kbyte", "Msector": ncu scales large values
    return value


def parse_raw_csv(text: str) -> list[dict[str, float]]:
    """One dict per kernel launch of ``ncu --csv --page raw``: metric -> value (base units)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    if len(rows) < 2:
        return []
    header, units = rows[0], rows[1]
    launches = []
    for row in rows[2:]:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue  # ==PROF== lines, a units row repeated, a truncated row
        values = {}
        for name, unit, cell in zip(header, units, row):
            if name in METRICS:
                value = _value(cell, unit)
                if value is not None:
                    values[name] = value
        launches.append(values)
    return launches


def memory_tables(launches: list[dict[str, float]]) -> dict:
    """The heatmap's table from the launches (empty when none reported a memory counter)."""
    sums: dict[tuple[str, str], dict[str, float]] = {}
    hits: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for launch in launches:
        for metric, value in launch.items():
            unit, kind, quantity = METRICS[metric]
            if quantity == "hit_rate_pct":
                weight = launch.get(metric.replace("_hit_rate.pct", ".sum")
                                    .replace("t_sector_", "t_sectors_"), 1.0)
                hits.setdefault((unit, kind), []).append((value, weight or 1.0))
            else:
                cell = sums.setdefault((unit, kind), {})
                cell[quantity] = cell.get(quantity, 0.0) + value
    cells = []
    for unit in UNITS:
        for kind in KINDS:
            cell = dict(sums.get((unit, kind), {}))
            if "bytes" not in cell and "sectors" in cell:
                cell["bytes"] = cell["sectors"] * SECTOR_BYTES
            rates = hits.get((unit, kind))
            if rates:
                total = sum(w for _, w in rates)
                cell["hit_rate_pct"] = sum(v * w for v, w in rates) / total
            if cell:
                cells.append({"unit": unit, "kind": kind, **cell})
    if not cells:
        return {}
    return {"source": f"Nsight Compute ({SECTION})", "kernels": len(launches), "cells": cells}
