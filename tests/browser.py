"""Headless Chromium for the report's tests, driven over the DevTools protocol on a pipe.

`--remote-debugging-pipe` makes Chromium read commands on fd 3 and write replies and events on
fd 4, each a JSON message ending in a NUL byte: no websocket, no port, no client library. That is
enough to see what a person's browser would: console errors, uncaught exceptions, every network
request the page makes, the rendered text, and screenshots at a given width.

Chromium is Debian's (`apt-get install chromium`); `find_chromium` returns None where there is
none, and the tests that need it skip, saying so.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

# Required here (see the env notes): without the background-networking flags Chromium tries to
# reach Google's hosts at every start, which this machine's closed network refuses.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio", "--disable-extensions", "--disable-default-apps")


def find_chromium() -> str | None:
    for name in (os.environ.get("BLOCKCLI_CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    return None


class Browser:
    """One Chromium process with a fresh profile; `open` loads a page in a new tab."""

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="blockcli-chromium-")
        commands_r, self._commands = os.pipe()  # we write, Chromium reads on its fd 3
        self._replies, replies_w = os.pipe()  # Chromium writes on its fd 4, we read

        def onto_3_and_4() -> None:  # in the child: the pipe ends moved to fds 3 and 4 (first out of the
            high_r = fcntl.fcntl(commands_r, fcntl.F_DUPFD, 100)  # way, as either may already be 3 or 4)
            high_w = fcntl.fcntl(replies_w, fcntl.F_DUPFD, 100)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)
            os.close(high_r)
            os.close(high_w)

        # close_fds=False keeps 3 and 4 open across exec; every other descriptor Python made is
        # non-inheritable (PEP 446) and closes there anyway
        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
                                      "about:blank"], close_fds=False, preexec_fn=onto_3_and_4,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_r)
        os.close(replies_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.send("Browser.getVersion")

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._replies], [], [], left)
            if ready:
                chunk = os.read(self._replies, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed its pipe (exit code {self.proc.poll()})")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float | None = None) -> dict[str, Any]:
        """Send a command and wait for its reply; events that arrive meanwhile are kept in `events`."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float | None = None) -> dict[str, Any]:
        for i, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(i)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            event = self._read_message(deadline)
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self.events.append(event)

    def open(self, url: str, width: int, height: int = 900, mobile: bool = False) -> "Tab":
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": mobile}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        return Tab(self, session, target, mobile)


class Tab:
    def __init__(self, browser: Browser, session: str, target: str, mobile: bool = False) -> None:
        self.browser, self.session, self.target, self.mobile = browser, session, target, mobile

    def evaluate(self, expression: str) -> Any:
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                   session=self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, full_page: bool = True) -> bytes:
        """A PNG of the viewport, or of the whole page: the viewport is made as tall as the page for it
        (captureBeyondViewport leaves scrolling boxes unpainted past the viewport), then restored."""
        metrics = self.evaluate("[innerWidth, innerHeight, document.documentElement.scrollHeight]")
        width, height, page_height = metrics
        if full_page:
            self.resize(width, min(page_height, 16000))
        try:
            data = self.browser.send("Page.captureScreenshot", {"format": "png"}, session=self.session)["data"]
        finally:
            if full_page:
                self.resize(width, height)
        return base64.b64decode(data)

    def resize(self, width: int, height: int) -> None:
        self.browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                                 "deviceScaleFactor": 1, "mobile": self.mobile},
                          session=self.session)

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, and log entries of level error."""
        out = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                out.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.browser.events
                if e.get("sessionId") == self.session and e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})


def open_file(browser: Browser, path: Path, width: int, mobile: bool = False) -> Tab:
    return browser.open(path.resolve().as_uri(), width, mobile=mobile)


# ----------------------------------------------------------------------------- PNG


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# Decoding a full-page PNG in pure Python takes a minute; a blank tab's canvas decodes it at once.
# Every 4th pixel of every 4th row is sampled: the share not near-white, and how many colours.
_INK = """new Promise((resolve, reject) => {
  const img = new Image();
  img.onerror = () => reject(new Error('not an image'));
  img.onload = () => {
    const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
    const g = c.getContext('2d'); g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let inked = 0, total = 0; const colours = new Set();
    for (let y = 0; y < c.height; y += 4) for (let x = 0; x < c.width; x += 4) {
      const i = 4 * (y * c.width + x); total++;
      colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      if (Math.min(d[i], d[i + 1], d[i + 2]) < 235) inked++;
    }
    resolve([img.width, img.height, inked / Math.max(1, total), colours.size]);
  };
  img.src = 'data:image/png;base64,%s';
})"""


def ink(browser: Browser, data: bytes) -> tuple[int, int, float, int]:
    """(width, height, share of sampled pixels not near-white, distinct colours among them) of a PNG."""
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    try:
        result = browser.send("Runtime.evaluate", {"expression": _INK % base64.b64encode(data).decode(),
                                                   "awaitPromise": True, "returnByValue": True}, session=session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"decoding the screenshot: {result['exceptionDetails']}")
        width, height, share, colours = result["result"]["value"]
        return int(width), int(height), float(share), int(colours)
    finally:
        browser.send("Target.closeTarget", {"targetId": target})
