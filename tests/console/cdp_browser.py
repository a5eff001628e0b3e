"""Debian's headless ``chromium``, driven over its DevTools protocol (CDP) with websockets.

:func:`chromium_or_skip` finds the browser: missing, it skips locally with the
reason and fails under CI (``$CI`` set). :class:`Browser` starts it with a
fresh profile and no network features, opens one page and offers what the
tests need: navigate, evaluate, :meth:`Browser.wait_for` (a page-side
``MutationObserver`` with a deadline, not a sleep), screenshots.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)


def chromium_or_skip() -> str:
    """The browser's path; skip (locally) or fail (``$CI``) when it is missing."""
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    reason = "Debian's chromium is not installed (apt-get install chromium; .ci/apt does)"
    if os.environ.get("CI"):
        pytest.fail(reason + " and CI is set: the console's browser test must run")
    pytest.skip(reason)


class BrowserError(Exception):
    """The browser did not start, or a DevTools call failed."""


class Browser:
    """One headless chromium with one page (a fresh ``--user-data-dir``)."""

    def __init__(self, executable: str, width: int = 1280, height: int = 860) -> None:
        self.profile = tempfile.mkdtemp(prefix="console-chromium-")
        self.proc = subprocess.Popen(
            [
                executable,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: list[str] = []
        found: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_stderr, args=(found,), daemon=True).start()
        try:
            url = found.get(timeout=30)
        except queue.Empty:
            self.close()
            raise BrowserError(
                "chromium did not open DevTools: " + "".join(self.log[-5:])
            ) from None
        self.ws: ClientConnection = connect(url, max_size=None, open_timeout=10)
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self.page("Page.enable")
        self.page("Runtime.enable")
        self.page(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def _read_stderr(self, found: queue.Queue[str]) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if line.startswith("DevTools listening on "):
                found.put(line.split(" on ", 1)[1].strip())

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        message_id = next(self.ids)
        frame: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session:
            frame["sessionId"] = session
        self.ws.send(json.dumps(frame))
        while True:
            reply = json.loads(self.ws.recv(timeout=timeout))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def page(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return self.call(method, params, self.session, **kw)

    def navigate(self, url: str) -> None:
        """Open ``url`` and return once its ``load`` event fired."""
        self.events.clear()
        self.page("Page.navigate", {"url": url})
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(json.loads(self.ws.recv(timeout=30)))

    def evaluate(self, expression: str, timeout: float = 30.0) -> Any:
        result = self.page(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
            timeout=timeout + 5,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression[:80]}: {text}")
        return result["result"].get("value")

    def wait_for(self, predicate: str, what: str, timeout: float = 20.0) -> Any:
        """The truthy value of the JS ``predicate``, re-checked on every DOM change
        (a page-side ``MutationObserver``) until ``timeout`` s."""
        script = f"""new Promise((resolve, reject) => {{
          const check = () => {{ try {{ return ({predicate}); }} catch (e) {{ return null; }} }};
          const first = check();
          if (first) return resolve(first);
          const timer = setTimeout(() => {{ observer.disconnect();
            reject(new Error("timed out: " + {json.dumps(what)})); }}, {int(timeout * 1000)});
          const observer = new MutationObserver(() => {{
            const value = check();
            if (value) {{ clearTimeout(timer); observer.disconnect(); resolve(value); }}
          }});
          observer.observe(document, {{subtree: true, childList: true, attributes: true,
            characterData: true}});
        }})"""
        deadline = time.monotonic() + timeout
        while True:  # a navigation in between ends the page's promise: observe the new page
            try:
                return self.evaluate(script, timeout=max(0.1, deadline - time.monotonic()))
            except BrowserError as error:
                gone = "navigated" in str(error) or "context was destroyed" in str(error)
                if not gone or time.monotonic() > deadline:
                    raise

    def text(self, selector: str) -> str:
        return str(
            self.evaluate(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''")
        )

    def screenshot(self, path: Path) -> Path:
        data = self.page("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            with contextlib.suppress(Exception):
                self.call("Browser.close", timeout=5)
            ws.close()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.profile, ignore_errors=True)
