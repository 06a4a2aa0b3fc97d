"""The rehearsal report's building blocks (rehearsal/report.py): escaping, numbers and tables in HTML, and
the colour and the words each client mix is shown with."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

MIX_COLOURS = {
    "classic-eager": "#d62728",
    "classic-cooperative": "#ff7f0e",
    "translate": "#1f77b4",
    "consumer": "#2ca02c",
}
# How the verdict names each mix: what an operator compares, in words.
MIX_LABELS = {
    "classic-eager": "classic eager",
    "classic-cooperative": "classic cooperative",
    "translate": "translate mode",
    "consumer": "new protocol",
}
MEMBER_COLOURS = (
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac",
    "#e15759", "#ff9da7",
)  # fmt: skip


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def num(x: Any, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
