"""Ports and readiness: what both backends (processes, containers) share."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port_block(n: int, host: str = "127.0.0.1", attempts: int = 200) -> int:
    """A port P with P..P+n-1 all free right now (ports are only reserved by binding, so this can race)."""
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(20000, 60000)
        socks: list[socket.socket] = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((host, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no block of {n} free ports found")


def wait_tcp(host: str, port: int, timeout_s: float) -> None:
    """Until something accepts connections on host:port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"nothing served on {host}:{port} within {timeout_s}s")


def readyz(url: str, timeout_s: float = 2.0) -> tuple[int, str]:
    """(status, body) of one GET of the gateway's /readyz; status 0 when nothing answered."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - http://host:port/readyz
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, urllib.error.URLError) as e:
        return 0, str(e)


def wait_ready(url: str, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Poll ``url`` (a gateway's /readyz) until it answers 200.

    ``alive`` is asked between polls so that a gateway that exited is reported at once rather than
    after the whole timeout. Raises TimeoutError with the last answer (the gateway's reasons).
    """
    deadline = time.monotonic() + timeout_s
    last: tuple[int, str] = (0, "not asked yet")
    while time.monotonic() < deadline:
        last = readyz(url)
        if last[0] == 200:
            return
        if not alive():
            raise RuntimeError(f"the gateway exited before {url} answered 200 (last: {last[0]} {last[1].strip()})")
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s}s (last: {last[0]} {last[1].strip()})")


def metric(readyz_url: str, name: str) -> float | None:
    """One unlabelled gauge or counter (``groupgate_<name>``) from the /metrics beside ``readyz_url``."""
    import urllib.request

    url = readyz_url.rsplit("/", 1)[0] + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:  # noqa: S310 - http://host:port/metrics
            text = resp.read().decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == f"groupgate_{name}":
            return float(value)
    return None
