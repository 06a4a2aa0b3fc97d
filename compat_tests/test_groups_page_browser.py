"""The live groups page in a real browser (headless Chromium) while a real group rolls from the classic
protocol to the consumer protocol: one page, never reloaded, shows the group convert and the member counts
move, and the test keeps a screenshot of it (tmp dir, and out/screenshots/ for a human to look at)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.browser import Chromium, Page
from compat_tests.harness.clients import ConfluentConsumer
from compat_tests.harness.events import EventLog
from compat_tests.harness.gateway_proc import GatewayProcess

pytestmark = pytest.mark.kafka

SCREENSHOTS = Path(__file__).resolve().parent.parent / "out" / "screenshots"


@pytest.fixture
def page_gateway(kafka: ProcessBackend, tmp_path: Path) -> Iterator[tuple[GatewayProcess, str]]:
    admin = f"127.0.0.1:{free_port_block(1)}"
    gw = GatewayProcess(upstream=kafka.bootstrap, listen_port=free_port_block(3), log_dir=tmp_path,
                        extra_args=["--state-dir", str(tmp_path / "state"), "--metrics-listen", admin])
    gw.start()
    try:
        yield gw, admin
    finally:
        gw.stop()


def _tile(label: str) -> str:
    """The number a fleet tile shows, as a JavaScript expression."""
    return f"(document.querySelector('[data-tile=\"{label}\"] b') || {{}}).textContent"


def _wait(what: str, predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout_s}s: {what}")


def _group(admin: str, group: str) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://{admin}/api/groups/{group}", timeout=10) as r:
            body: dict[str, object] = json.loads(r.read())
            return body
    except urllib.error.HTTPError:
        return None


async def _shows(page: Page, tiles: dict[str, str], what: str, admin: str, timeout_s: float = 90) -> None:
    cond = " && ".join(f"{_tile(label)} === {json.dumps(value)}" for label, value in tiles.items())
    try:
        await page.wait_for(cond, timeout_s, what)
    except AssertionError as e:
        with urllib.request.urlopen(f"http://{admin}/api/groups", timeout=10) as r:
            overview = json.loads(r.read())
        samples = [(s["groups"], s["conversions"]) for s in overview["history"][-10:]]
        raise AssertionError(f"{e}\nfleet {overview['fleet']}\n{len(overview['history'])} samples, "
                             f"the last: {samples}") from None


def test_the_page_shows_a_rolling_upgrade_live(
    page_gateway: tuple[GatewayProcess, str], make_topic: Callable[..., str], names: Callable[[str], str],
    tmp_path: Path,
) -> None:
    gw, admin = page_gateway
    topic = make_topic(2)
    group = names("rolling")
    log = EventLog()
    classic = [ConfluentConsumer(name=f"classic-{i}", log=log, bootstrap=gw.bootstrap, group_id=group, topics=[topic])
               for i in range(2)]
    upgraded: list[ConfluentConsumer] = []
    for c in classic:
        c.start()
    try:
        _wait("the classic group of two", lambda: (_group(admin, group) or {}).get("members") == 2, 60)

        async def watch() -> None:
            async with Chromium.launch(tmp_path) as browser:
                page = await browser.page(f"http://{admin}/groups")
                await page.evaluate("window.sameLoad = 'yes'")  # gone if the page ever reloads
                await _shows(page, {"classic groups": "1", "classic members": "2", "consumer members": "0"},
                             "the classic group", admin)
                assert await page.evaluate(f"document.body.innerText.includes({json.dumps(group)})")
                for i, old in enumerate(classic):
                    await asyncio.to_thread(old.stop)
                    new = ConfluentConsumer(name=f"consumer-{i}", log=log, bootstrap=gw.bootstrap, group_id=group,
                                            topics=[topic], group_protocol="consumer")
                    upgraded.append(new)
                    new.start()
                    if i == 0:
                        # Half way: one group on the new protocol, one member of each kind.
                        await _shows(page, {"consumer groups": "1", "classic groups": "0",
                                            "translated members": "1", "consumer members": "1",
                                            "conversions to consumer": "1"}, "the group converted half way", admin)
                        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                        shot = await page.screenshot()
                        (tmp_path / "groups-page-half-way.png").write_bytes(shot)
                        (SCREENSHOTS / "groups-page-half-way.png").write_bytes(shot)
                await _shows(page, {"consumer groups": "1", "translated members": "0", "consumer members": "2"},
                             "the roll finished", admin)
                assert await page.evaluate("window.sameLoad") == "yes"
                assert int(await page.evaluate("document.body.dataset.updates")) >= 3  # the three states, one load
                shot = await page.screenshot()
                assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 10_000
                (tmp_path / "groups-page.png").write_bytes(shot)
                (SCREENSHOTS / "groups-page.png").write_bytes(shot)
                # The group's own page: its members and their protocol.
                detail = await browser.page(f"http://{admin}/groups/{group}")
                await detail.wait_for(f"!!document.querySelector('[data-group={json.dumps(group)}]')", 30, "the group")
                assert "consumer group" in await detail.evaluate("document.body.innerText")
                protocols = await detail.evaluate("[...document.querySelectorAll('td span')].map(s => s.textContent)")
                assert protocols == ["consumer", "consumer"], protocols
                (SCREENSHOTS / "group-page.png").write_bytes(await detail.screenshot())

        asyncio.run(watch())
    finally:
        for c in classic + upgraded:
            c.stop()
