"""Event logs for the rehearsal tests: hand-built scenarios with known answers, and seeded random logs."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from rehearsal import events as E

MIX_PROTOCOL = {
    "classic-eager": "classic",
    "classic-cooperative": "classic",
    "translate": "classic",
    "consumer": "consumer",
}


def tps(*names: str) -> list[E.TopicPartition]:
    """'t-0' -> TopicPartition(topic='t', partition=0)."""
    out = []
    for n in names:
        topic, _, p = n.rpartition("-")
        out.append(E.TopicPartition(topic=topic, partition=int(p)))
    return out


class GroupLog:
    """Builds the events of one group of one run."""

    def __init__(self, run: str, group: str, mix: str) -> None:
        self.common: dict[str, Any] = {
            "run": run, "group": group, "client_mix": mix, "protocol": MIX_PROTOCOL[mix],
        }  # fmt: skip
        self.events: list[E.Event] = []

    def add(self, cls: type, ts: int, **kw: Any) -> GroupLog:
        self.events.append(cls(ts_ms=ts, **self.common, **kw))
        return self

    def join(self, ts: int, m: str) -> GroupLog:
        return self.add(E.MemberJoined, ts, member=m)

    def leave(self, ts: int, m: str) -> GroupLog:
        return self.add(E.MemberLeft, ts, member=m)

    def fence(self, ts: int, m: str) -> GroupLog:
        return self.add(E.MemberFenced, ts, member=m, reason="session timeout")

    def sent(self, ts: int, m: str, epoch: int, *names: str) -> GroupLog:
        return self.add(E.AssignmentSent, ts, member=m, member_epoch=epoch, partitions=tps(*names))

    def assign(self, ts: int, m: str, *names: str) -> GroupLog:
        return self.add(E.PartitionsAssigned, ts, member=m, partitions=tps(*names))

    def revoke(self, ts: int, m: str, *names: str) -> GroupLog:
        return self.add(E.PartitionsRevoked, ts, member=m, partitions=tps(*names))

    def stable(self, ts: int, *names: str) -> GroupLog:
        return self.add(E.GroupStable, ts, partitions=tps(*names) if names else None)

    def topic(self, ts: int, topic: str, n: int) -> GroupLog:
        return self.add(E.TopicMetadata, ts, topic=topic, num_partitions=n)

    def disturb(self, ts: int, kind: str = "rolling_upgrade") -> GroupLog:
        return self.add(E.Disturbance, ts, kind=kind)

    def timer(self, ts: int, kind: str, m: str | None = None) -> GroupLog:
        return self.add(E.TimerExpired, ts, kind=kind, member=m)


def handover() -> GroupLog:
    """a hands t-1 to b at one instant: no gap, no double ownership."""
    g = GroupLog("handover", "g1", "consumer")
    g.topic(0, "t", 2).join(0, "a").sent(0, "a", 1, "t-0", "t-1").assign(0, "a", "t-0", "t-1")
    g.disturb(10).join(50, "b").sent(60, "a", 2, "t-0").sent(60, "b", 2)
    # b's acknowledgement is logged before a's revocation: intervals that only touch are no violation.
    g.assign(100, "b", "t-1").revoke(100, "a", "t-1").sent(100, "b", 3, "t-1")
    return g.stable(120).stable(200)


def gap() -> GroupLog:
    """Eager handover: t-0 has no owner for 30 ms; t-1 is declared but never owned."""
    g = GroupLog("gap", "g2", "classic-eager")
    g.join(0, "a").assign(0, "a", "t-0").join(40, "b")
    g.revoke(50, "a", "t-0").assign(80, "b", "t-0")
    return g.stable(100, "t-0", "t-1")


def double() -> GroupLog:
    """b acknowledges t-0 while a still holds it: 40 ms of double ownership; b leaves at the end."""
    g = GroupLog("double", "g3", "translate")
    g.assign(0, "a", "t-0").assign(30, "b", "t-0").stable(60).revoke(70, "a", "t-0")
    return g.leave(100, "b")


def fenced() -> GroupLog:
    """a is fenced after its session expired; b takes over 30 ms later."""
    g = GroupLog("fenced", "g4", "classic-cooperative")
    g.join(0, "a").assign(0, "a", "t-0", "t-1").disturb(20)
    g.timer(40, "session", "a").fence(40, "a").join(60, "b").assign(70, "b", "t-0", "t-1")
    return g.stable(90)


def multi() -> list[GroupLog]:
    """One run, three groups of different mixes; gc never becomes stable."""
    ga = GroupLog("multi", "ga", "consumer")
    ga.disturb(5).assign(10, "a", "x-0").assign(10, "b", "x-1").stable(50)
    gb = GroupLog("multi", "gb", "classic-eager")
    gb.assign(0, "a", "y-0", "y-1").revoke(20, "a", "y-0", "y-1").assign(40, "a", "y-0")
    gb.assign(45, "b", "y-1").stable(80)
    gc = GroupLog("multi", "gc", "classic-eager")
    gc.join(0, "a").leave(10, "a")
    return [ga, gb, gc]


def hand_built() -> dict[str, list[E.Event]]:
    """Scenario name -> events (each scenario is its own run)."""
    return {
        "handover": handover().events,
        "gap": gap().events,
        "double": double().events,
        "fenced": fenced().events,
        "multi": [ev for g in multi() for ev in g.events],
    }


def write_raw(path: Path, events: list[E.Event]) -> None:
    """JSON lines as given (seq left as set), so the tie-break of equal timestamps is exercised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for ev in events:
            f.write(E.event_to_json(ev) + "\n")


def random_group(rng: random.Random, run: str, group: str) -> list[E.Event]:
    """A random but well-formed group history: every member has at most one event per timestamp, so
    that the order of events is fully determined by (ts_ms, seq, rank) even with seq = 0."""
    mix = rng.choice(E.CLIENT_MIXES)
    g = GroupLog(run, group, mix)
    topics = {f"t{i}": rng.randint(1, 4) for i in range(rng.randint(1, 2))}
    every = [f"{t}-{p}" for t, n in topics.items() for p in range(n)]
    members = [f"m{i}" for i in range(rng.randint(1, 4))]
    ts = rng.randint(0, 1000)
    if rng.random() < 0.5:
        for t, n in topics.items():
            g.topic(ts, t, n)
    busy: set[str] = set()
    for _ in range(rng.randint(5, 40)):
        step = rng.choice([0, 0, 1, 5, 10, 30, 100])
        if step:
            ts += step
            busy.clear()
        free = [m for m in members if m not in busy]
        if not free or rng.random() < 0.15:
            kind = rng.choice(["stable", "stable_declared", "disturb", "timer", "convert", "rebalance"])
            if kind == "stable":
                g.stable(ts)
            elif kind == "stable_declared":
                g.stable(ts, *rng.sample(every, rng.randint(1, len(every))))
            elif kind == "disturb":
                g.add(E.Disturbance, ts, kind="restart", member=rng.choice([None, *members]))
            elif kind == "timer":
                # A member named only by a timer still counts as a member of the group.
                g.timer(ts, rng.choice(["rebalance", "session", "sync"]), rng.choice([None, *members, "ghost"]))
            elif kind == "convert":
                other = "consumer" if g.common["protocol"] == "classic" else "classic"
                g.add(E.GroupConverted, ts, from_type=g.common["protocol"], to_type=other)
            else:
                g.add(E.RebalanceStarted, ts, reason="member joined")
            continue
        m = rng.choice(free)
        busy.add(m)
        action = rng.choices(
            ["join", "assign", "revoke", "sent", "leave", "fence"], weights=[2, 6, 4, 2, 1, 1]
        )[0]
        some = rng.sample(every, rng.randint(1, len(every)))
        if action == "join":
            g.join(ts, m)
        elif action == "assign":
            g.assign(ts, m, *some)
        elif action == "revoke":
            g.revoke(ts, m, *some)
        elif action == "sent":
            g.sent(ts, m, rng.randint(1, 20), *some)
        elif action == "leave":
            g.leave(ts, m)
        else:
            g.fence(ts, m)
    return g.events


def random_log(seed: int, groups: int = 6) -> list[E.Event]:
    rng = random.Random(seed)
    out: list[E.Event] = []
    for i in range(groups):
        out += random_group(rng, f"run{seed}-{i % 2}", f"group{i}")
    return out


def write_random(directory: Path, seed: int, groups: int = 6) -> list[E.Event]:
    """Odd seeds: raw lines with seq = 0, in a shuffled file order. Even seeds: through EventWriter after a
    shuffle, so seq no longer follows ts. Returns the events as a reader will see them."""
    events = random_log(seed, groups)
    rng = random.Random(seed * 7919)
    shuffled = events[:]
    rng.shuffle(shuffled)
    path = directory / f"random-{seed}.jsonl"
    if seed % 2:
        write_raw(path, shuffled)
        return shuffled
    with E.EventWriter(path) as w:
        return [w.write(ev) for ev in shuffled]


def as_json_lines(events: list[E.Event]) -> str:
    return "".join(json.dumps(E.event_to_dict(ev)) + "\n" for ev in events)
