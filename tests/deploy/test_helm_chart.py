"""The Helm chart (deploy/helm/groupgate) renders, is valid Kubernetes, and configures a gateway that starts.

helm, kubeconform and the schemas come from `make chart-tools` (deploy/chart_check.py); `make test` installs
them first. Missing tools fail these tests with that instruction rather than skipping them.

Beyond `helm lint` and kubeconform, each rendered variant is read back the way the pod would read it: the
container's arguments go through `groupgate serve`'s own parser and the ConfigMap's gateway.toml through
load_config, so a chart that names a flag or setting the gateway does not have, or a value it refuses,
fails here; and the ports the Services and probes name are the ports that configuration makes the gateway
serve.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.settings import GatewayConfig, load_config, parse_host_port
from gateway.ops.cli import _flags, build_parser

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("chart_check", ROOT / "deploy" / "chart_check.py")
assert _spec is not None and _spec.loader is not None
chart_check = importlib.util.module_from_spec(_spec)
sys.modules["chart_check"] = chart_check
_spec.loader.exec_module(chart_check)

VARIANTS = chart_check.variants()
IDS = ["default" if v is None else v.stem for v in VARIANTS]
# What Kubernetes substitutes for $(VAR) in the container's arguments, as it would in a pod.
POD_ENV = {
    "POD_NAME": "gg-groupgate-0",
    "POD_NAMESPACE": "groupgate",
    "POD_IP": "10.1.2.3",
    "HOST_IP": "192.0.2.7",
    "NODE_NAME": "node-a",
}


def _tools() -> None:
    try:
        chart_check.tool("helm")
        chart_check.tool("kubeconform")
        for v in chart_check.KUBE_VERSIONS:
            chart_check.schema_dir(v)
    except chart_check.ToolsMissing as e:
        pytest.fail(str(e), pytrace=False)


def render(values: Path | None, *extra: str) -> list[dict[str, Any]]:
    _tools()
    out = chart_check.helm_template(values, extra=list(extra)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def gateway_config(docs: list[dict[str, Any]], tmp_path: Path) -> tuple[GatewayConfig, dict[str, Any]]:
    """The configuration a pod of this rendering starts with, through the gateway's own loading code."""
    workload = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
    container = workload["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"] for e in container["env"]}
    args = []
    for a in container["args"]:
        for var in re.findall(r"\$\((\w+)\)", a):
            assert var in env, f"argument {a!r} names $({var}), which the container's env does not define"
        args.append(re.sub(r"\$\((\w+)\)", lambda m: POD_ENV[m.group(1)], a))
    ns = build_parser().parse_args(["serve", *args])
    toml = one(docs, "ConfigMap")["data"]["gateway.toml"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")["mountPath"]
    assert ns.config == f"{mount}/gateway.toml"
    path = tmp_path / "gateway.toml"
    path.write_text(toml)
    # The image's environment is left out on purpose: flags and file must say everything themselves.
    return load_config(path, _flags(ns), environ={}), workload


def test_chart_check_lints_renders_and_validates_every_variant_strictly() -> None:
    _tools()
    r = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "chart_check.py"), "check"], capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # Every variant against every Kubernetes version, each object with a schema (none skipped).
    summaries = re.findall(r"Valid: (\d+), Invalid: (\d+), Errors: (\d+), Skipped: (\d+)", r.stdout)
    assert len(summaries) == len(VARIANTS) * len(chart_check.KUBE_VERSIONS)
    assert all(int(valid) > 0 and (inv, err, skip) == ("0", "0", "0") for valid, inv, err, skip in summaries)


@pytest.mark.parametrize(
    "kind, path, bogus",
    [
        ("Deployment", ("spec", "template", "spec", "containers", 0), "imagePullPolicyy"),
        ("Service", ("spec",), "clusterIPP"),
        ("ServiceMonitor", ("spec", "endpoints", 0), "intervall"),
    ],
)
def test_kubeconform_refuses_an_unknown_field(kind: str, path: tuple[Any, ...], bogus: str) -> None:
    # The schemas are strict: a misspelt field is an error, not silently accepted.
    docs = render(None, "--set", "metrics.serviceMonitor.enabled=true")
    target: Any = one(docs, kind, "gg-groupgate")
    for p in path:
        target = target[p]
    target[bogus] = "x"
    r = chart_check.kubeconform(yaml.safe_dump_all(docs), chart_check.KUBE_VERSIONS[-1])
    assert r.returncode == 1, r.stdout
    assert re.search(rf"{kind} gg-groupgate .*{bogus}", r.stdout), r.stdout
    assert "Invalid: 1" in r.stdout


@pytest.mark.parametrize("values", VARIANTS, ids=IDS)
def test_each_variant_configures_a_gateway_the_services_and_probes_reach(values: Path | None, tmp_path: Path) -> None:
    docs = render(values)
    config, workload = gateway_config(docs, tmp_path)
    pod = workload["spec"]["template"]["spec"]
    container = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    # Probes and scraping on the admin listener the gateway opens.
    assert config.metrics_listen is not None
    admin_host, admin_port = parse_host_port(config.metrics_listen)
    assert admin_host == "0.0.0.0" and ports["admin"] == admin_port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}

    # The bootstrap Service lists the bootstrap port and exactly the gateway's listener of every node id it
    # serves, so that clients (and NetworkPolicies written from it) reach each one.
    assert config.listen_host == "0.0.0.0" and ports["bootstrap"] == config.listen_port
    svc = one(docs, "Service", "gg-groupgate")
    assert svc["spec"]["clusterIP"] == "None"
    listed = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    expected = {"bootstrap": (config.listen_port, config.listen_port)}
    for node in range(config.node_id_base, config.node_id_base + config.max_brokers):
        expected[f"broker-{node}"] = (config.broker_port(node), config.broker_port(node))
    assert listed == expected

    # Each pod advertises an address of its own.
    host = config.client_host()
    if workload["kind"] == "Deployment" and not pod.get("hostNetwork"):
        assert host == POD_ENV["POD_IP"]
    if workload["kind"] == "StatefulSet":
        pods_svc = one(docs, "Service", workload["spec"]["serviceName"])
        assert pods_svc["spec"]["publishNotReadyAddresses"] is True
        assert host == f"{POD_ENV['POD_NAME']}.{pods_svc['metadata']['name']}.{POD_ENV['POD_NAMESPACE']}.svc.cluster.local"
    if pod.get("hostNetwork"):
        assert host == POD_ENV["HOST_IP"]

    # State: the cluster store shared by the instances group, or one pod's files on its own claim.
    co = config.coordinator
    if co.state_store == "file":
        assert workload["kind"] == "StatefulSet" and workload["spec"]["replicas"] == 1
        assert co.instances_group is None
        claim = workload["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
        assert {"name": claim, "mountPath": co.state_dir} in container["volumeMounts"]
    else:
        assert co.state_store == "kafka" and co.state_dir is None
        assert co.instances_group == "gg-groupgate"

    # Every file the configuration names is in a mounted Secret (or the ConfigMap).
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    for field in (
        "listener_tls_cert", "listener_tls_key", "listener_tls_client_ca", "upstream_tls_ca", "upstream_tls_cert",
        "upstream_tls_key", "upstream_sasl_password_file", "listener_sasl_credentials_file",
    ):
        file = getattr(config, field)
        if file is not None:
            volume = mounts[str(Path(file).parent)]
            assert volume in secrets, f"{field}={file} is not in a Secret volume"


def test_the_tls_sasl_variant_turns_every_part_on(tmp_path: Path) -> None:
    docs = render(chart_check.CHART / "ci" / "tls-sasl-values.yaml")
    config, _ = gateway_config(docs, tmp_path)
    assert config.listener_security_protocol == "SASL_SSL" and config.listener_sasl_mode == "terminate"
    assert config.listener_tls_client_ca is not None
    assert config.upstream_tls and config.upstream_security_protocol == "SASL_SSL"
    assert config.upstream_sasl_mechanism == "SCRAM-SHA-512" and config.upstream_sasl_username == "groupgate"
    # Settings passed through config: with their Kafka names, a nested table, a list from a string.
    assert config.super_users == ["User:admin", "User:groupgate"]
    assert config.coordinator.state_topic_num_partitions == 50
    assert config.coordinator.group_configs == {"orders": {"consumer.session.timeout.ms": 50000}}


def test_whole_numbers_stay_integers_and_fractions_floats(tmp_path: Path) -> None:
    # Helm reads YAML numbers as floats; the TOML must still say 600000, not 600000.0 or 6e+05.
    docs = render(None, "--set", "config.gateway.connections_max_idle_ms=600000",
                  "--set-json", 'config.gateway.metadata_refresh_s=2.5')
    toml = one(docs, "ConfigMap")["data"]["gateway.toml"]
    assert '"connections_max_idle_ms" = 600000\n' in toml and '"metadata_refresh_s" = 2.5\n' in toml
    config, _ = gateway_config(docs, tmp_path)
    assert config.connections_max_idle_ms == 600000 and config.metadata_refresh_s == 2.5


@pytest.mark.parametrize(
    "settings, message",
    [
        (["stateStore=file"], "set workload: StatefulSet"),
        (["workload=StatefulSet", "stateStore=file", "replicaCount=3"], "replicaCount must be 1"),
        (["instancesGroup=-"], "replicaCount must be 1"),
        (["security.listener.protocol=SSL"], "needs security.listener.tls.secretName"),
        (["config.gateway.upstream=elsewhere:9092"], "config.gateway.upstream is set by the chart from upstream"),
        (["config.coordinator.state_dir=/x"], "config.coordinator.state_dir is set by the chart from stateStore"),
        # values.schema.json: a misspelt or misplaced value is an error, not ignored.
        (["replicas=3"], "additional properties 'replicas' not allowed"),
        (["listener.maxBrokers=0"], "/listener/maxBrokers"),
        (["security.upstream.sasl.mechanism=GSSAPI"], "/security/upstream/sasl/mechanism"),
    ],
)
def test_combinations_the_gateway_would_refuse_fail_at_render_time(settings: list[str], message: str) -> None:
    _tools()
    extra = [a for s in settings for a in ("--set", s)]
    r = chart_check.helm_template(None, extra=extra, check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_the_image_tag_is_the_package_version() -> None:
    chart = yaml.safe_load((chart_check.CHART / "Chart.yaml").read_text())
    version = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None and chart["appVersion"] == version.group(1)
    workload = one(render(None), "Deployment")
    assert workload["spec"]["template"]["spec"]["containers"][0]["image"] == f"groupgate:{version.group(1)}"


def test_the_configuration_example_of_deploy_readme_is_accepted(tmp_path: Path) -> None:
    readme = (ROOT / "deploy" / "README.md").read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```", readme, re.S | re.M)
    assert blocks, "deploy/README.md has no yaml example"
    values = tmp_path / "values.yaml"
    values.write_text(blocks[0])
    config, _ = gateway_config(render(values), tmp_path)
    example = yaml.safe_load(blocks[0])["config"]
    assert config.coordinator.managed_groups == example["coordinator"]["managed_groups"]
    assert config.connections_max_idle_ms == example["gateway"]["connections.max.idle.ms"]
    assert config.coordinator.consumer_session_timeout_ms == example["coordinator"]["group.consumer.session.timeout.ms"]
