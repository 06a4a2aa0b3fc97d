"""A real Spark standalone cluster on loopback: one master and workers started from the PySpark
distribution (``bin/spark-class``) as child processes, each with 1 core and a small heap."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class ClusterStartError(RuntimeError):
    pass


@dataclass
class StandaloneCluster:
    work: Path
    workers: int = 2
    worker_memory: str = "768m"
    master_url: str = ""
    master_ui: str = ""
    worker_uis: list[str] = field(default_factory=list)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_HOME"] = str(spark_home())
        env["SPARK_DAEMON_MEMORY"] = "256m"  # the master's and workers' own JVMs
        env["SPARK_LOCAL_DIRS"] = str(self.work / "local")
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        return env

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child process
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        self._procs.append(
            subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._env(),
                start_new_session=True,
            )  # fmt: skip
        )
        log.close()

    def state(self, ui: str | None = None) -> dict[str, Any]:
        with urllib.request.urlopen(f"{ui or self.master_ui}/json/", timeout=5) as r:
            return dict(json.load(r))

    def start(self) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        port, ui = free_port(), free_port()
        self.master_url, self.master_ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}"
        self._spawn(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
            "--webui-port", str(ui),
        )  # fmt: skip
        for i in range(self.workers):
            wui = free_port()
            self.worker_uis.append(f"http://127.0.0.1:{wui}")
            self._spawn(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                "--cores", "1", "--memory", self.worker_memory, "--webui-port", str(wui),
                "--work-dir", str(self.work / f"worker-{i}"),
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        alive = 0
        while time.monotonic() < deadline:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead:
                raise ClusterStartError(f"a Spark daemon exited ({dead[0].args}): {self.logs()}")
            try:
                alive = sum(1 for w in self.state()["workers"] if w["state"] == "ALIVE")
            except OSError:
                alive = 0
            if alive == self.workers:
                return self
            time.sleep(0.5)
        raise ClusterStartError(f"{alive} of {self.workers} workers registered in {START_TIMEOUT_S}s: {self.logs()}")

    def logs(self, n: int = 15) -> str:
        out = []
        for f in sorted(self.work.glob("*.log")):
            lines = f.read_text(errors="replace").splitlines()[-n:]
            out.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop(self) -> None:
        # Workers first, so that they do not try to reconnect to a master that is gone.
        for p in reversed(self._procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self._procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        self._procs.clear()
