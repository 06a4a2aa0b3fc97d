"""A strict reader of the Prometheus text format 0.0.4, for the metrics tests."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(\{{(.*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count", "")}


@dataclass
class Family:
    name: str
    help: str = ""
    type: str = ""
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def value(self, **labels: str) -> float:
        """The value of the one sample (of the family's own name) whose labels include ``labels``."""
        hits = [v for n, ls, v in self.samples if n == self.name and all(ls.get(k) == x for k, x in labels.items())]
        assert len(hits) == 1, (self.name, labels, self.samples)
        return hits[0]


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        assert m is not None, f"bad label set {text!r} at {pos}"
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
    return out


def _number(text: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    assert re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text), f"not a number: {text!r}"
    return float(text)


def parse(text: str) -> dict[str, Family]:
    """Every line is HELP, TYPE or ``name{labels} value``; each sample belongs to a family declared
    (HELP and TYPE) before it; histogram buckets are cumulative and end in +Inf == _count."""
    assert text.endswith("\n")
    families: dict[str, Family] = {}
    current: Family | None = None
    for line in text.splitlines():
        assert line, "empty line"
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert re.fullmatch(_NAME, name) and name not in families, line
            current = families[name] = Family(name, help_text)
            continue
        if line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert current is not None and current.name == name and not current.type, line
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            current.type = kind
            continue
        assert not line.startswith("#"), line
        m = _SAMPLE.match(line)
        assert m is not None, f"not a sample line: {line!r}"
        assert current is not None and current.type, f"sample before HELP/TYPE: {line!r}"
        name = m.group(1)
        allowed = [current.name + s for s in _SUFFIXES.get(current.type, ("",))]
        assert name in allowed, f"{name} outside its family {current.name}"
        current.samples.append((name, _labels(m.group(3) or ""), _number(m.group(4))))
    for fam in families.values():
        assert fam.type, fam.name
        if fam.type == "counter":
            assert fam.name.endswith("_total"), fam.name
            assert all(v >= 0 for _, _, v in fam.samples), fam.name
        if fam.type == "histogram":
            _check_histogram(fam)
    return families


def _check_histogram(fam: Family) -> None:
    series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    counts: dict[tuple[tuple[str, str], ...], float] = {}
    for name, labels, value in fam.samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        if name.endswith("_bucket"):
            series.setdefault(key, []).append((_number(labels["le"]), value))
        elif name.endswith("_count"):
            counts[key] = value
    for key, buckets in series.items():
        bounds = [b for b, _ in buckets]
        assert bounds == sorted(bounds) and math.isinf(bounds[-1]), (fam.name, key)
        values = [v for _, v in buckets]
        assert values == sorted(values), (fam.name, key, values)
        assert values[-1] == counts[key], (fam.name, key)
