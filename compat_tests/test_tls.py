"""TLS on both sides of the gateway, with real clients and a real broker.

Client side: kafka-python and confluent-kafka speak SSL to every gateway listener (bootstrap and the
per-broker ports that the rewritten Metadata hands out) in front of the plaintext broker, including a
consumer group, whose group APIs the gateway answers itself. A plaintext client against a TLS listener
and a client without a certificate against a mutual-TLS listener are turned away on their own connection.

Upstream side: the embedded broker gets an extra SSL listener (PEM key material, client certificates
required) and the gateway reaches it with upstream_tls.

The gateway runs as ``groupgate serve`` on uvloop (``--event-loop auto``, uvloop being a dependency of the
package) and, for the client side, also on asyncio's own loop (the default), since the TLS handshake goes
through ``loop.start_tls`` on either; its log says which loop it runs.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka import KafkaConsumer, KafkaProducer

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.gateway_proc import GatewayProcess, GatewayStartError
from compat_tests.harness.probe import split_address
from compat_tests.harness.tls_certs import Pki, make_pki, openssl_missing_reason
from gateway.ops.embedded_kafka import BrokerTls, EmbeddedKafka

pytestmark = pytest.mark.kafka

N = 30


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    reason = openssl_missing_reason()
    if reason:
        pytest.skip(reason)
    return make_pki(tmp_path_factory.mktemp("pki"))


def _serve(upstream: str, args: list[str], log_dir: Path) -> GatewayProcess:
    return GatewayProcess(upstream=upstream, listen_port=free_port_block(3), extra_args=args, log_dir=log_dir)


@pytest.fixture(scope="module", params=["auto", "asyncio"])
def tls_gateway(
    request: pytest.FixtureRequest, kafka: ProcessBackend, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    metrics = f"127.0.0.1:{free_port_block(1)}"
    args = ["--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--event-loop", request.param,
            "--metrics-listen", metrics]  # fmt: skip
    gw = _serve(kafka.bootstrap, args, tmp_path_factory.mktemp("gw")).start()
    try:
        yield gw
    finally:
        gw.stop()
        print(f"--- tail of {gw.log_path}\n{gw.tail(40)}")


@pytest.fixture(scope="module")
def mtls_gateway(
    kafka: ProcessBackend, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    args = ["--tls-cert", pki.server_cert, "--tls-key", pki.server_key, "--tls-client-ca", pki.ca]
    gw = _serve(kafka.bootstrap, args, tmp_path_factory.mktemp("gw")).start()
    try:
        yield gw
    finally:
        gw.stop()
        print(f"--- tail of {gw.log_path}\n{gw.tail(40)}")


def _ssl_kw(pki: Pki, cert: bool = False) -> dict[str, Any]:
    kw: dict[str, Any] = {"security_protocol": "SSL", "ssl_cafile": pki.ca}
    if cert:
        kw.update(ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key)
    return kw


def _kafka_python_round_trip(bootstrap: str, topic: str, group: str, **ssl_kw: Any) -> None:
    sent = [b"m-%d" % i for i in range(N)]
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **ssl_kw)
    try:
        for v in sent:
            producer.send(topic, v)
        producer.flush(60)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=1000,
        **ssl_kw,
    )
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        assert sorted(got) == sorted(sent)
        consumer.commit()
        committed = {tp.partition: consumer.committed(tp) for tp in consumer.assignment()}
    finally:
        consumer.close()
    # The group's commit went through the gateway's group coordinator and reads back.
    assert sum(o or 0 for o in committed.values()) == N


def _confluent_round_trip(bootstrap: str, topic: str, group: str, conf: dict[str, Any]) -> None:
    sent = [b"c-%d" % i for i in range(N)]
    errors: list[str] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for v in sent:
        producer.produce(topic, value=v, on_delivery=lambda err, _m: err and errors.append(str(err)))
    assert producer.flush(60) == 0 and not errors, errors[:3]
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **conf,
        }
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        assert sorted(got) == sorted(sent)
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=30)
    finally:
        consumer.close()
    # A partition that received no record has no committed offset (OFFSET_INVALID, -1001): the producer's
    # sticky partitioner may put every record in one partition.
    valid = [tp.offset for tp in committed if tp.offset >= 0]
    assert valid and sum(valid) == N, committed


def _api_versions_request() -> bytes:
    # ApiVersions v0: size, api key 18, version 0, correlation id 7, client id "probe".
    body = struct.pack(">hhih", 18, 0, 7, 5) + b"probe"
    return struct.pack(">i", len(body)) + body


def _read_until_closed(sock: socket.socket, timeout_s: float = 15.0) -> bytes:
    """Everything the peer sends until it closes the connection (an error counts as closed)."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except (ssl.SSLError, ConnectionError):
        pass
    return data


def _wait_for_log(gw: GatewayProcess, text: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log = gw.log_path.read_text(errors="replace")
        if text in log:
            return log
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not in the gateway log:\n{gw.tail(30)}")


# --- client side --------------------------------------------------------------------------------------


def test_gateway_runs_the_event_loop_the_setting_names(tls_gateway: GatewayProcess) -> None:
    expected = "asyncio" if "asyncio" in tls_gateway.extra_args else "uvloop"
    assert f"loop={expected}" in _wait_for_log(tls_gateway, "event loop")


def test_kafka_python_produces_and_consumes_in_a_group_over_tls(
    tls_gateway: GatewayProcess, pki: Pki, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(3)
    _kafka_python_round_trip(tls_gateway.bootstrap, topic, f"tls-kp-{uuid.uuid4().hex[:8]}", **_ssl_kw(pki))


def test_confluent_kafka_produces_and_consumes_in_a_group_over_tls(
    tls_gateway: GatewayProcess, pki: Pki, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(3)
    conf = {"security.protocol": "SSL", "ssl.ca.location": pki.ca}
    _confluent_round_trip(tls_gateway.bootstrap, topic, f"tls-ck-{uuid.uuid4().hex[:8]}", conf)


def _tls_failures_metric(gw: GatewayProcess) -> float:
    """groupgate_client_tls_handshake_failures_total from the gateway's /metrics."""
    metrics = gw.extra_args[gw.extra_args.index("--metrics-listen") + 1]
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    (line,) = [x for x in text.splitlines() if x.startswith("groupgate_client_tls_handshake_failures_total ")]
    return float(line.split()[1])


def test_a_plaintext_client_is_turned_away_and_the_gateway_keeps_serving(
    tls_gateway: GatewayProcess, pki: Pki, make_topic: Callable[..., str]
) -> None:
    failures_before = _tls_failures_metric(tls_gateway)
    with socket.create_connection(split_address(tls_gateway.bootstrap), timeout=10) as sock:
        sock.sendall(_api_versions_request())
        answer = _read_until_closed(sock)
    # No Kafka response (its correlation id 7 would follow the size), at most a TLS alert record.
    assert answer[4:8] != struct.pack(">i", 7)
    log = _wait_for_log(tls_gateway, "TLS handshake with a client failed")
    assert "127.0.0.1" in log.split("TLS handshake with a client failed", 1)[1].splitlines()[0]
    assert tls_gateway.alive()
    assert _tls_failures_metric(tls_gateway) == failures_before + 1
    # A TLS client right after it is served as usual.
    topic = make_topic(1)
    producer = KafkaProducer(bootstrap_servers=tls_gateway.bootstrap, **_ssl_kw(pki))
    try:
        meta = producer.send(topic, b"after").get(30)
    finally:
        producer.close()
    assert meta.topic == topic and meta.offset == 0


def test_a_client_that_does_not_trust_the_gateway_certificate_fails_to_connect(
    tls_gateway: GatewayProcess, pki: Pki
) -> None:
    ctx = ssl.create_default_context(cafile=pki.other_ca)
    with socket.create_connection(split_address(tls_gateway.bootstrap), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    assert tls_gateway.alive()


def test_mutual_tls_turns_away_a_client_without_a_certificate(
    mtls_gateway: GatewayProcess, pki: Pki, make_topic: Callable[..., str]
) -> None:
    ctx = ssl.create_default_context(cafile=pki.ca)
    with socket.create_connection(split_address(mtls_gateway.bootstrap), timeout=10) as raw:
        try:
            sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        except (ssl.SSLError, ConnectionError):
            answer = b""  # TLS 1.2: the handshake itself fails on the client too
        else:
            # TLS 1.3: the client finishes its half of the handshake; the server's alert arrives next.
            with sock:
                try:
                    sock.sendall(_api_versions_request())
                except (ssl.SSLError, ConnectionError):
                    pass
                answer = _read_until_closed(sock)
    assert answer == b""
    _wait_for_log(mtls_gateway, "TLS handshake with a client failed")
    # With a certificate signed by the trusted CA, the same listener serves a whole group round trip.
    topic = make_topic(2)
    _kafka_python_round_trip(
        mtls_gateway.bootstrap, topic, f"mtls-{uuid.uuid4().hex[:8]}", **_ssl_kw(pki, cert=True)
    )


# --- upstream side ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    """A second broker with an SSL listener that demands client certificates from our CA."""
    broker = EmbeddedKafka(
        data_dir=tmp_path_factory.mktemp("kafka-ssl"),
        tls=BrokerTls(keystore=pki.server_keystore, truststore=pki.ca, require_client_cert=True),
        heap="384m",
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.cleanup()


def _upstream_tls_args(pki: Pki, ca: str) -> list[str]:
    return [
        "--upstream-tls",
        "--upstream-tls-ca",
        ca,
        "--upstream-tls-cert",
        pki.client_cert,
        "--upstream-tls-key",
        pki.client_key,
    ]


def test_the_gateway_reaches_a_broker_over_mutual_tls(
    tls_broker: EmbeddedKafka, pki: Pki, tmp_path: Path
) -> None:
    gw = _serve(tls_broker.ssl_bootstrap, _upstream_tls_args(pki, pki.ca), tmp_path).start()
    try:
        # Plaintext clients on the gateway; every connection it opens upstream speaks TLS.
        topic = create_topic(tls_broker.bootstrap, f"up-kp-{uuid.uuid4().hex[:8]}", 2)
        _kafka_python_round_trip(gw.bootstrap, topic, f"up-kp-{uuid.uuid4().hex[:8]}")
        topic = create_topic(tls_broker.bootstrap, f"up-ck-{uuid.uuid4().hex[:8]}", 2)
        _confluent_round_trip(gw.bootstrap, topic, f"up-ck-{uuid.uuid4().hex[:8]}", {})
    finally:
        gw.stop()
        print(f"--- tail of {gw.log_path}\n{gw.tail(40)}")


def test_an_untrusted_broker_certificate_is_logged_with_the_broker_address(
    tls_broker: EmbeddedKafka, pki: Pki, tmp_path: Path
) -> None:
    args = [*_upstream_tls_args(pki, pki.other_ca)]
    gw = _serve(tls_broker.ssl_bootstrap, args, tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GROUPGATE_UPSTREAM_CONNECT_TIMEOUT_S", "2")
        with pytest.raises(GatewayStartError):
            gw.start(timeout_s=30)
    log = gw.log_path.read_text(errors="replace")
    lines = [line for line in log.splitlines() if "TLS handshake with an upstream broker failed" in line]
    assert lines, log[-3000:]
    assert tls_broker.ssl_bootstrap in lines[0] and "CERTIFICATE_VERIFY_FAILED" in lines[0]
