"""Throwaway PEM key material for TLS tests, made with the ``openssl`` command: a CA, a server certificate
for 127.0.0.1/localhost, a client certificate, and a second CA that signed none of them."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def openssl_missing_reason() -> str | None:
    return None if shutil.which("openssl") else "no openssl command to make test certificates with"


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _key(name: str, cwd: Path) -> None:
    # PKCS#8, unencrypted ("BEGIN PRIVATE KEY"): what Kafka's PEM key stores read.
    _run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{name}.key", cwd=cwd)


def _ca(name: str, cwd: Path) -> None:
    _key(name, cwd)
    _run(
        "req", "-x509", "-new", "-key", f"{name}.key", "-sha256", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-out", f"{name}.pem", cwd=cwd,
    )  # fmt: skip


def _leaf(name: str, ca: str, ext: str, cwd: Path) -> None:
    _key(name, cwd)
    _run("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out", f"{name}.csr", cwd=cwd)
    (cwd / f"{name}.ext").write_text(ext)
    _run(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
        "-days", "2", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=cwd,
    )  # fmt: skip


@dataclass(frozen=True)
class Pki:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)

    @property
    def ca(self) -> str:
        return self.path("ca.pem")

    @property
    def other_ca(self) -> str:
        return self.path("other-ca.pem")

    @property
    def server_cert(self) -> str:
        return self.path("server.pem")

    @property
    def server_key(self) -> str:
        return self.path("server.key")

    @property
    def client_cert(self) -> str:
        return self.path("client.pem")

    @property
    def client_key(self) -> str:
        return self.path("client.key")

    @property
    def server_keystore(self) -> str:
        """Key followed by certificate in one PEM file (a Kafka ssl.keystore.location of type PEM)."""
        return self.path("server-keystore.pem")


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", directory)
    _ca("other-ca", directory)
    _leaf(
        "server",
        "ca",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        directory,
    )
    _leaf("client", "ca", "extendedKeyUsage=clientAuth\n", directory)
    (directory / "server-keystore.pem").write_text(
        (directory / "server.key").read_text() + (directory / "server.pem").read_text()
    )
    return Pki(directory)
