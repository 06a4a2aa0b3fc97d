import pytest
from pydantic import ValidationError

from gateway.config.settings import GatewayConfig, PortMappingError, load_config, parse_host_port


def test_precedence_flags_over_env_over_file(tmp_path):
    f = tmp_path / "gw.toml"
    f.write_text('[gateway]\nupstream = "file:1"\nlisten_port = 1000\nmax_brokers = 5\nlog_format = "json"\n')
    env = {"GROUPGATE_LISTEN_PORT": "2000", "GROUPGATE_MAX_BROKERS": "7"}
    cfg = load_config(f, {"max_brokers": 9, "advertised_host": None}, environ=env)
    assert cfg.upstream == "file:1"  # file only
    assert cfg.listen_port == 2000  # env beats file
    assert cfg.max_brokers == 9  # flag beats env
    assert cfg.log_format == "json"
    assert load_config(None, {}, environ={}).listen_port == 9092  # default


def test_env_broker_ports_map():
    cfg = load_config(None, {}, environ={"GROUPGATE_BROKER_PORTS": "1=30001,2=30002"})
    assert cfg.broker_port(1) == 30001 and cfg.broker_port(2) == 30002


def test_port_mapping_is_deterministic():
    cfg = GatewayConfig(listen_port=9092, node_id_base=1, max_brokers=3)
    assert [cfg.broker_port(n) for n in (1, 2, 3)] == [9093, 9094, 9095]
    assert GatewayConfig(listen_port=9092, node_id_base=1, max_brokers=3).broker_port(2) == cfg.broker_port(2)
    with pytest.raises(PortMappingError, match="outside the mapped range"):
        cfg.broker_port(4)
    with pytest.raises(PortMappingError):
        cfg.broker_port(0)


def test_explicit_map_wins_over_range():
    cfg = GatewayConfig(listen_port=9092, broker_port_base=20000, broker_ports={7: 31000})
    assert cfg.broker_port(7) == 31000 and cfg.broker_port(3) == 20003


def test_ephemeral_listen_without_base_defers_ports():
    assert GatewayConfig(listen_port=0).broker_port(1) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"listen_port": 20005, "broker_port_base": 20000},  # bootstrap inside the broker range
        {"broker_ports": {1: 30000, 2: 30000}},  # two nodes on one port
        {"listen_port": 9092, "broker_ports": {1: 9092}},
        {"listen_port": 9092, "broker_port_base": 20000, "broker_ports": {1: 20005}},  # node 5's range port
        {"broker_port_base": 65530, "max_brokers": 10},
        {"upstream": "no-port"},
        {"log_format": "xml"},
    ],
)
def test_invalid_configurations_are_refused(kwargs):
    with pytest.raises(ValidationError):
        GatewayConfig(**kwargs)


def test_parse_host_port():
    assert parse_host_port("a:1") == ("a", 1)
    assert parse_host_port("[::1]:9092") == ("::1", 9092)
    with pytest.raises(ValueError):
        parse_host_port("a:x")


def test_wildcard_listen_advertises_loopback_unless_told():
    assert GatewayConfig(listen_host="0.0.0.0").client_host() == "127.0.0.1"
    assert GatewayConfig(listen_host="0.0.0.0", advertised_host="gw").client_host() == "gw"
