"""The ``groupgate`` command: serve, dev, state verify|repair|inspect|export|import, kafka fetch (and rehearse, when the rehearsal
package provides it).

``kafka fetch`` also fetches Spark's Kafka connector when PySpark is installed (rehearsal/spark_kafka.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scramp
from pydantic import ValidationError

from gateway.config.settings import GatewayConfig, load_config, parse_host_port
from gateway.logging import get_logger, setup_logging
from gateway.metrics import GC_PAUSES
from gateway.net.upstream import UpstreamAuthError
from gateway.ops.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_STATE_CORRUPT, EXIT_USAGE
from gateway.security import credentials
from gateway.security.rights import MissingRight
from gateway.security.sasl_server import Terminator, add_user
from gateway.security.tls import check as check_tls
from gateway.state.log import StateLogCorrupt
from gateway.state.store import StateStoreMismatch

if TYPE_CHECKING:
    from gateway.groups.layer import GroupLayer
    from gateway.ops.admin_http import AdminServer
    from gateway.ops.groups_page import GroupsPage

log = get_logger("gateway.ops.cli")


def _add_gateway_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file ([gateway] table or top-level keys)")
    p.add_argument("--listen", help="bootstrap listener HOST:PORT (port 0 = ephemeral)")
    p.add_argument("--advertised-host", help="host clients are told to connect to")
    p.add_argument("--broker-port-base", type=int, help="port of the listener for node id --node-id-base")
    p.add_argument("--node-id-base", type=int)
    p.add_argument("--max-brokers", type=int)
    p.add_argument("--max-frame-bytes", type=int)
    p.add_argument("--event-loop", choices=["auto", "asyncio", "uvloop"])
    p.add_argument("--log-format", choices=["json", "console"])
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus), /healthz and /readyz over HTTP here (default: off; port 0 = ephemeral)",
    )
    p.add_argument("--tls-cert", metavar="PEM", help="serve TLS on every listener with this certificate chain")
    p.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    p.add_argument(
        "--tls-client-ca", metavar="PEM", help="require client certificates signed by these CAs (mutual TLS)"
    )
    p.add_argument(
        "--managed-groups", help="RE2 pattern of the group ids the gateway coordinates (default: all, .*)"
    )
    p.add_argument("--classic-groups", choices=["native", "translate"], help="how JoinGroup groups are run")
    p.add_argument("--fsync", choices=["always", "interval", "never"], help="group state log durability")
    p.add_argument(
        "--rebalance-events",
        metavar="PATH",
        help="append the group coordinator's rebalance events (JSON lines) to PATH, or produce them to a topic "
        "with kafka://BOOTSTRAP/TOPIC (default: off)",
    )
    p.add_argument("--rebalance-run", metavar="ID", help="the run id of those events (default: gateway)")
    p.add_argument(
        "--coordinator",
        choices=["on", "off"],
        help="off: pass every group API through to the upstream (no group coordinator in the gateway)",
    )


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "upstream": getattr(args, "upstream", None),
        "advertised_host": args.advertised_host,
        "broker_port_base": args.broker_port_base,
        "node_id_base": args.node_id_base,
        "max_brokers": args.max_brokers,
        "max_frame_bytes": args.max_frame_bytes,
        "event_loop": args.event_loop,
        "log_format": args.log_format,
        "log_level": args.log_level,
        "metrics_listen": args.metrics_listen,
        "listener_tls_cert": args.tls_cert,
        "listener_tls_key": args.tls_key,
        "listener_tls_client_ca": args.tls_client_ca,
        "upstream_tls": True if getattr(args, "upstream_tls", False) else None,
        "upstream_tls_ca": getattr(args, "upstream_tls_ca", None),
        "upstream_tls_cert": getattr(args, "upstream_tls_cert", None),
        "upstream_tls_key": getattr(args, "upstream_tls_key", None),
        "upstream_tls_check_hostname": False if getattr(args, "upstream_tls_no_check_hostname", False) else None,
        "listener_security_protocol": getattr(args, "listener_security_protocol", None),
        "upstream_security_protocol": getattr(args, "upstream_security_protocol", None),
        "upstream_sasl_mechanism": getattr(args, "upstream_sasl_mechanism", None),
        "upstream_sasl_username": getattr(args, "upstream_sasl_username", None),
        "upstream_sasl_password_file": getattr(args, "upstream_sasl_password_file", None),
        "upstream_sasl_oauthbearer_token_file": getattr(args, "upstream_sasl_oauthbearer_token_file", None),
        "listener_sasl_mode": getattr(args, "listener_sasl_mode", None),
        "listener_sasl_credentials_file": getattr(args, "listener_sasl_credentials_file", None),
        "authorization": getattr(args, "authorization", None),
        "super_users": getattr(args, "super_users", None),
        "acl_refresh_interval_ms": getattr(args, "acl_refresh_interval_ms", None),
    }
    if args.listen:
        out["listen_host"], out["listen_port"] = parse_host_port(args.listen)
    coordinator = {
        "managed_groups": args.managed_groups,
        "classic_groups": args.classic_groups,
        "fsync": args.fsync,
        "enabled": None if args.coordinator is None else args.coordinator == "on",
        "state_dir": getattr(args, "coordinator_state_dir", None),
        "ephemeral_state": True if getattr(args, "ephemeral_state", False) else None,
        "state_store": getattr(args, "state_store", None),
        "rebalance_events": args.rebalance_events,
        "rebalance_run": args.rebalance_run,
    }
    out["coordinator"] = {k: v for k, v in coordinator.items() if v is not None}
    return out


async def _serve(
    config: GatewayConfig, extra_line: str = "", reload: Callable[[], GatewayConfig] | None = None,
    started: GatewayConfig | None = None,
) -> int:
    from gateway.net.nodes import NodeTable
    from gateway.net.refusals import RefusalLog
    from gateway.net.server import Gateway
    from gateway.net.upstream import BrokerDirectory

    directory = BrokerDirectory(config)
    nodes = NodeTable(config, directory)
    refusals = RefusalLog()
    layer = None
    group_configs = None
    if config.coordinator.enabled:
        from gateway.fleet.membership import FleetMembership
        from gateway.groups.layer import GroupLayer

        layer = GroupLayer(
            config, config.coordinator, directory=directory, nodes=nodes, refusals=refusals,
            join_fleet=FleetMembership,
        )
        # Before any listener or upstream connection: a damaged log or a store written with another
        # shard count is reported first.
        await layer.open_state()
    gw = Gateway(
        config, layer.chain() if layer is not None else None, directory=directory, nodes=nodes, refusals=refusals
    )
    admin = None
    page, page_task = None, None
    if config.metrics_listen is not None:
        from gateway.ops.admin_http import AdminServer
        from gateway.ops.health import Health

        # Up before the gateway starts: /readyz answers 503 until start-up completes.
        admin = AdminServer(Health(gw, layer))
        if layer is not None:
            page, page_task = _groups_page(config, layer, admin)
        host, port = await admin.start(*parse_host_port(config.metrics_listen))
        log.info("metrics endpoint listening", metrics_listen=f"{host}:{port}")
    try:
        await gw.start()
        if layer is not None:
            from gateway.ops.rights_check import check_startup

            # The rights start-up has not exercised yet (writing the state topic, the instances group).
            await check_startup(config, layer.client)
            await layer.start()
            from gateway.groups.cluster_configs import ClusterGroupConfigs

            # Per-group configs as the cluster stores them (kafka-configs --entity-type groups).
            group_configs = ClusterGroupConfigs(layer)
            group_configs.install()
    except BaseException:
        await gw.stop()
        _close_page(page, page_task)
        if admin is not None:
            await admin.stop()
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    from gateway.ops.reload import Reloader

    # SIGHUP: the rebalance event file is reopened (log rotation) and the configuration read again; the
    # managed groups change live (gateway/ops/reload.py).
    loop.add_signal_handler(signal.SIGHUP, Reloader(reload, started, layer))
    print(f"bootstrap={gw.bootstrap}{extra_line}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        if layer is not None:
            await layer.leave_fleet()  # hand the shards over while clients are still connected
        await gw.stop()
        if layer is not None:
            await layer.stop()
        if group_configs is not None:
            group_configs.close()
        _close_page(page, page_task)
        if admin is not None:
            await admin.stop()
    return EXIT_OK


def _groups_page(
    config: GatewayConfig, layer: GroupLayer, admin: AdminServer
) -> tuple[GroupsPage, asyncio.Task[None]]:
    """The live groups page on the admin listener (gateway/ops/groups_page.py), its lag read from the
    layer's lag watch (what kafka_consumergroup_lag exports)."""
    from gateway.ops.groups_page import GroupsPage, page_credentials

    def lag(group_id: str) -> dict[tuple[str, int], tuple[int, int]]:
        return {(p.topic, p.partition): (p.committed, p.log_end) for p in layer.lag.snapshot.groups.get(group_id, ())}

    check, users = page_credentials(config)
    page = GroupsPage(layer, lag=lag, check_password=check, users=users)
    admin.app.add_routes(page.routes())
    return page, asyncio.get_running_loop().create_task(page.run(), name="groups-page")


def _close_page(page: GroupsPage | None, task: asyncio.Task[None] | None) -> None:
    if page is not None:
        page.close()
    if task is not None:
        task.cancel()


def _use_event_loop(config: GatewayConfig) -> str:
    """Install uvloop's policy when asked or available; returns the loop in use. Also sets the
    interpreter's thread switch interval (``switch_interval_ms``) and its garbage collector
    (``gc_threshold``, ``gc_freeze``)."""
    sys.setswitchinterval(config.switch_interval_ms / 1000)
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(config.gc_threshold, older, oldest)
    if config.gc_freeze:
        gc.collect()  # what is garbage already is not frozen with the rest
        gc.freeze()
    GC_PAUSES.install()  # groupgate_gc_pause_seconds
    if config.event_loop == "asyncio":
        return "asyncio"
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        if config.event_loop == "uvloop":
            raise RuntimeError(
                "event_loop=uvloop but uvloop is not installed (pip install 'uvloop>=0.19')"
            ) from None
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def _interpreter_settings(config: GatewayConfig) -> dict[str, Any]:
    """What ``_use_event_loop`` set, for the start-up log line."""
    return {
        "switch_interval_ms": config.switch_interval_ms,
        "gc_threshold": gc.get_threshold()[0],
        "gc_frozen_objects": gc.get_freeze_count(),
    }


def cmd_sasl_credentials(args: argparse.Namespace) -> int:
    """The password comes from standard input (one line), never from the command line."""
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("groupgate: no password on standard input", file=sys.stderr)
        return EXIT_USAGE
    try:
        add_user(args.file, args.user, password, args.iterations)
    except (OSError, ValueError, scramp.ScramException) as e:
        print(f"groupgate: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = started = load_config(args.config, _flags(args))
        check_tls(config)
        credentials.upstream_sasl(config)  # a password file that cannot be read is a configuration error
        Terminator.from_config(config)  # and so is a credentials file of SASL termination
    except (ValidationError, ValueError, OSError) as e:
        print(f"groupgate: invalid configuration: {e}", file=sys.stderr)
        return EXIT_USAGE
    config = config.model_copy(update={"coordinator": config.coordinator.with_default_store()})
    setup_logging(config.log_format, config.log_level)
    if config.upstream_sasl_mechanism is not None and not config.listener_sasl():
        # Clients' own connections carry no credentials then: a SASL cluster refuses their requests.
        log.warning(
            "the upstream takes SASL but the client listeners do not: clients cannot authenticate; "
            "set listener_security_protocol to SASL_PLAINTEXT or SASL_SSL",
        )
    # A file size limit (ulimit -f) must fail the state log's write (EFBIG), which it survives like a
    # full disk, instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        log.info("event loop", loop=_use_event_loop(config), **_interpreter_settings(config))
        return asyncio.run(_serve(config, reload=lambda: load_config(args.config, _flags(args)), started=started))
    except StateLogCorrupt as e:
        # Not a crash to retry: the operator decides (groupgate state verify / repair).
        log.error("group state log is damaged; not starting", error=str(e), file=str(e.path), offset=e.offset)
        print(f"groupgate: {e}", file=sys.stderr, flush=True)
        return EXIT_STATE_CORRUPT
    except StateStoreMismatch as e:
        log.error("group state store does not match the configuration; not starting", error=str(e))
        print(f"groupgate: {e}", file=sys.stderr, flush=True)
        return EXIT_STATE_CORRUPT
    except MissingRight as e:
        # A right the gateway's principal lacks (docs/gateway.md "The rights of the gateway's principal").
        log.error("the cluster refuses the gateway's principal a right it needs; not starting", error=str(e))
        print(f"groupgate: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except UpstreamAuthError as e:
        # Wrong or missing upstream credentials: a configuration error, not a crash to retry.
        log.error("upstream authentication failed; not starting", error=str(e))
        print(f"groupgate: upstream authentication failed: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - reported as a clean exit status
        log.error("gateway failed", error=str(e))
        return EXIT_FAILED


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# Group settings `dev` takes from its embedded broker unless configured: the gateway coordinates the
# groups, so its value is the one clients feel. Kafka's default initial rebalance delay (3000 ms) would
# make every first JoinGroup of an empty group wait 3 s through the gateway, against none on the broker.
_DEV_FOLLOWS_BROKER = {"initial_rebalance_delay_ms": "group.initial.rebalance.delay.ms"}


def follow_embedded_broker(config: GatewayConfig, setting: Callable[[str], str | None]) -> GatewayConfig:
    """`dev`: the coordinator settings the user did not set take the embedded broker's values."""
    coordinator = config.coordinator
    update: dict[str, Any] = {}
    for field, kafka_name in _DEV_FOLLOWS_BROKER.items():
        value = setting(kafka_name)
        if field not in coordinator.model_fields_set and value is not None:
            update[field] = int(value)
        log.info(
            "dev: group coordinator setting",
            setting=kafka_name,
            value=update.get(field, getattr(coordinator, field)),
            source="embedded broker" if field in update else "configuration",
            embedded_broker_value=value,
        )
    if not update:
        return config
    return config.model_copy(update={"coordinator": coordinator.model_copy(update=update)})


def cmd_dev(args: argparse.Namespace) -> int:
    from gateway.ops.embedded_kafka import EmbeddedKafka

    flags = _flags(args)
    if not args.listen:
        flags["listen_host"], flags["listen_port"] = "127.0.0.1", 9092
    try:
        config = started = load_config(args.config, flags)
        check_tls(config)
    except (ValidationError, ValueError, OSError) as e:
        print(f"groupgate: invalid configuration: {e}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(config.log_format, config.log_level)
    if not args.listen and not all(_port_free("127.0.0.1", p) for p in (9092, 9093, 9094)):
        log.info("127.0.0.1:9092 is taken; using an ephemeral bootstrap port")
        config = config.model_copy(update={"listen_port": 0, "broker_port_base": None})
    state = Path(args.state_dir) if args.state_dir else None
    c = config.coordinator
    if state is not None and c.state_dir is None and c.state_store is None and (state / "groups").is_dir():
        # A state dir from before group state moved into the cluster: keep using its files (nothing is
        # lost); `groupgate state import` moves them into the topic.
        log.info("group state stays in the files of this state dir", state_dir=str(state / "groups"))
        config = config.model_copy(update={"coordinator": c.model_copy(update={"state_dir": str(state / "groups")})})
    # Otherwise dev keeps group state where serve does by default: in the state topic of the cluster, here
    # the embedded broker (whose data, and so the topic, lives in a temporary directory without --state-dir).
    config = config.model_copy(update={"coordinator": config.coordinator.with_default_store()})
    kafka = EmbeddedKafka(data_dir=state)
    config = follow_embedded_broker(config, kafka.setting)
    # SIGTERM during broker start-up must still stop the broker: turn it into KeyboardInterrupt.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        log.info("starting the embedded Kafka broker")
        kafka.start()
        config = config.model_copy(update={"upstream": kafka.bootstrap})
        log.info("event loop", loop=_use_event_loop(config), **_interpreter_settings(config))
        return asyncio.run(_serve(
            config, extra_line=f" upstream={kafka.bootstrap}", reload=lambda: load_config(args.config, flags),
            started=started,
        ))
    except KeyboardInterrupt:
        return EXIT_OK
    except (StateLogCorrupt, StateStoreMismatch) as e:
        print(f"groupgate: {e}", file=sys.stderr, flush=True)
        return EXIT_STATE_CORRUPT
    finally:
        if state is None:
            kafka.cleanup()
        else:
            kafka.stop()


def cmd_state_repair(args: argparse.Namespace) -> int:
    from gateway.state import repair as state_repair

    try:
        dirs = state_repair.log_dirs(args.state_dir)
    except OSError as e:
        print(f"groupgate: {e}", file=sys.stderr)
        return EXIT_USAGE
    for d in dirs:
        status = _repair_one(state_repair, d)
        if status:
            return status
    return EXIT_OK


def _repair_one(state_repair: Any, directory: Path) -> int:
    try:
        result = state_repair.repair(directory)
    except (OSError, StateLogCorrupt) as e:
        # The damaged segments are only set aside after the new segment and manifest are in place.
        print(f"groupgate: repair failed (the damaged segments are still in place; run it again): {e}", file=sys.stderr)
        return EXIT_FAILED
    before = result.before
    if result.new_segment is None:
        print(f"state log {before.directory}: no damage, nothing changed ({result.live_keys} live keys)")
        return EXIT_OK
    for d in before.damage:
        print(f"dropped: {d.describe()}")
    dropped_bytes = sum(d.bytes for d in before.damage)
    print(f"dropped {len(before.damage)} damaged range(s), {dropped_bytes} bytes in all")
    for s in before.segments:
        print(f"kept: {s.path.name}: {s.entries} entries ({s.kept_bytes} of {s.size} bytes)")
    print(f"wrote {result.new_segment} with the latest value of {result.live_keys} keys "
          f"(from {result.kept_entries} readable entries) and a new manifest")
    for p in result.set_aside:
        print(f"kept the damaged original as {p} (delete it once no longer needed)")
    return EXIT_OK


def cmd_kafka_fetch(args: argparse.Namespace) -> int:
    from gateway.ops import kafka_dist

    for dist in kafka_dist.all_distributions():
        path = kafka_dist.fetch(dist, quiet=not args.verbose)
        print(f"{dist.name}: {path}", flush=True)
    for plugin in _plugins():
        try:
            fetched = plugin.fetch(quiet=not args.verbose) if hasattr(plugin, "fetch") else []
        except Exception as e:  # noqa: BLE001 - a plugin's download failed: said, and the command fails
            print(f"error: {e}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        for name, path in fetched:
            print(f"{name}: {path}", flush=True)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway in front of a Kafka cluster")
    serve.add_argument("--upstream", help="upstream bootstrap HOST:PORT[,HOST:PORT...]")
    serve.add_argument(
        "--state-dir",
        dest="coordinator_state_dir",
        help="keep group state in per-shard log files here instead of the cluster's state topic",
    )
    serve.add_argument(
        "--state-store",
        choices=["kafka", "file"],
        help="where group state is kept: the cluster's compacted state topic (the default without --state-dir "
        "or --ephemeral-state) or the files under --state-dir",
    )
    serve.add_argument("--upstream-tls", action="store_true", help="connect to the upstream brokers over TLS")
    serve.add_argument("--upstream-tls-ca", metavar="PEM", help="CA bundle for the brokers (default: system trust)")
    serve.add_argument("--upstream-tls-cert", metavar="PEM", help="client certificate for the brokers (mutual TLS)")
    serve.add_argument("--upstream-tls-key", metavar="PEM", help="the private key of --upstream-tls-cert")
    serve.add_argument(
        "--upstream-tls-no-check-hostname",
        action="store_true",
        help="verify the brokers' certificate chain but not that it names the broker's host",
    )
    # SASL (docs/gateway.md, "SASL"); no flag for the password itself (command lines are visible to every
    # local user): GROUPGATE_UPSTREAM_SASL_PASSWORD, the configuration file, or --upstream-sasl-password-file.
    protocols = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
    serve.add_argument(
        "--listener-security-protocol", choices=protocols, help="SASL_*: clients authenticate (passed through to the cluster)"
    )
    serve.add_argument("--upstream-security-protocol", choices=protocols, help="security.protocol towards the brokers")
    serve.add_argument(
        "--upstream-sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], help="sasl.mechanism towards the brokers"
    )
    serve.add_argument("--upstream-sasl-username", metavar="NAME", help="the gateway's own SASL user name")
    serve.add_argument("--upstream-sasl-password-file", metavar="PATH", help="file holding the gateway's SASL password")
    # Authorization of the group APIs the gateway answers itself (docs/gateway.md, "Authorization").
    serve.add_argument(
        "--authorization", choices=["auto", "on", "strict", "off"],
        help="check the cluster's ACLs for what the gateway answers itself (auto: when clients use SASL)",
    )
    serve.add_argument("--super-users", metavar="PRINCIPALS", help="the brokers' super.users, e.g. User:admin;User:ops")
    serve.add_argument("--acl-refresh-interval-ms", type=int, metavar="MS", help="how often the cluster's ACLs are read")
    serve.add_argument(
        "--upstream-sasl-oauthbearer-token-file", metavar="PATH",
        help="OAUTHBEARER: file holding the gateway's access token (read at each authentication)",
    )
    serve.add_argument(
        "--listener-sasl-mode", choices=["passthrough", "terminate"],
        help="terminate: the gateway authenticates clients itself (docs/gateway.md, \"SASL termination\")",
    )
    serve.add_argument(
        "--listener-sasl-credentials-file", metavar="PATH",
        help="terminate: the users' salted SCRAM credentials (written by 'groupgate sasl-credentials')",
    )
    serve.add_argument(
        "--ephemeral-state",
        action="store_true",
        help="keep group state in memory only: after a restart every managed group starts empty",
    )
    _add_gateway_flags(serve)
    serve.set_defaults(func=cmd_serve)

    creds = sub.add_parser(
        "sasl-credentials", help="add or replace a user in a SASL termination credentials file"
    )
    creds.add_argument("--file", required=True, metavar="PATH", help="the credentials file (created when missing)")
    creds.add_argument("--user", required=True, metavar="NAME")
    creds.add_argument("--iterations", type=int, default=4096, help="SCRAM iteration count (at least 4096)")
    creds.set_defaults(func=cmd_sasl_credentials)

    dev = sub.add_parser("dev", help="run an embedded Kafka broker with the gateway in front of it")
    dev.add_argument(
        "--state-dir",
        help="keep the broker's data (and the group state, in DIR/groups) here (default: a temporary directory)",
    )
    _add_gateway_flags(dev)
    dev.set_defaults(func=cmd_dev)

    state = sub.add_parser("state", help="the group coordinator's state log (stop the gateway first)")
    ssub = state.add_subparsers(dest="state_command", required=True)
    repair = ssub.add_parser(
        "repair", help="drop the damaged ranges of the state log, printing exactly what was dropped and kept"
    )
    repair.add_argument("--state-dir", required=True, help="the gateway's --state-dir")
    repair.set_defaults(func=cmd_state_repair)
    from gateway.ops.state_cli import (
        add_commands as add_state_tools,  # inspect, verify, export (either store), import
    )

    add_state_tools(ssub)

    kafka = sub.add_parser("kafka", help="Apache Kafka distributions")
    ksub = kafka.add_subparsers(dest="kafka_command", required=True)
    fetch = ksub.add_parser("fetch", help="fetch the Kafka jars from Maven Central")
    fetch.add_argument("-v", "--verbose", action="store_true")
    fetch.set_defaults(func=cmd_kafka_fetch)

    for plugin in _plugins():
        plugin.add_commands(sub)
    return parser


def _plugins() -> list[Any]:
    """The command's plugins, named by the ``groupgate.commands`` entry point: modules with
    ``add_commands(subparsers)`` and optionally ``fetch(quiet) -> [(name, path)]`` (for ``kafka fetch``).
    The rehearsal package adds ``rehearse`` this way."""
    from importlib.metadata import entry_points

    return [ep.load() for ep in sorted(entry_points(group="groupgate.commands"), key=lambda ep: ep.name)]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with contextlib.suppress(BrokenPipeError):
        return int(args.func(args))
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
