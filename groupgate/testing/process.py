"""``groupgate serve`` as a child process, so tests can SIGKILL and restart it.

The gateway prints one stdout line ``bootstrap=HOST:PORT`` once it serves. With ``metrics_port`` set it
also serves /readyz, and ``start()`` returns only once that answers 200 (group state replayed, topic
metadata fetched). A restart reuses the same listen port so that clients configured with the old
bootstrap find the gateway again, as they would after a real restart.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from groupgate.testing._net import free_port_block, wait_ready

READY_TIMEOUT_S = 30.0


def groupgate_binary() -> str:
    """The ``groupgate`` script installed beside the running interpreter (.venv/bin), else on PATH."""
    beside = Path(sys.executable).parent / "groupgate"
    if beside.exists():
        return str(beside)
    found = shutil.which("groupgate")
    if found is None:
        raise RuntimeError("the groupgate command is not installed (pip install -e . in the virtualenv)")
    return found


class GatewayStartError(RuntimeError):
    pass


@dataclass
class GatewayProcess:
    upstream: str
    extra_args: list[str] = field(default_factory=list)
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    log_dir: Path | None = None
    # The child's RLIMIT_NOFILE (soft and hard), e.g. to run it at the descriptor limit; None: inherited.
    nofile: int | None = None
    # Variables added to the child's environment (GROUPGATE_COORDINATOR_* settings, say).
    env: Mapping[str, str] = field(default_factory=dict)
    # Serve /metrics, /healthz and /readyz on listen_host:metrics_port and wait for /readyz (None: off).
    metrics_port: int | None = None
    bootstrap: str = ""
    _proc: subprocess.Popen[str] | None = field(default=None, init=False, repr=False)
    _starts: int = field(default=0, init=False, repr=False)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def readyz_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://{self.listen_host}:{self.metrics_port}/readyz"

    @property
    def log_path(self) -> Path:
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="groupgate-gw-"))
        return self.log_dir / "gateway.log"

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> GatewayProcess:
        if self.alive():
            raise GatewayStartError("gateway already running")
        first = self._starts == 0
        for attempt in range(3):
            try:
                return self._start_once(timeout_s)
            except GatewayStartError as e:
                # A port found free can be taken (another process's ephemeral port) before the gateway binds
                # it. A first start moves to a fresh block; a restart must keep its ports, so it does not.
                if not (first and attempt < 2 and "address already in use" in str(e)):
                    raise
                self.listen_port = free_port_block(8)
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> GatewayProcess:
        cmd = [
            groupgate_binary(),
            "serve",
            "--upstream",
            self.upstream,
            "--listen",
            f"{self.listen_host}:{self.listen_port}",
            *self.extra_args,
        ]
        if self.metrics_port is not None:
            cmd += ["--metrics-listen", f"{self.listen_host}:{self.metrics_port}"]
        if "--state-dir" not in self.extra_args and "--state-store" not in self.extra_args:
            # Tests that restart with state pass their own --state-dir (or --state-store kafka).
            cmd.append("--ephemeral-state")
        self._starts += 1
        log = open(self.log_path, "a")  # noqa: SIM115 - handed to the child process
        log.write(f"--- start #{self._starts}: {' '.join(cmd)}\n")
        log.flush()
        self._proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env} if self.env else None,
            text=True,
            start_new_session=True,
            preexec_fn=None if self.nofile is None else self._limit_descriptors,
        )
        log.close()
        self.bootstrap = self._await_bootstrap(self._proc, timeout_s)
        host, _, port = self.bootstrap.rpartition(":")
        self.listen_port = int(port)  # a restart comes back on the same port
        if self.readyz_url is not None:
            try:
                wait_ready(self.readyz_url, timeout_s, alive=self.alive)
            except (TimeoutError, RuntimeError) as e:
                self.kill()
                raise GatewayStartError(f"{e}; log {self.log_path}:\n{self.tail()}") from e
        return self

    def _limit_descriptors(self) -> None:
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def _await_bootstrap(self, proc: subprocess.Popen[str], timeout_s: float) -> str:
        """Read stdout until the ``bootstrap=`` line; afterwards keep draining it into the log."""
        found: list[str] = []
        ready = threading.Event()
        assert proc.stdout is not None
        stdout = proc.stdout
        log_path = self.log_path

        def pump() -> None:
            with open(log_path, "a") as log:
                for line in stdout:
                    log.write(f"[stdout] {line}")
                    log.flush()
                    if not found and line.startswith("bootstrap="):
                        # `bootstrap=HOST:PORT`, possibly followed by more key=value words.
                        found.append(line.split()[0].split("=", 1)[1])
                        ready.set()
            ready.set()  # stdout closed: the process ended

        threading.Thread(target=pump, name=f"gateway-stdout-{proc.pid}", daemon=True).start()
        ready.wait(timeout_s)
        if found:
            return found[0]
        self.kill()
        raise GatewayStartError(
            f"groupgate serve printed no bootstrap= line within {timeout_s}s "
            f"(exit code {proc.returncode}); log {self.log_path}:\n{self.tail()}"
        )

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the gateway gets no chance to flush or say goodbye."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; returns the exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
        return proc.returncode

    def restart(self, *, hard: bool = True, timeout_s: float = READY_TIMEOUT_S) -> GatewayProcess:
        (self.kill if hard else self.stop)()
        return self.start(timeout_s)

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
