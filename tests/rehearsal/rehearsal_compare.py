"""Comparing the pipeline's tables and summary with the oracle's."""

from __future__ import annotations

import math
from typing import Any

from rehearsal.tables import TABLES


def as_reported(summary: dict[str, Any], paths: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A summary as `rehearse report` writes it for these inputs: with what the simulations beside them used and
    the calibration behind each spread row (rehearsal.report_provenance.annotate), which the analysis itself does not
    compute."""
    from rehearsal.cli import find_calibration_sources, find_simulations
    from rehearsal.report_provenance import annotate

    rows, sources = find_calibration_sources(list(paths))
    return annotate(summary, find_simulations(list(paths)), rows, sources)


def _key(row: dict[str, Any], cols: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple((row[c] is None, row[c] if row[c] is not None else 0) for c in cols)


def sorted_rows(rows: list[dict[str, Any]], cols: tuple[str, ...]) -> list[dict[str, Any]]:
    return sorted(({c: r[c] for c in cols} for r in rows), key=lambda r: _key(r, cols))


def same(a: Any, b: Any, path: str = "") -> list[str]:
    """Differences between two JSON-like values; floats compared with a relative tolerance."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'first' if k in a else 'second'}")
            else:
                out += same(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} rows != {len(b)} rows"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in same(x, y, f"{path}[{i}]")]
    if isinstance(a, bool) or isinstance(b, bool):
        return [] if a is b else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None or not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9):
            return [f"{path}: {a!r} != {b!r}"]
        return []
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def table_differences(spark_tables: dict[str, list[dict[str, Any]]], oracle: Any) -> list[str]:
    out = []
    for name, cols in TABLES.items():
        mine = sorted_rows(spark_tables[name], cols)
        ref = sorted_rows(getattr(oracle, name), cols)
        out += same(mine, ref, name)
    return out
