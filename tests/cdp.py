"""A headless Chromium driven through the DevTools protocol, with a tiny standard-library websocket.

    with Browser(chromium, url, user_data_dir) as b:
        b.evaluate("document.title")            # a JavaScript expression's value
        assert b.exceptions == []               # the page threw nothing (since it was loaded again)

Chromium starts with `--remote-debugging-port=0` and writes the port it chose to
`<user-data-dir>/DevToolsActivePort`; the page opened on the command line is a target listed at
`/json/list`, whose websocket takes `Runtime.evaluate`. One text frame a message, client frames
masked (RFC 6455), no extensions: all the protocol needs here.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from urllib.parse import urlsplit

# The flags every headless run of the tests uses: no sandbox (root in a container), no GPU, no
# network beyond the page itself.
CHROMIUM_FLAGS = [
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
    "--mute-audio",
]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


class WebSocket:
    """A client websocket over a plain TCP socket (ws:// on localhost only)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        req = (
            f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise ConnectionError(f"websocket handshake: {status!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text: str) -> None:
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + struct.pack(">H", n)
            if n < 65536
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        )
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("websocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise ConnectionError("websocket closed by the browser")
            if opcode in (0, 1):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        self.sock.close()


class Browser:
    """Headless Chromium on one page, evaluated through the DevTools protocol."""

    def __init__(
        self,
        chromium: str,
        url: str,
        user_data_dir: str,
        timeout: float = 90.0,
        size: str = "1280,900",
        catch: bool = True,
    ) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={user_data_dir}",
                "--remote-debugging-port=0",
                f"--window-size={size}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = os.path.join(user_data_dir, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while not _read(port_file).count("\n") >= 1:  # "<port>\n<browser path>": written whole
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(_read(port_file).split()[0])
        while True:
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
            pages = [t for t in targets if t.get("type") == "page" and t.get("url", "").startswith(url)]
            if pages:
                break
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium shows no page at {url}: {targets}")
            time.sleep(0.2)
        self.ws = WebSocket(pages[0]["webSocketDebuggerUrl"], timeout=timeout)
        self._id = 0
        self.exceptions: list[str] = []  # the page's uncaught exceptions (once `Runtime` is enabled)
        if catch:  # load the page again with the runtime's events on: every exception from the start
            self.call("Runtime.enable")
            self.call("Page.reload")

    def call(self, method: str, **params: object) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == "Runtime.exceptionThrown":
                d = msg["params"]["exceptionDetails"]
                self.exceptions.append(
                    f"{d.get('url', '')}:{d.get('lineNumber')}: {d.get('exception', {}).get('description') or d.get('text')}"
                )
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str) -> object:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None) -> object:
        """Evaluate `expression` until it is truthy (an exception counts as false: the page may not
        be there yet); its value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return false; }} }})()"
        while True:
            value = self.evaluate(guarded)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"never true: {expression} (last {value!r})")
            time.sleep(0.2)

    # --- real input: the browser's own mouse, keyboard and touch events ------------------------------

    def center(self, selector: str) -> tuple[float, float]:
        """The middle of the first element matching `selector`, in viewport pixels (scrolled into view)."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView({{block: 'center'}});"
            " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        assert isinstance(box, list)
        return float(box[0]), float(box[1])

    def click(self, x: float, y: float, count: int = 1) -> None:
        for n in range(1, count + 1):
            for kind in ("mousePressed", "mouseReleased"):
                self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=n, buttons=1)

    def drag(self, x0: float, y0: float, x1: float, y1: float, steps: int = 8) -> None:
        """Press at (x0, y0), move to (x1, y1) in `steps`, release: a mouse drag."""
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x0, y=y0)
        self.call("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y0, button="left", clickCount=1, buttons=1)
        for i in range(1, steps + 1):
            x, y = x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps
            self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y, button="left", buttons=1)
        self.call("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=y1, button="left", clickCount=1, buttons=0)

    def touch_drag(self, x0: float, y0: float, x1: float, y1: float, steps: int = 8) -> None:
        """One finger from (x0, y0) to (x1, y1) (needs `Emulation.setTouchEmulationEnabled`)."""
        self.call("Input.dispatchTouchEvent", type="touchStart", touchPoints=[{"x": x0, "y": y0}])
        for i in range(1, steps + 1):
            x, y = x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps
            self.call("Input.dispatchTouchEvent", type="touchMove", touchPoints=[{"x": x, "y": y}])
        self.call("Input.dispatchTouchEvent", type="touchEnd", touchPoints=[])

    def tap(self, x: float, y: float) -> None:
        self.call("Input.dispatchTouchEvent", type="touchStart", touchPoints=[{"x": x, "y": y}])
        self.call("Input.dispatchTouchEvent", type="touchEnd", touchPoints=[])

    def key(self, key: str, code: str | None = None, key_code: int = 0) -> None:
        """Press and release one key (`key` as KeyboardEvent.key names it: "Tab", "Enter", "+", "ArrowRight")."""
        text = key if len(key) == 1 else ("\r" if key == "Enter" else "")
        down = {"type": "keyDown" if text else "rawKeyDown", "key": key, "code": code or key, "text": text}
        if key_code:
            down["windowsVirtualKeyCode"] = key_code
        self.call("Input.dispatchKeyEvent", **down)
        self.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code or key, windowsVirtualKeyCode=key_code)

    def type(self, text: str) -> None:
        """Type `text` into the focused element (as an input method commits it)."""
        self.call("Input.insertText", text=text)

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own group: the renderers go with it
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
