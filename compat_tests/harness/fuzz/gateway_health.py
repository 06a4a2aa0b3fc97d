"""What the gateway process shows after a fuzzing run: the Python tracebacks in its log, by signature, and
its resident memory."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

_TRACEBACK = "Traceback (most recent call last):"
_FILE_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def traceback_signatures(log_text: str) -> Counter[str]:
    """``ExceptionType at file:function`` (innermost function) for every Python traceback in a log.

    A chained traceback ("During handling of the above exception ...") counts once, by its last exception.
    """
    out: Counter[str] = Counter()
    lines = log_text.splitlines()
    i = 0
    chained: str | None = None
    while i < len(lines):
        if _TRACEBACK not in lines[i]:
            i += 1
            continue
        where = "?"
        j = i + 1
        while j < len(lines):
            m = _FILE_LINE.match(lines[j])
            # The innermost named function (a comprehension is named after the function it sits in).
            if m and not (m.group(3).startswith("<") and m.group(3) != "<module>" and where != "?"):
                where = f"{Path(m.group(1)).name}:{m.group(3)}"
            elif m:
                pass
            elif not (lines[j].startswith(" ") or not lines[j].strip()):
                break
            j += 1
        exc = lines[j].split(":", 1)[0].strip() if j < len(lines) else "?"
        if chained is not None:
            out[chained] -= 1
            out += Counter()  # drops the zero count
        chained = f"{exc} at {where}"
        out[chained] += 1
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        if k < len(lines) and lines[k].startswith(("During handling of the above", "The above exception was")):
            i = k + 1
        else:
            chained = None
            i = j + 1
    return out


def rss_kb(pid: int | None) -> int:
    """Resident set size of a process in KiB (Linux /proc), 0 when unknown."""
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
