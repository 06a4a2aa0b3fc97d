"""`groupgate rehearse calibrate-fleet`: the fleet command's prediction against real rolls of the same fleet.

`rehearse calibrate` replays each real run's exact schedule; this one checks what a user gets from
`rehearse simulate` itself. For each client mix, one fleet description (FleetSpec: its clients, members,
topic, classic heartbeat interval, share of clean stops, and the gateway's coordinator settings read from
the same TOML a gateway runs with) is given twice:

- to the fleet command (``simulate_main``), ``--seeds`` groups, each rolled on its own seed;
- to real consumers (the ``groupgate.calibration`` entry point's ``fleet_roll``: librdkafka or Java
  consumers through ``groupgate serve --config FILE`` in front of a real broker), ``--runs`` groups rolled
  one after another, each drawn from the simulator's own roll distributions (rehearsal/sim_config.py).

Both sides' event logs are measured alike (rehearsal/calibration.py ``figures``, from the first stop to the
last ownership change): partition-seconds without an owner, ownership changes per member, and the time to
stable as convergence (the last ownership change). A row gives the means of both sides, their ratio and
whether they agree within 25 %, and beside each mean its spread over single rolls (p10-p90), so that a
reader sees how far one roll can land from the mean.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rehearsal.calibrate_cli import Process, parse_choice
from rehearsal.calibration import TOLERANCE, Figures, figures
from rehearsal.events import Event, EventWriter, event_files, read_events
from rehearsal.fleet import run_group
from rehearsal.fleet_spec import CLIENT_MIXES, FleetSpec

Echo = Callable[[str], None]
METRICS = ("unavailable_s", "rebalances_per_member", "time_to_stable_s")
LABELS = {"unavailable_s": "unavailable (partition-s)", "rebalances_per_member": "rebalances per member",
          "time_to_stable_s": "time to stable (s)"}


class FleetRuns(Protocol):
    """The real half: a broker, a gateway reading a configuration file, and one real roll of a spec's group."""

    def broker(self) -> Process: ...

    def fleet_gateway(self, upstream: str, work_dir: Path, config: Path, extra_args: Sequence[str]) -> Process: ...

    def fleet_roll(self, bootstrap: str, broker: str, spec: FleetSpec, index: int, *, quiet_s: float,
                   log_dir: Path, plan: Sequence[tuple[int, int, bool, int]] | None = None) -> Any:
        """An object with ``events`` (the roll's rebalance events); ``plan``: the simulated roll's steps to play."""
        ...


def measure(events: Sequence[Event], members: int) -> dict[str, float]:
    """One roll's figures: from its first disturbance to its last ownership change."""
    f: Figures = figures(events, members)
    return {"unavailable_s": f.unavailable_ms / 1000, "rebalances_per_member": f.rebalances_per_member,
            "time_to_stable_s": f.time_to_stable_ms / 1000}


def by_group(paths: Sequence[Path]) -> dict[str, list[Event]]:
    groups: dict[str, list[Event]] = defaultdict(list)
    for e in read_events(paths):
        groups[e.group].append(e)
    return dict(groups)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, p10 and p90 (nearest rank) of single rolls."""
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    return {"mean": statistics.fmean(ordered), "p10": rank(0.1), "p90": rank(0.9), "n": len(ordered)}


@dataclass
class FleetRow:
    client: str
    mix: str
    real: list[dict[str, float]]
    simulated: list[dict[str, float]]
    settings: dict[str, Any]
    start_lags_ms: list[int] = field(default_factory=list)  # Java: each process's launch to its startup
    # Real roll i played simulated group i's plan: the prediction of the real rolls is then the mean of
    # those twins (the other simulated rolls still give the spread of single rolls).
    paired: bool = False

    def side(self, which: str) -> dict[str, dict[str, float]]:
        rolls = {"real": self.real, "simulated": self.simulated, "twins": self.twins}[which]
        return {m: spread([r[m] for r in rolls]) for m in METRICS}

    @property
    def twins(self) -> list[dict[str, float]]:
        return self.simulated[: len(self.real)] if self.paired else self.simulated

    def ratios(self, against: str = "twins") -> dict[str, float | None]:
        """Predicted over measured means: of the real rolls' simulated twins (or, ``simulated``, of every
        simulated roll)."""
        real, sim = self.side("real"), self.side(against)
        out: dict[str, float | None] = {}
        for m in METRICS:
            r, s = real[m]["mean"], sim[m]["mean"]
            out[m] = None if r == 0 and s == 0 else (round(s / r, 4) if r else None)
        return out

    def within(self, against: str = "twins") -> dict[str, bool]:
        return {m: v is not None and abs(v - 1.0) <= TOLERANCE for m, v in self.ratios(against).items()}

    def as_json(self) -> dict[str, Any]:
        return {"client": self.client, "mix": self.mix, "scenario": "rolling-upgrade", "paired": self.paired,
                "real": self.side("real"), "predicted": self.side("twins"), "ratios": self.ratios(),
                "within_25": self.within(), "all_simulated": self.side("simulated"),
                "ratios_all_simulated": self.ratios("simulated"),
                "real_rolls": self.real, "simulated_rolls": self.simulated, "settings": self.settings,
                "start_lags_ms": self.start_lags_ms}


def _cell(s: dict[str, float]) -> str:
    return f"{s['mean']:.2f} ({s['p10']:.2f}-{s['p90']:.2f})"


def markdown(rows: Sequence[FleetRow]) -> str:
    """Per metric: the real rolls' mean (p10-p90), their simulated twins' mean (the prediction; with unpaired
    rolls every simulated roll), predicted / real, and every simulated roll's mean (p10-p90) with its ratio."""
    head = ["client", "mix", "real rolls / simulated"]
    for m in METRICS:
        head += [f"{LABELS[m]}: real mean (p10-p90)", "predicted", "predicted / real", "all simulated (p10-p90)",
                 "/ real"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        real, twins, sim = row.side("real"), row.side("twins"), row.side("simulated")
        ratios, within, loose = row.ratios(), row.within(), row.ratios("simulated")
        cells = [row.client, row.mix, f"{len(row.real)} / {len(row.simulated)}"]
        for m in METRICS:
            q, u = ratios[m], loose[m]
            cells += [_cell(real[m]), f"{twins[m]['mean']:.2f}",
                      "-" if q is None else f"{q:.2f}" + ("" if within[m] else " (!)"),
                      _cell(sim[m]), "-" if u is None else f"{u:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_spec(args: argparse.Namespace, mix: str, groups: int, config: Path, echo: Echo) -> FleetSpec | None:
    from pydantic import ValidationError

    from rehearsal.cli import parse_clients, parse_topics
    from rehearsal.fleet_settings import gateway_from_config

    try:
        fields: dict[str, Any] = {
            "scenario": "rolling-upgrade", "groups": groups, "members": args.members, "mix": mix, "seed": args.seed,
            "topics": parse_topics(args.topics), "clients": parse_clients(args.clients),
            "heartbeat_interval_ms": args.heartbeat_interval_ms, "graceful_share": args.graceful_share,
            "gateway": gateway_from_config(config), "run": f"fleet-calibration-{mix}",
        }
        if args.start_ms is not None:
            fields["clients"] = [{**c, "start_ms": args.start_ms} for c in fields["clients"]]
        return FleetSpec.model_validate(fields)
    except (ValidationError, ValueError, OSError) as e:
        echo(f"error: invalid fleet description: {e}")
        return None


def calibrate_fleet(args: argparse.Namespace, real_runs: FleetRuns | None, echo: Echo = print) -> int:
    try:
        mixes = parse_choice(args.mix, CLIENT_MIXES, "mix")
    except ValueError as e:
        echo(f"error: {e}")
        return 2
    if args.runs < 1 or args.seeds < 1 or args.members < 1:
        echo("error: --runs, --seeds and --members must be at least 1")
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="calibrate-fleet-"))
    out.mkdir(parents=True, exist_ok=True)
    config = Path(args.config) if args.config else out / "gateway.toml"
    if not args.config:
        # The gateway's own defaults: a configuration file that sets nothing.
        config.write_text("# every setting at its default\n[coordinator]\n")
    specs = {}
    for mix in mixes:
        spec = build_spec(args, mix, args.runs, config, echo)
        if spec is None:
            return 2
        if len(spec.topics) != 1:
            echo("error: --topics: a fleet calibration runs one topic per group")
            return 2
        specs[mix] = spec
    if real_runs is None:
        echo("error: real rolls need the compatibility harness (compat_tests, installed with the package from a "
             "source checkout)")
        return 2
    from rehearsal.cli import simulate_main
    from rehearsal.fleet_spec import fleet_warnings, simulation_settings

    first = next(iter(specs.values()))
    settings = simulation_settings(first)
    echo("settings: " + "; ".join(f"{k} {v}" for k, v in settings.items()))
    for warning in dict.fromkeys(w for spec in specs.values() for w in fleet_warnings(spec)):
        echo(f"warning: not modelled: {warning}")
    members = args.members
    quiet_s = args.quiet_s
    rows: list[FleetRow] = []
    started = time.monotonic()
    kafka = real_runs.broker()
    kafka.start()
    gateways: dict[str, Process] = {}
    try:
        for mix, spec in specs.items():
            mode = "translate" if mix == "translate" else "native"
            if mode not in gateways:
                gw = real_runs.fleet_gateway(kafka.bootstrap, out / f"gateway-{mode}", config,
                                             ["--classic-groups", mode])
                gw.start()
                gateways[mode] = gw
            # The prediction: the fleet command itself, --seeds groups of this spec.
            sim_dir = out / f"simulated-{mix}"
            spec_file = out / f"spec-{mix}.json"
            spec_file.write_text(spec.model_dump_json(indent=1))
            code = simulate_main(args.seeds, members, "rolling-upgrade", args.seed, str(sim_dir), mix,
                                 spec_file=str(spec_file), echo=lambda _m: None)
            if code != 0:
                echo(f"error: the simulation of {mix} failed ({code})")
                return code
            groups = by_group(event_files([sim_dir / "events"]))
            names = [spec.group_name(i) for i in range(args.seeds)]
            simulated = [measure(groups[n], members) for n in names if n in groups]
            # Each real roll plays the plan of the simulated group of its index (its steps, clean or killed,
            # and its successors' starts): the fleet command's group, run again in this process for its plan.
            plans = [run_group(spec, i, None).roll_steps for i in range(min(args.runs, args.seeds))]
            # The real rolls, one group after another.
            real: list[dict[str, float]] = []
            lags: list[int] = []
            with EventWriter(out / f"real-{mix}" / "events" / "part-00000.jsonl") as w:
                for i in range(args.runs):
                    t = time.monotonic()
                    roll = real_runs.fleet_roll(gateways[mode].bootstrap, kafka.bootstrap, spec, i, quiet_s=quiet_s,
                                                log_dir=out / f"real-{mix}" / f"roll-{i}",
                                                plan=plans[i] if args.paired and i < len(plans) else None)
                    w.write_all(roll.events)
                    real.append(measure(roll.events, members))
                    lags += getattr(roll, "start_lags_ms", [])
                    echo(f"[{mix} roll {i}] {time.monotonic() - t:.0f} s wall: "
                         + ", ".join(f"{k} {v:.2f}" for k, v in real[-1].items()))
            row = FleetRow(args.clients, mix, real, simulated, settings, sorted(lags), paired=args.paired)
            if lags:
                echo(f"[{mix}] Java processes: launch to consumer startup median {statistics.median(lags):.0f} ms "
                     f"(p10-p90 {spread(lags)['p10']:.0f}-{spread(lags)['p90']:.0f})")
            rows.append(row)
            echo(markdown([row]).splitlines()[-1])
    finally:
        for gw in gateways.values():
            gw.stop()
        kafka.stop()
    header = (f"clients {args.clients}; {members} members, topic {args.topics}, classic heartbeat "
              f"{args.heartbeat_interval_ms} ms, clean stops {args.graceful_share:.0%}; gateway {config}; "
              f"{args.runs} real rolls and {args.seeds} simulated per mix; {time.monotonic() - started:.0f} s")
    table = markdown(rows)
    (out / "fleet-calibration.md").write_text(header + "\n\n" + table + "\n")
    data = json.dumps({"header": header, "rows": [r.as_json() for r in rows]}, indent=1) + "\n"
    (out / "fleet-calibration.json").write_text(data)
    if args.json is not None:
        Path(args.json).write_text(data)
    echo("")
    echo(header)
    echo(table)
    echo(f"\ntable and JSON in {out} (fleet-calibration.md, fleet-calibration.json)")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", default="librdkafka",
                   help="the clients of every group, as `rehearse simulate --clients` takes them (default librdkafka)")
    p.add_argument("--config", help="the gateway's configuration file (both sides); default: every setting at its "
                   "default")
    p.add_argument("--mix", default="classic-cooperative", help="all, or some of " + ",".join(CLIENT_MIXES))
    p.add_argument("--members", type=int, default=5, help="members per group")
    p.add_argument("--topics", default="events:10", help="TOPIC:PARTITIONS, the one topic of every group")
    p.add_argument("--heartbeat-interval-ms", type=int, default=3_000,
                   help="the classic clients' heartbeat.interval.ms (default: their own default, 3000)")
    p.add_argument("--graceful-share", type=float, default=1.0,
                   help="share of the roll's steps that stop a member cleanly; the others kill it (Java clients "
                   "only; default 1.0)")
    p.add_argument("--start-ms", type=int, default=None,
                   help="every client's start_ms: from a member's start to its first group request (default: the "
                   "client's measured one; a JVM's boot is not in it)")
    p.add_argument("--runs", type=int, default=5, help="real rolls per mix")
    p.add_argument("--seeds", type=int, default=40, help="simulated rolls per mix")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unpaired", dest="paired", action="store_false",
                   help="real rolls draw their own plans from the simulator's distributions instead of playing "
                   "the simulated rolls' plans (the prediction is then every simulated roll's mean)")
    p.add_argument("--quiet-s", type=float, default=12.0,
                   help="a real roll ends once nothing changed for this long after its last step (default 12 s: two "
                   "heartbeats of a default gateway's consumer groups and then some)")
    p.add_argument("--out", help="work directory (default: a new temporary one)")
    p.add_argument("--json", type=Path, help="also write the JSON here")


__all__ = ["FleetRow", "FleetRuns", "add_arguments", "calibrate_fleet", "markdown", "measure", "spread"]
