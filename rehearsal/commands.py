"""``groupgate rehearse``: simulation, event-log analysis, the live view and calibration, added to the
``groupgate`` command by the rehearsal package through the ``groupgate.commands`` entry point (the command
imports none of it); and the jars ``groupgate kafka fetch`` fetches for it (Spark's Kafka connector)."""

from __future__ import annotations

import argparse
import functools
import importlib.util
from pathlib import Path
from typing import Any


def cmd_rehearse_report(args: argparse.Namespace) -> int:
    from rehearsal.cli import report_main

    return int(report_main(args.paths, args.out, args.master, args.group))


def cmd_rehearse_live(args: argparse.Namespace) -> int:
    from rehearsal.live import live_main

    return int(
        live_main(
            args.events, args.out, args.master, trigger_s=args.trigger_s, until_idle_s=args.until_idle_s,
            max_s=args.max_s, starting_offsets=args.starting_offsets,
        )  # fmt: skip
    )


def cmd_rehearse_simulate(args: argparse.Namespace) -> int:
    from rehearsal.cli import simulate_main

    return int(
        simulate_main(
            args.groups, args.members, args.scenario, args.seed, args.out, args.mix,
            spark=args.spark, master=args.master, spec_file=args.spec, topics=args.topics,
            config=args.config, clients=args.clients, group_type=args.group_type,
            connectors=args.connectors, tasks=args.tasks, scheduled_delay_ms=args.scheduled_rebalance_delay_ms,
        )
    )


def cmd_rehearse_calibrate(args: argparse.Namespace) -> int:
    from rehearsal.calibrate_cli import calibrate

    return int(calibrate(args, _real_runs()))


def cmd_rehearse_calibrate_fleet(args: argparse.Namespace) -> int:
    from rehearsal.fleet_calibration import calibrate_fleet

    return int(calibrate_fleet(args, _real_runs(), echo=functools.partial(print, flush=True)))


def _real_runs() -> Any:
    """The real half of a calibration, as the ``groupgate.calibration`` entry point names it (the compatibility
    harness provides it); None where it is not installed."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="groupgate.calibration"):
        return ep.load()
    return None


def cmd_rehearse_validate(args: argparse.Namespace) -> int:
    from rehearsal.cli import validate_main

    return int(validate_main(args.paths))


def add_commands(sub: Any) -> None:
    """The ``rehearse`` command and its subcommands, on the top-level subparsers ``sub``."""
    rehearse = sub.add_parser("rehearse", help="simulation and event-log analysis")
    rsub = rehearse.add_subparsers(dest="rehearse_command", required=True)
    simulate = rsub.add_parser("simulate", help="simulate a fleet of groups and write its rebalance events")
    simulate.add_argument("--groups", type=int, required=True)
    simulate.add_argument("--members", type=int, required=True, help="members (connect: workers) per group")
    simulate.add_argument(
        "--scenario",
        required=True,
        help="rolling-upgrade, rolling-downgrade, crashes, scale-up, scale-down or topic-growth; connect groups: "
        "rolling-restart or crashes",
    )
    simulate.add_argument(
        "--group-type", choices=("consumer", "connect"), default=None,
        help="consumer (default): consumer groups of the client mix; connect: connect groups of Kafka Connect "
        "workers on the new protocol",
    )  # fmt: skip
    simulate.add_argument("--connectors", type=int, default=None, help="connect groups: connectors per group (4)")
    simulate.add_argument("--tasks", type=int, default=None, help="connect groups: tasks per connector (3)")
    simulate.add_argument(
        "--scheduled-rebalance-delay-ms", type=int, default=None,
        help="connect groups: the workers' scheduled.rebalance.max.delay.ms (300000)",
    )  # fmt: skip
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument("--out", required=True, help="events go to OUT/events")
    simulate.add_argument(
        "--mix",
        default="all",
        choices=("all", "classic-eager", "classic-cooperative", "translate", "consumer"),
        help="client mix of every group; all: the groups split across the four",
    )
    simulate.add_argument("--topics", help="TOPIC:PARTITIONS[,...] every member subscribes to")
    simulate.add_argument("--spec", help="a JSON fleet description (rehearsal.fleet_spec.FleetSpec) to start from")
    simulate.add_argument(
        "--config", help="a gateway configuration file (the TOML `groupgate serve --config` reads): the simulated "
        "gateway runs with its coordinator settings; what it cannot model is named",
    )  # fmt: skip
    simulate.add_argument(
        "--clients", help="the clients of every group: CLIENT[@VERSION][:SHARE][/STRATEGY],... with CLIENT java "
        "or librdkafka (e.g. librdkafka:3,java@4.3.1:1); default: generic Java-like models",
    )  # fmt: skip
    simulate.add_argument("--spark", action="store_true", help="run the groups in Spark tasks (local[*])")
    simulate.add_argument("--master", default=None, help="Spark master for the simulation (implies --spark)")
    simulate.set_defaults(func=cmd_rehearse_simulate)
    report = rsub.add_parser("report", help="analyse event logs")
    report.add_argument("paths", nargs="+")
    report.add_argument("--out", required=True)
    report.add_argument("--master", default=None)
    report.add_argument("--group", default=None)
    report.set_defaults(func=cmd_rehearse_report)
    live = rsub.add_parser(
        "live", help="follow rebalance events on a Kafka topic and keep the report's key figures current"
    )
    live.add_argument("--events", required=True, metavar="kafka://BOOTSTRAP/TOPIC")
    live.add_argument("--out", default="rehearsal-live", help="live.json and live.html go here")
    live.add_argument("--master", default=None, help="Spark master (default: local[*])")
    live.add_argument("--trigger-s", type=float, default=5.0, help="seconds between micro-batches")
    live.add_argument("--until-idle-s", type=float, default=None, help="stop after this long without new events")
    live.add_argument("--max-s", type=float, default=None, help="stop after this long")
    live.add_argument(
        "--starting-offsets", default="earliest", choices=("earliest", "latest"),
        help="earliest: the topic's whole history; latest: only events from now on",
    )  # fmt: skip
    live.set_defaults(func=cmd_rehearse_live)
    validate = rsub.add_parser("validate", help="check that event logs are valid rebalance events")
    validate.add_argument("paths", nargs="+")
    validate.set_defaults(func=cmd_rehearse_validate)
    calibrate = rsub.add_parser(
        "calibrate", help="the same small fleet run by real clients through the gateway and simulated: "
        "measured beside predicted",
    )  # fmt: skip
    calibrate.add_argument(
        "--client", choices=("java", "librdkafka"), default="java",
        help="java: Java 4.4.0 consumers, each its own process; librdkafka: confluent-kafka consumers",
    )  # fmt: skip
    calibrate.add_argument(
        "--mix", default="all", help="all, or some of classic-eager,classic-cooperative,translate,consumer"
    )
    calibrate.add_argument("--scenario", default="all", help="all, or some of rolling-upgrade,rolling-restart,crashes")
    calibrate.add_argument(
        "--groups", type=int, default=1, help="groups per mix and scenario, run one after another and pooled"
    )
    calibrate.add_argument("--members", type=int, default=3, help="members per group")
    calibrate.add_argument("--partitions", type=int, default=6, help="partitions of each group's topic")
    calibrate.add_argument(
        "--seeds", type=int, default=3, help="simulated runs per real run (the prediction is their mean)"
    )
    calibrate.add_argument(
        "--out", help="work directory: every run's events and schedule, calibration.md and calibration.json "
        "(default: a new temporary directory)",
    )  # fmt: skip
    calibrate.add_argument("--json", type=Path, help="also write the JSON rows here (e.g. EVENTS/_calibration.json)")
    calibrate.add_argument(
        "--replay", type=Path, action="append", default=[], metavar="DIR",
        help="no real clients: re-simulate and measure the runs saved under DIR (repeatable; runs pooled)",
    )  # fmt: skip
    calibrate.set_defaults(func=cmd_rehearse_calibrate)
    from rehearsal.fleet_calibration import add_arguments

    fleet_cal = rsub.add_parser(
        "calibrate-fleet", help="`rehearse simulate` of a fleet beside real rolls of the same fleet through a gateway "
        "of the same configuration",
    )  # fmt: skip
    add_arguments(fleet_cal)
    fleet_cal.set_defaults(func=cmd_rehearse_calibrate_fleet)


def fetch(quiet: bool) -> list[tuple[str, Path]]:
    """For ``groupgate kafka fetch``: Spark's Kafka connector, for ``groupgate rehearse report kafka://...``
    (nothing where PySpark is not installed). A failed download is a ``spark_kafka.ConnectorError``."""
    if importlib.util.find_spec("pyspark") is None:
        return []
    from rehearsal import spark_kafka

    jars = spark_kafka.connector_jars(quiet=quiet)
    return [(spark_kafka.distribution().name, jars[0].parent)]
