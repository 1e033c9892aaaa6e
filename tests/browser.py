"""A minimal Chrome DevTools Protocol client over `--remote-debugging-pipe`, for the page tests.

It drives Debian's headless Chromium with no extra Python dependency: commands go in on file
descriptor 3 and answers come back on 4, as NUL-terminated JSON messages.
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

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
    "--window-size=1200,2600",
]


def find_chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None)


class Browser:
    """One headless Chromium and one page in it; `close()` ends both."""

    def __init__(self, binary: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="toyrl-chromium-")
        commands_read, commands_write = os.pipe()
        answers_read, answers_write = os.pipe()

        def plumb() -> None:  # in the child: the pipe ends become fds 3 and 4, whatever they were
            high_read = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
            high_write = fcntl.fcntl(answers_write, fcntl.F_DUPFD, 10)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=plumb,
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(answers_write)
        self.commands, self.answers = commands_write, answers_read
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Network.enable", session=self.session)
        self.send("Runtime.enable", session=self.session)
        self.send("Page.enable", session=self.session)
        # Downloads (a page's export buttons) go to the profile's folder, which close() removes.
        self.downloads = Path(self.profile) / "downloads"
        self.downloads.mkdir()
        self.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(self.downloads)})

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.answers, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its debugging pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return dict(json.loads(message))

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        """Send one command and return its result; events that arrive meanwhile go to `events`."""
        self.next_id += 1
        command: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            command["sessionId"] = session
        os.write(self.commands, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._message(deadline)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        """The value of a JavaScript expression (of the promise it returns, with `await_promise`)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
        result = self.send("Runtime.evaluate", params, session=self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, path: Path, fragment: str = "") -> None:
        """Load a file (with `#fragment`, if given) afresh and wait until the page marks itself ready.

        It goes through about:blank first, so that a new fragment is a new load of the page, not a
        same-document jump, and the previous page's ready mark is never mistaken for this one's."""
        self.send("Page.navigate", {"url": "about:blank"}, session=self.session)
        self.wait_for("location.href === 'about:blank'")
        url = path.resolve().as_uri() + (f"#{fragment}" if fragment else "")
        self.send("Page.navigate", {"url": url}, session=self.session)
        try:
            self.wait_for("location.protocol === 'file:' && document.body?.dataset.ready === '1'")
        except TimeoutError:
            errors = [e["exceptionDetails"].get("exception", {}) for e in self.page_errors()]
            described = [error.get("description") for error in errors]
            raise TimeoutError(f"{path} never became ready; the page's errors: {described}") from None

    def wait_for(self, expression: str, timeout: float | None = None) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited in vain for {expression}")
            time.sleep(0.05)
        return value

    def viewport(self, width: int, height: int) -> None:
        """Emulate a screen of this size in CSS pixels (scale 1), as a phone or a projector shows it."""
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.send("Emulation.setDeviceMetricsOverride", metrics, session=self.session)

    def clear_viewport(self) -> None:
        self.send("Emulation.clearDeviceMetricsOverride", session=self.session)

    def press(self, key: str, code: int, text: str = "", modifiers: int = 0) -> None:
        """A real key press (down and up) on the focused element; `text` makes it type (Enter: "\\r")."""
        key_code = "Space" if key == " " else key
        for kind in ("keyDown", "keyUp"):
            event: dict[str, Any] = {
                "type": kind,
                "key": key,
                "code": key_code,
                "windowsVirtualKeyCode": code,
                "modifiers": modifiers,
            }
            if text and kind == "keyDown":
                event["text"] = text
            self.send("Input.dispatchKeyEvent", event, session=self.session)

    def requested_urls(self) -> list[str]:
        return [
            event["params"]["request"]["url"]
            for event in self.events
            if event.get("method") == "Network.requestWillBeSent"
        ]

    def page_errors(self) -> list[dict[str, Any]]:
        return [event["params"] for event in self.events if event.get("method") == "Runtime.exceptionThrown"]

    def screenshot(self, path: Path, full_page: bool = False) -> None:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        data = self.send("Page.captureScreenshot", params, session=self.session)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.commands)
        os.close(self.answers)
        shutil.rmtree(self.profile, ignore_errors=True)
