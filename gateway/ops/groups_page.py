"""The live groups page of the admin listener: every group this instance coordinates, and the fleet's move
from the classic protocol to the consumer protocol, updating in the browser as it happens.

    GET /groups                    the page: every group, the fleet view (HTML; the data comes from below)
    GET /groups/<id>               one group: its members, their protocol, epochs, assignment, lag
    GET /api/groups                the overview as JSON (what the page renders)
    GET /api/groups/<id>           one group as JSON (404 when this instance does not coordinate it)
    GET /api/events/groups         server-sent events: the overview, again every ``sample_s``
    GET /api/events/groups/<id>    server-sent events: one group

Read-only: it reads the group layer's state between requests (nothing here changes a group), and each
instance shows the groups of the shards it owns (the others' are one instance away: the overview names the
instances group's members). The history behind the fleet view (groups and members per protocol, conversions,
rebalances) is sampled every ``sample_s`` into a bounded ring (``HISTORY`` samples), so a page opened late
still draws the last half hour; conversions are counted where the coordinator makes them (GroupStats).

Credentials: when the gateway terminates SASL its clients are people with credentials, and the page would
show their groups to anyone reaching the admin port, so it then asks for HTTP Basic credentials checked
against the same credential store (``listener_sasl_credentials_file``); ``admin_users`` narrows who of them
may look. /metrics, /healthz and /readyz stay open: probes and scrapers carry no credentials.

The page draws itself from the JSON with the DOM (``textContent``, never markup from data): group and
member ids come from clients and are shown as text.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from coordinator.connect.model import ConnectGroup
from coordinator.model import ConsumerGroup
from gateway.logging import get_logger
from gateway.security.sasl_server import CredentialStore
from translate.classic_group import ClassicGroup

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.ops.health import GroupsView

log = get_logger("gateway.ops.groups_page")

SAMPLE_S = 2.0
HISTORY = 900  # samples: half an hour at the default interval
# Lag of one partition: (committed offset, log end offset), or None when either is unknown.
LagSource = Callable[[str], Mapping[tuple[str, int], tuple[int, int]]]
PasswordCheck = Callable[[str, str], bool]


@dataclass(slots=True)
class Sample:
    at: float
    groups: dict[str, int]  # group type -> groups
    members: dict[str, int]  # classic | translated | consumer | connect (workers) -> members
    conversions: dict[str, int]  # to_consumer | to_classic: so far
    rebalances: int  # so far, every type


def _units(a: Any) -> list[str]:
    """A connect assignment as names: connectors, then tasks as connector-number."""
    return [*sorted(a.connectors), *(f"{c}-{n}" for c, n in sorted(a.tasks))]


def _connect_row(g: ConnectGroup, detail: bool) -> dict[str, Any]:
    """A connect group (docs/connect.md): its workers in the members column, their URLs in the detail."""
    workers = list(g.workers.values())
    row: dict[str, Any] = {
        "group_id": g.group_id, "type": "connect", "state": g.state().name, "epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch, "members": len(workers),
        "protocols": {"classic": 0, "translated": 0, "consumer": 0, "connect": len(workers)},
        "reconciled": sum(1 for w in workers if w.member_epoch == g.assignment_epoch and w.state.name == "STABLE"),
        "assignor": g.assignor,
        "computing": g.computing.member_id if g.computing is not None else None,
    }
    if detail:
        row["member_list"] = [
            {
                "member_id": w.member_id, "protocol": "connect", "client_id": w.client_id, "client_host": w.client_host,
                "instance_id": w.instance_id, "url": w.url, "member_epoch": w.member_epoch, "state": w.state.name,
                "assigned": len(_units(w.assigned)), "pending_revocation": len(_units(w.pending_revocation)),
                "target": len(_units(g.target[w.member_id].assignment)) if w.member_id in g.target else 0,
                "assignment": {"connectors and tasks": _units(w.assigned)},
            }
            for w in workers
        ]
    return row


def _protocol(member: Any) -> str:
    return "consumer" if member.classic_metadata is None else "classic (translated)"


def _count(assignment: Mapping[Any, frozenset[int]]) -> int:
    return sum(len(p) for p in assignment.values())


class GroupsPage:
    """``page = GroupsPage(layer); app.add_routes(page.routes()); task = asyncio.create_task(page.run())``."""

    def __init__(self, layer: GroupsView, *, lag: LagSource | None = None, sample_s: float = SAMPLE_S,
                 check_password: PasswordCheck | None = None, users: frozenset[str] | None = None) -> None:
        self.layer = layer
        self.lag = lag
        self.sample_s = sample_s
        self.check_password = check_password
        self.users = users
        self.history: deque[Sample] = deque(maxlen=HISTORY)
        self.closed = False  # set at shutdown: the event streams end

    def close(self) -> None:
        self.closed = True

    # --- what the page shows -------------------------------------------------------------------------

    def _groups(self) -> Iterator[ConsumerGroup | ClassicGroup | ConnectGroup]:
        runtime = self.layer.runtime
        yield from runtime.consumer_groups()
        yield from runtime.classic_groups()
        yield from runtime.connect_groups()

    def _lag(self, group_id: str) -> dict[str, Any]:
        if self.lag is None:
            return {"total": None, "partitions": []}
        rows = []
        total = 0
        for (topic, partition), (committed, end) in sorted(self.lag(group_id).items()):
            lag = max(0, end - committed)
            total += lag
            rows.append({"topic": topic, "partition": partition, "committed": committed, "end": end, "lag": lag})
        return {"total": total if rows else None, "partitions": rows}

    def _row(self, g: ConsumerGroup | ClassicGroup | ConnectGroup, detail: bool) -> dict[str, Any]:
        row: dict[str, Any]
        if isinstance(g, ConnectGroup):
            row = _connect_row(g, detail)
        elif isinstance(g, ConsumerGroup):
            members = list(g.members.values())
            protocols = {"classic": 0, "translated": 0, "consumer": 0}
            for m in members:
                protocols["consumer" if m.classic_metadata is None else "translated"] += 1
            names = {t.topic_id: t.name for t in g.subscription_metadata.values()}
            row = {
                "group_id": g.group_id, "type": "consumer", "state": g.state().name,
                "epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch, "members": len(members),
                "protocols": protocols,
                "reconciled": sum(1 for m in members
                                  if m.member_epoch == g.assignment_epoch and m.state.name == "STABLE"),
            }
            if detail:
                row["member_list"] = [
                    {
                        "member_id": m.member_id, "protocol": _protocol(m), "client_id": m.client_id,
                        "client_host": m.client_host, "instance_id": m.instance_id, "member_epoch": m.member_epoch,
                        "state": m.state.name, "assigned": _count(m.assigned_partitions),
                        "pending_revocation": _count(m.partitions_pending_revocation),
                        "target": _count(g.target_assignment.get(m.member_id, {})),
                        "assignment": {names.get(t, str(t)): sorted(p) for t, p in m.assigned_partitions.items()},
                    }
                    for m in members
                ]
        else:
            row = {
                "group_id": g.group_id, "type": "classic", "state": g.state.name, "epoch": g.generation_id,
                "assignment_epoch": g.generation_id, "members": len(g.members),
                "protocols": {"classic": len(g.members), "translated": 0, "consumer": 0},
                "reconciled": len(g.members) - len(g.pending_sync_members), "protocol_type": g.protocol_type,
                "protocol_name": g.protocol_name,
            }
            if detail:
                row["member_list"] = [
                    {
                        "member_id": m.member_id, "protocol": "classic", "client_id": m.client_id,
                        "client_host": m.client_host, "instance_id": m.group_instance_id,
                        "member_epoch": g.generation_id, "state": "AWAITING_SYNC" if m.member_id
                        in g.pending_sync_members else "STABLE", "leader": m.member_id == g.leader_id,
                    }
                    for m in g.members.values()
                ]
        lag = self._lag(g.group_id)
        row["lag"] = lag["total"]
        if detail:
            row["lag_partitions"] = lag["partitions"]
        return row

    def overview(self) -> dict[str, Any]:
        rows = sorted((self._row(g, False) for g in self._groups()), key=lambda r: r["group_id"])
        return {"at": time.time(), "groups": rows, "fleet": self._fleet(rows),
                "history": [asdict(s) for s in self.history]}

    def group(self, group_id: str) -> dict[str, Any] | None:
        for g in self._groups():
            if g.group_id == group_id:
                return self._row(g, True) | {"at": time.time()}
        return None

    def _fleet(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        groups = {"classic": 0, "consumer": 0, "connect": 0}
        members = {"classic": 0, "translated": 0, "consumer": 0, "connect": 0}
        for r in rows:
            groups[r["type"]] += 1
            for p, n in r["protocols"].items():
                members[p] += n
        stats = self.layer.stats
        return {
            "groups": groups, "members": members, "conversions": self._conversions(),
            "conversions_refused": sum(stats.conversions_refused.values()),
            "rebalances": sum(stats.rebalances.values()),
            "rebalances_per_minute": self._per_minute(),
        }

    def _conversions(self) -> dict[str, int]:
        """Online conversions so far, counted where the coordinator makes them (gateway/metrics.py)."""
        done = self.layer.stats.conversions
        return {"to_consumer": done.get(("classic", "consumer"), 0), "to_classic": done.get(("consumer", "classic"), 0)}

    def _per_minute(self) -> float | None:
        if len(self.history) < 2:
            return None
        last = self.history[-1]
        first = next((s for s in self.history if last.at - s.at <= 60.0), self.history[0])
        span = last.at - first.at
        return None if span <= 0 else round((last.rebalances - first.rebalances) * 60.0 / span, 1)

    def sample(self) -> Sample:
        """Record the fleet now (the history the page's chart draws)."""
        groups = {"classic": 0, "consumer": 0, "connect": 0}
        members = {"classic": 0, "translated": 0, "consumer": 0, "connect": 0}
        for g in self._groups():
            if isinstance(g, ConnectGroup):
                groups["connect"] += 1
                members["connect"] += len(g.workers)
            elif isinstance(g, ConsumerGroup):
                groups["consumer"] += 1
                for m in g.members.values():
                    members["consumer" if m.classic_metadata is None else "translated"] += 1
            else:
                groups["classic"] += 1
                members["classic"] += len(g.members)
        s = Sample(time.time(), groups, members, self._conversions(), sum(self.layer.stats.rebalances.values()))
        self.history.append(s)
        return s

    async def run(self) -> None:
        """Sample the fleet every ``sample_s`` until cancelled."""
        while True:
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a failed sample must not stop the page
                log.exception("groups page sample failed")
            await asyncio.sleep(self.sample_s)

    # --- HTTP ------------------------------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/groups", self._page),
            web.get("/groups/{group_id:.+}", self._page),
            web.get("/api/groups", self._overview_json),
            web.get("/api/groups/{group_id:.+}", self._group_json),
            web.get("/api/events/groups", self._overview_events),
            web.get("/api/events/groups/{group_id:.+}", self._group_events),
        ]

    def _authorized(self, request: web.Request) -> None:
        """Raise 401 unless the request carries credentials the store accepts (when credentials are asked)."""
        if self.check_password is None:
            return
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() == "basic":
            with contextlib.suppress(binascii.Error, UnicodeDecodeError, ValueError):
                user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
                if sep and (self.users is None or user in self.users) and self.check_password(user, password):
                    return
        raise web.HTTPUnauthorized(headers={"WWW-Authenticate": 'Basic realm="groupgate", charset="UTF-8"'})

    async def _page(self, request: web.Request) -> web.Response:
        self._authorized(request)
        return web.Response(text=PAGE, content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})

    async def _overview_json(self, request: web.Request) -> web.Response:
        self._authorized(request)
        return web.json_response(self.overview())

    async def _group_json(self, request: web.Request) -> web.Response:
        self._authorized(request)
        body = self.group(request.match_info["group_id"])
        if body is None:
            raise web.HTTPNotFound(text="this instance does not coordinate that group\n")
        return web.json_response(body)

    async def _events(self, request: web.Request, snapshot: Callable[[], dict[str, Any] | None]) -> web.StreamResponse:
        self._authorized(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await response.prepare(request)
        while not self.closed:
            body = snapshot()
            data = json.dumps(body if body is not None else {"gone": True}, separators=(",", ":"))
            try:
                await response.write(f"data: {data}\n\n".encode())
            except (ConnectionResetError, RuntimeError):
                break  # the browser went away
            await asyncio.sleep(self.sample_s)
        return response

    async def _overview_events(self, request: web.Request) -> web.StreamResponse:
        return await self._events(request, self.overview)

    async def _group_events(self, request: web.Request) -> web.StreamResponse:
        group_id = request.match_info["group_id"]
        return await self._events(request, lambda: self.group(group_id))


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>groupgate groups</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em;margin:0 0 .6em}h2{font-size:1.05em;margin:1.2em 0 .4em}
table{border-collapse:collapse;min-width:40em}th,td{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.tiles{display:flex;gap:1em;flex-wrap:wrap}.tile{border:1px solid #ddd;border-radius:6px;padding:.5em 1em}
.tile b{display:block;font-size:1.5em}.classic{color:#b35c00}.translated{color:#7a3fb0}.consumer{color:#1d6fb8}
#live{font-size:.85em;color:#888}svg{border:1px solid #eee;background:#fcfcfc}
</style></head><body>
<h1>groupgate groups <span id="live">connecting</span></h1>
<div id="root"></div>
<script>
"use strict";
const path = location.pathname.replace(/\\/+$/, "");
const detail = path.startsWith("/groups/") ? decodeURIComponent(path.slice("/groups/".length)) : null;
const root = document.getElementById("root");
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k === null || k === undefined ? "-" : String(k)));
  return e;
}
function table(head, rows) {
  const t = el("table", {}, el("tr", {}, ...head.map(h => el("th", {}, h))));
  for (const r of rows) t.append(el("tr", {}, ...r.map(c => c instanceof Node ? el("td", {}, c) : el("td", typeof c === "number" ? {class: "n"} : {}, c))));
  return t;
}
function tile(label, value, cls) { return el("div", {class: "tile " + (cls || ""), "data-tile": label}, el("b", {}, value), label); }
function chart(history) {
  const w = 640, h = 140, ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h);
  if (history.length < 2) return svg;
  const keys = ["classic", "translated", "consumer"];
  const max = Math.max(1, ...history.map(s => Math.max(...keys.map(k => s.members[k]))));
  const t0 = history[0].at, t1 = history[history.length - 1].at, span = Math.max(1, t1 - t0);
  for (const k of keys) {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("class", k); line.setAttribute("fill", "none"); line.setAttribute("stroke", "currentColor");
    line.setAttribute("stroke-width", "2");
    line.setAttribute("points", history.map(s => ((s.at - t0) / span * (w - 10) + 5).toFixed(1) + "," +
      (h - 5 - s.members[k] / max * (h - 10)).toFixed(1)).join(" "));
    svg.append(line);
  }
  return svg;
}
function overview(d) {
  const f = d.fleet;
  root.replaceChildren(
    el("h2", {}, "Fleet"),
    el("div", {class: "tiles"},
      tile("classic groups", f.groups.classic, "classic"), tile("consumer groups", f.groups.consumer, "consumer"),
      tile("classic members", f.members.classic, "classic"), tile("translated members", f.members.translated, "translated"),
      tile("consumer members", f.members.consumer, "consumer"),
      tile("connect groups", f.groups.connect), tile("connect workers", f.members.connect),
      tile("conversions to consumer", f.conversions.to_consumer), tile("conversions to classic", f.conversions.to_classic),
      tile("conversions refused", f.conversions_refused),
      tile("rebalances per minute", f.rebalances_per_minute)),
    el("h2", {}, "Members per protocol (classic, translated, consumer)"), chart(d.history),
    el("h2", {}, "Groups (" + d.groups.length + ")"),
    table(["group", "type", "state", "epoch", "members", "classic", "translated", "consumer", "reconciled", "lag"],
      d.groups.map(g => [el("a", {href: "/groups/" + encodeURIComponent(g.group_id)}, g.group_id), g.type, g.state,
        g.epoch, g.members, g.protocols.classic, g.protocols.translated, g.protocols.consumer,
        g.reconciled + "/" + g.members, g.lag])));
}
function group(d) {
  if (d.gone) { root.replaceChildren(el("p", {}, "This instance does not coordinate " + detail + " (now).")); return; }
  const kids = [
    el("p", {}, el("a", {href: "/groups"}, "all groups")),
    el("h2", {"data-group": d.group_id}, d.group_id + ": " + d.type + " group, " + d.state),
    el("div", {class: "tiles"}, tile(d.type === "classic" ? "generation" : "group epoch", d.epoch),
      tile("assignment epoch", d.assignment_epoch), tile("members", d.members), tile("lag", d.lag)),
    el("h2", {}, "Members"),
    table(["member", "protocol", "client", "host", "instance", "url", "epoch", "state", "assigned", "target", "revoking"],
      d.member_list.map(m => [m.member_id, el("span", {class: m.protocol.split(" ")[0]}, m.protocol), m.client_id,
        m.client_host, m.instance_id, m.url || "", m.member_epoch, m.state, m.assigned, m.target, m.pending_revocation]))];
  if (d.lag_partitions.length) kids.push(el("h2", {}, "Lag"),
    table(["topic", "partition", "committed", "log end", "lag"],
      d.lag_partitions.map(p => [p.topic, p.partition, p.committed, p.end, p.lag])));
  root.replaceChildren(...kids);
}
const url = detail === null ? "/api/events/groups" : "/api/events/groups/" + encodeURIComponent(detail);
const live = document.getElementById("live");
const source = new EventSource(url);
source.onmessage = ev => {
  const d = JSON.parse(ev.data);
  (detail === null ? overview : group)(d);
  live.textContent = "live, " + new Date(d.at ? d.at * 1000 : Date.now()).toLocaleTimeString();
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
};
source.onerror = () => { live.textContent = "reconnecting"; };
</script></body></html>
"""


def page_credentials(config: GatewayConfig) -> tuple[PasswordCheck | None, frozenset[str] | None]:
    """Whom the page asks for credentials, from the configuration (see the module's docstring):
    ``(check, users)``; ``check`` is None when the page is open. Under SASL termination without a
    credentials file (OAUTHBEARER alone) and no ``admin_credentials_file``, no password can pass: the page
    stays closed rather than open."""
    users = frozenset(config.admin_users) if config.admin_users is not None else None
    path = config.admin_credentials_file
    if path is None and config.listener_sasl_mode == "terminate":
        path = config.listener_sasl_credentials_file
        if path is None:
            return (lambda _user, _password: False), users
    if path is None:
        return None, users
    return CredentialStore(path).check_password, users
