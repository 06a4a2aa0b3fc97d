"""TLS settings: how they load (file < env < flags), what they must look like, and how bad certificate or
key files surface (``serve`` exits 2 with "invalid configuration", naming the setting)."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from compat_tests.harness.tls_certs import Pki, make_pki, openssl_missing_reason
from gateway.config.settings import GatewayConfig, load_config
from gateway.ops import cli
from gateway.security import tls


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    reason = openssl_missing_reason()
    if reason:
        pytest.skip(reason)
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_is_off_by_default() -> None:
    config = GatewayConfig()
    assert tls.server_context(config) is None and tls.upstream_context(config) is None


def test_settings_come_from_toml_env_and_flags(tmp_path: Path) -> None:
    toml = tmp_path / "gw.toml"
    toml.write_text('[gateway]\nlistener_tls_cert = "/file/cert.pem"\nlistener_tls_key = "/file/key.pem"\n')
    env = {
        "GROUPGATE_UPSTREAM_TLS": "true",
        "GROUPGATE_UPSTREAM_TLS_CA": "/env/ca.pem",
        "GROUPGATE_UPSTREAM_TLS_CHECK_HOSTNAME": "false",
        "GROUPGATE_LISTENER_TLS_KEY": "/env/key.pem",
    }
    config = load_config(toml, {"listener_tls_client_ca": "/flag/ca.pem"}, environ=env)
    assert config.listener_tls_cert == "/file/cert.pem"
    assert config.listener_tls_key == "/env/key.pem"
    assert config.listener_tls_client_ca == "/flag/ca.pem"
    assert config.upstream_tls is True and config.upstream_tls_ca == "/env/ca.pem"
    assert config.upstream_tls_check_hostname is False


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"listener_tls_cert": "c.pem"}, "listener_tls_cert and listener_tls_key go together"),
        ({"upstream_tls": True, "upstream_tls_key": "k.pem"}, "upstream_tls_cert and upstream_tls_key"),
        ({"listener_tls_client_ca": "ca.pem"}, "listener_tls_client_ca needs listener_tls_cert"),
        ({"upstream_tls_ca": "ca.pem"}, "upstream_tls_ca set but upstream_tls is off"),
    ],
)
def test_incomplete_settings_are_rejected(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        GatewayConfig.model_validate(values)


def test_contexts_from_good_files(pki: Pki) -> None:
    config = GatewayConfig(
        listener_tls_cert=pki.server_cert,
        listener_tls_key=pki.server_key,
        listener_tls_client_ca=pki.ca,
        upstream_tls=True,
        upstream_tls_ca=pki.ca,
        upstream_tls_cert=pki.client_cert,
        upstream_tls_key=pki.client_key,
        upstream_tls_check_hostname=False,
    )
    server = tls.server_context(config)
    assert server is not None and server.verify_mode == ssl.CERT_REQUIRED
    upstream = tls.upstream_context(config)
    assert upstream is not None
    # Without the host check the chain is still verified.
    assert upstream.check_hostname is False and upstream.verify_mode == ssl.CERT_REQUIRED
    plain_listener = GatewayConfig(listener_tls_cert=pki.server_cert, listener_tls_key=pki.server_key)
    ctx = tls.server_context(plain_listener)
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE


def _serve(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = cli.main(["serve", "--upstream", "127.0.0.1:1", "--ephemeral-state", *flags])
    return code, capsys.readouterr().err


def test_serve_exits_2_on_a_missing_certificate(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.pem")
    code, err = _serve(capsys, "--tls-cert", missing, "--tls-key", pki.server_key)
    assert code == 2
    assert "invalid configuration" in err and f"listener_tls_cert={missing}: no such file" in err


def test_serve_exits_2_on_a_key_that_does_not_match(pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _serve(capsys, "--tls-cert", pki.server_cert, "--tls-key", pki.client_key)
    assert code == 2
    assert "invalid configuration" in err and "the key does not match the certificate" in err


def test_serve_exits_2_on_a_ca_file_that_is_not_pem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    code, err = _serve(capsys, "--upstream-tls", "--upstream-tls-ca", str(junk))
    assert code == 2
    assert "invalid configuration" in err and f"upstream_tls_ca={junk}" in err


def test_serve_exits_2_on_an_unreadable_key(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "key.pem"
    key.write_bytes(Path(pki.server_key).read_bytes())
    key.chmod(0)
    try:
        with key.open("rb"):
            pytest.skip("running as a user that reads files regardless of their mode")
    except PermissionError:
        pass
    code, err = _serve(capsys, "--tls-cert", pki.server_cert, "--tls-key", str(key))
    assert code == 2 and f"listener_tls_key={key}: cannot be read" in err


def _dated_cert(tmp_path: Path, start: str, end: str) -> tuple[str, str]:
    """A self-signed certificate valid from ``start`` until ``end`` (YYYYMMDDHHMMSSZ), and its key:
    ``openssl ca`` is the one openssl 3.0 command that takes explicit dates."""
    d = tmp_path / f"ca-{start}-{end}"
    d.mkdir()
    (d / "index.txt").write_text("")
    (d / "ca.cnf").write_text(
        "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
        "default_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n"
    )
    (d / "serial").write_text("01\n")
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)  # noqa: E731
    run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "k.pem")
    run("req", "-new", "-key", "k.pem", "-subj", "/CN=127.0.0.1", "-out", "c.csr")
    run(
        "ca", "-batch", "-config", "ca.cnf", "-selfsign", "-keyfile", "k.pem", "-in", "c.csr",
        "-startdate", start, "-enddate", end, "-out", "c.pem", "-notext",
    )  # fmt: skip
    return str(d / "c.pem"), str(d / "k.pem")


@pytest.mark.parametrize(
    ("start", "end", "verdict"),
    [
        ("20200101000000Z", "20200201000000Z", "has expired (valid from Jan  1 00:00:00 2020 GMT until Feb  1"),
        ("20990101000000Z", "21000101000000Z", "is not valid yet (valid from Jan  1 00:00:00 2099 GMT"),
    ],
)
def test_serve_exits_2_on_a_certificate_outside_its_validity(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str], start: str, end: str, verdict: str
) -> None:
    cert, key = _dated_cert(tmp_path, start, end)
    code, err = _serve(capsys, "--tls-cert", cert, "--tls-key", key)
    assert code == 2
    assert "invalid configuration" in err and f"listener_tls_cert={cert}: the certificate {verdict}" in err
    # The same check guards the certificate the gateway presents to the brokers.
    code, err = _serve(capsys, "--upstream-tls", "--upstream-tls-cert", cert, "--upstream-tls-key", key)
    assert code == 2 and f"upstream_tls_cert={cert}: the certificate {verdict}" in err
