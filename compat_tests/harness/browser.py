"""Headless Chromium driven over the DevTools protocol (a websocket, aiohttp's client): open a page, read
what its scripts drew, take a screenshot. Debian's ``chromium`` package (``make browser`` installs it).

    async with Chromium.launch(tmp_path) as browser:
        page = await browser.page("http://127.0.0.1:9000/groups")
        await page.wait_for("document.body.dataset.updates > 2", 30)
        png = await page.screenshot()
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

BINARIES = ("chromium", "chromium-browser", "google-chrome")
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium_binary() -> str:
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError("no Chromium on PATH: `make browser` installs Debian's chromium package")


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        await self.ws.send_json({"id": msg_id, "method": method, "params": params})
        while True:
            msg = await self.ws.receive(timeout=60)
            if msg.type is not aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"DevTools connection ended: {msg.type}")
            body = json.loads(msg.data)
            if body.get("id") == msg_id:
                if "error" in body:
                    raise RuntimeError(f"{method}: {body['error']}")
                result: dict[str, Any] = body.get("result", {})
                return result

    async def evaluate(self, expression: str) -> Any:
        r = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float, what: str | None = None) -> Any:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):
                last = await self.evaluate(expression)
                if last:
                    return last
            await asyncio.sleep(0.25)
        text = await self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(f"not within {timeout_s}s: {what or expression} (last {last!r}); the page shows:\n{text}")

    async def screenshot(self) -> bytes:
        r = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return base64.b64decode(r["data"])


class Chromium:
    def __init__(self, proc: subprocess.Popen[str], endpoint: str, session: aiohttp.ClientSession) -> None:
        self.proc = proc
        self.endpoint = endpoint  # host:port of the DevTools HTTP endpoint
        self.session = session
        self._sockets: list[aiohttp.ClientWebSocketResponse] = []

    @classmethod
    @contextlib.asynccontextmanager
    async def launch(cls, work: Path, width: int = 1280, height: int = 900) -> AsyncIterator[Chromium]:
        profile = work / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [chromium_binary(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            endpoint = await asyncio.to_thread(cls._endpoint, proc)
            async with aiohttp.ClientSession() as session:
                browser = cls(proc, endpoint, session)
                try:
                    yield browser
                finally:
                    for ws in browser._sockets:
                        await ws.close()
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @staticmethod
    def _endpoint(proc: subprocess.Popen[str]) -> str:
        assert proc.stderr is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            m = _LISTENING.search(line)
            if m:
                # Keep reading what it prints, or a full pipe would stall the browser.
                threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
                return m.group(1).split("/")[2]
        raise RuntimeError("Chromium did not open its DevTools endpoint:\n" + "".join(seen[-20:]))

    async def page(self, url: str) -> Page:
        async with self.session.get(f"http://{self.endpoint}/json/list") as r:
            targets = await r.json()
        target = next(t for t in targets if t.get("type") == "page")
        ws = await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        self._sockets.append(ws)
        page = Page(ws)
        await page.send("Page.enable")
        await page.send("Page.navigate", url=url)
        await page.wait_for("document.readyState === 'complete'", 30, f"{url} loaded")
        return page
