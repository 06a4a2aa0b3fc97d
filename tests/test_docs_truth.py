"""The docs name only flags and settings that exist.

Every ``--flag`` the README and docs/*.md give to ``groupgate serve`` / ``groupgate dev`` (on a command
line, in a table's "flag" column, or alone in a code span of the operator docs) must be one the command's
parser takes, and every setting written as a configuration key (TOML examples, ``key = value`` code spans,
the first column of the settings tables, their "Kafka name" column, ``GROUPGATE_*`` variables) must be a
field or a Kafka-name alias of GatewayConfig / CoordinatorSettings. A flag or setting removed or renamed in
the code, and not in the docs, fails here. Prose is not read: only code spans, code blocks and tables.
"""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import AliasChoices, AliasPath, BaseModel

from gateway.config.coordinator import CoordinatorSettings
from gateway.config.settings import GatewayConfig
from gateway.ops.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Where a flag alone in a code span (`--managed-groups`) is taken for a flag of the groupgate command: the
# operator docs. Elsewhere such spans are as often the flags of Kafka's tools, pytest or a benchmark.
OPERATOR_DOCS = {"README.md", "gateway.md", "operations.md"}
# Flags of other tools that the operator docs show alone in a code span (benchmark flags are read from
# bench/*.py itself).
OTHER_TOOLS = {"--ulimit": "docker run"}

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
SPAN = re.compile(r"`([^`]+)`")
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
COMMAND = re.compile(r"\bgroupgate\s+(serve|dev)\b([^\n]*)")
ASSIGNMENT = re.compile(r'^\s*("?)([A-Za-z_][\w.]*)\1\s+=\s+\S')
ENV = re.compile(r"\bGROUPGATE_([A-Z0-9_]+)")


@dataclass(frozen=True)
class Finding:
    doc: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.what}"


# --- what the code has -------------------------------------------------------------------------------------


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...], out: dict[str, set[str]]) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                _walk(sub, (*path, name), out)
        else:
            out.setdefault(" ".join(path), set()).update(action.option_strings)


@cache
def command_flags() -> dict[str, frozenset[str]]:
    """Flags by subcommand path ("serve", "dev", "state verify", ...), and "*": any groupgate flag."""
    found: dict[str, set[str]] = {}
    _walk(build_parser(), (), found)
    out = {k: frozenset(v) for k, v in found.items()}
    out["*"] = frozenset(f for v in found.values() for f in v)
    return out


@cache
def bench_flags() -> frozenset[str]:
    text = "\n".join(p.read_text() for p in (ROOT / "bench").glob("*.py"))
    return frozenset(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", text))


def _names(model: type[BaseModel]) -> frozenset[str]:
    names: set[str] = set()
    for name, field in model.model_fields.items():
        names.add(name)
        for alias in (field.alias, field.validation_alias):
            if isinstance(alias, str):
                names.add(alias)
            elif isinstance(alias, AliasChoices):
                names.update(c for c in alias.choices if isinstance(c, str))
            elif isinstance(alias, AliasPath):
                names.update(p for p in alias.path if isinstance(p, str))
    return frozenset(names)


@cache
def setting_names() -> dict[str, frozenset[str]]:
    gateway, coordinator = _names(GatewayConfig), _names(CoordinatorSettings)
    return {"gateway": gateway, "coordinator": coordinator, "any": gateway | coordinator}


# --- what the docs say ---------------------------------------------------------------------------------------


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _blocks(text: str) -> list[tuple[str, str, int]]:
    """Fenced code blocks: (info string, body, line of the body's first line)."""
    return [(m.group(1).strip(), m.group(2), _line_of(text, m.start(2))) for m in FENCE.finditer(text)]


def _prose(text: str) -> str:
    """The text with its fenced blocks blanked (newlines kept, so line numbers stay right)."""
    return FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _spans(text: str) -> list[tuple[str, int]]:
    prose = _prose(text)
    return [(m.group(1), _line_of(prose, m.start())) for m in SPAN.finditer(prose)]


def _command_flags(doc: str, piece: str, line: int) -> list[Finding]:
    """``groupgate serve|dev ...`` in ``piece`` (a code block or span): each flag it gives."""
    out = []
    piece = re.sub(r"\\\n", " ", piece)  # shell continuation lines
    for m in COMMAND.finditer(piece):
        command, rest = m.group(1), re.split(r"(?<!\\)\||&&|;|#|\)", m.group(2))[0]
        at = line + piece.count("\n", 0, m.start())
        for flag in FLAG.findall(rest):
            if flag not in command_flags()[command]:
                out.append(Finding(doc, at, f"`groupgate {command}` has no flag {flag}"))
    return out


def check_flags(doc: str, text: str) -> list[Finding]:
    out: list[Finding] = []
    for _, body, line in _blocks(text):
        out += _command_flags(doc, body, line)
    for span, line in _spans(text):
        out += _command_flags(doc, span, line)
        alone = FLAG.match(span)
        if doc in OPERATOR_DOCS and alone and alone.start() == 0 and "groupgate" not in span:
            flag = alone.group(1)
            known = command_flags()["*"] | bench_flags() | OTHER_TOOLS.keys()
            if flag not in known:
                out.append(Finding(doc, line, f"{flag} is a flag of no groupgate command (nor a benchmark's)"))
    out += _table_flags(doc, text)
    return out


def _tables(text: str) -> list[tuple[list[str], list[tuple[list[str], int]]]]:
    """Markdown tables outside code blocks: (header cells, [(row cells, line)])."""
    lines = _prose(text).split("\n")
    tables = []
    i = 0
    while i + 1 < len(lines):
        if lines[i].startswith("|") and re.match(r"^\|\s*:?-{3,}", lines[i + 1]):
            header = _cells(lines[i])
            rows = []
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append((_cells(lines[j]), j + 1))
                j += 1
            tables.append((header, rows))
            i = j
        else:
            i += 1
    return tables


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def _table_flags(doc: str, text: str) -> list[Finding]:
    """A settings table's "flag" column: a flag of serve and dev, or of serve alone where it says so."""
    out = []
    for header, rows in _tables(text):
        if "flag" not in header:
            continue
        col = header.index("flag")
        for cells, line in rows:
            cell = cells[col] if col < len(cells) else ""
            commands = ["serve"] if "(serve)" in cell else ["serve", "dev"]
            for flag in FLAG.findall(cell):
                for command in commands:
                    if flag not in command_flags()[command]:
                        out.append(Finding(doc, line, f"`groupgate {command}` has no flag {flag} (table column 'flag')"))
    return out


def _expand(name: str) -> list[str]:
    """``group.consumer.min/max.session.timeout.ms`` -> the min and the max name."""
    m = re.search(r"(\w+)/(\w+)", name)
    if m is None:
        return [name]
    return [name[: m.start()] + alt + name[m.end():] for alt in (m.group(1), m.group(2))]


def _outside_parentheses(cell: str) -> str:
    while True:
        stripped = re.sub(r"\([^()]*\)", "", cell)
        if stripped == cell:
            return cell
        cell = stripped


def check_settings(doc: str, text: str) -> list[Finding]:
    names = setting_names()
    out: list[Finding] = []

    def need(name: str, section: str, line: int, where: str) -> None:
        for n in _expand(name):
            if n not in names[section]:
                owner = {"gateway": "GatewayConfig", "coordinator": "CoordinatorSettings"}.get(section, "any model")
                out.append(Finding(doc, line, f"setting {n!r} ({where}) is no field or alias of {owner}"))

    # TOML examples: ```toml blocks, and blocks with a [gateway] / [coordinator] table.
    for info, body, line in _blocks(text):
        if info != "toml" and not re.search(r"^\[(gateway|coordinator)[\].]", body, re.M):
            continue
        try:
            data = tomllib.loads(body)
        except tomllib.TOMLDecodeError as e:
            out.append(Finding(doc, line, f"TOML example does not parse: {e}"))
            continue
        for key, where in _toml_keys(data):
            need(key, where, line, "TOML example")
    # `key = value` code spans, GROUPGATE_* variables.
    # `key = value` code spans of the operator docs (elsewhere they are as often event fields or formulas),
    # where the span is TOML (`listener_sasl_mode = "terminate"`, `coordinator.enabled = false`).
    for span, line in _spans(text) if doc in OPERATOR_DOCS else ():
        m = ASSIGNMENT.match(span)
        if m and _is_toml(span):
            key = m.group(2)
            section, _, rest = key.partition(".")
            if section in ("coordinator", "gateway") and rest:
                need(rest, section, line, f"`{span}`")
            elif m.group(1) or "." not in key:  # Kafka names are quoted in TOML
                need(key, "any", line, f"`{span}`")
    for m in ENV.finditer(_prose(text)):
        env = m.group(1).lower()
        line = _line_of(text, m.start())
        if env.startswith("coordinator_") and env != "coordinator_":
            need(env.removeprefix("coordinator_"), "coordinator", line, f"GROUPGATE_{m.group(1)}")
        elif not env.endswith("_"):  # GROUPGATE_<KEY>, GROUPGATE_COORDINATOR_* as a pattern
            need(env, "gateway", line, f"GROUPGATE_{m.group(1)}")
    # Settings tables: the first column (header "key" or "setting") and the "Kafka name" column.
    for header, rows in _tables(text):
        if not header or header[0] not in ("key", "setting"):
            continue
        kafka_col = header.index("Kafka name") if "Kafka name" in header else None
        for cells, line in rows:
            for name in re.findall(r"`([^`]+)`", cells[0]):
                need(name, "any", line, f"table column '{header[0]}'")
            if kafka_col is not None and kafka_col < len(cells):
                for name in re.findall(r"`([^`]+)`", _outside_parentheses(cells[kafka_col])):
                    need(name, "any", line, "table column 'Kafka name'")
    return out


def _is_toml(span: str) -> bool:
    try:
        tomllib.loads(span)
    except tomllib.TOMLDecodeError:
        return False
    return True


def _toml_keys(data: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def coordinator(table: dict[str, Any]) -> None:
        for k, v in table.items():
            out.append((k, "coordinator"))
            if k == "group_configs" and isinstance(v, dict):
                CoordinatorSettings.model_validate({"group_configs": v})  # per-group names checked by the model

    def gateway(table: dict[str, Any]) -> None:
        for k, v in table.items():
            if k == "coordinator" and isinstance(v, dict):
                coordinator(v)
            else:
                out.append((k, "gateway"))

    for key, value in data.items():
        if key == "gateway" and isinstance(value, dict):
            gateway(value)
        elif key == "coordinator" and isinstance(value, dict):
            coordinator(value)
        else:
            out.append((key, "gateway"))
    return out


# --- the tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_serve_and_dev_flag_in_the_docs_exists(path: Path) -> None:
    found = check_flags(path.name, path.read_text())
    assert not found, "flags the docs name but the command lacks:\n" + "\n".join(map(str, found))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_setting_in_the_docs_exists(path: Path) -> None:
    found = check_settings(path.name, path.read_text())
    assert not found, "settings the docs name but the configuration lacks:\n" + "\n".join(map(str, found))


def test_the_docs_are_actually_read() -> None:
    """Guards the extraction itself: the well-known flags and settings are found where they are written."""
    readme = (ROOT / "README.md").read_text()
    gateway = (ROOT / "docs" / "gateway.md").read_text()
    assert any("--managed-groups" in span for span, _ in _spans(readme))
    tables = [h for h, _ in _tables(gateway)]
    assert ["key", "Kafka name", "default", "flag", "meaning"] in tables
    assert any(info == "toml" for info, _, _ in _blocks(gateway))


MADE_UP = """
Run `groupgate serve --upstream k:9092 --managed-grups 'orders-.*'` and then
```
groupgate dev --listen 127.0.0.1:0 \\
    --no-such-flag
```
Set `--managed-grups` alone, or `coordinator.managed_grups = "x"`, or `GROUPGATE_COORDINATOR_MANAGED_GRUPS`.

```toml
[coordinator]
managed_grups = "x"
"group.consumer.session.timeout.mss" = 1
```

| key | Kafka name | default | flag | meaning |
| --- | --- | --- | --- | --- |
| `session_timeout` | `group.consumer.session.timeout.mss` | 1 | `--session-timeout` (serve) | made up |
| `managed_groups` | | `.*` | `--managed-groups` | real |

Prose about --anything-at-all and managed_grups = 3 outside code is not read.
"""


def test_made_up_flags_and_settings_are_reported() -> None:
    flags = {f.what.split()[-1] if "table" not in f.what else f.what for f in check_flags("operations.md", MADE_UP)}
    assert "--managed-grups" in flags and "--no-such-flag" in flags, flags
    assert any("--session-timeout" in f for f in flags), flags
    assert not any("--anything-at-all" in f for f in flags), flags
    assert not any("--managed-groups" == f for f in flags), flags
    settings = " ".join(str(f) for f in check_settings("gateway.md", MADE_UP))
    for name in ("'managed_grups'", "'group.consumer.session.timeout.mss'", "'session_timeout'"):
        assert name in settings, settings
    assert settings.count("'managed_grups'") == 3, settings  # TOML, the span, the variable; not the prose
    assert "'managed_groups'" not in settings, settings
