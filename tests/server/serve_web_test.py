"""The chat page of rinfer serve in headless Chromium (Debian's `chromium`), driven over the
DevTools protocol on a pipe: type a message and press Enter, wait for the streamed reply, check
it in the page (the same greedy reply the API gives, its tokens/s) and in a screenshot (the
reply's box holds text that was not there before); a second turn carries the history; the stop
button ends a long reply and its KV blocks are freed.
"""

import base64
import json
import os
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import unittest
import zlib

import harness
from harness import SMOLLM2, SMOLLM2_RECIPE, Server

harness.require_model()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class DevTools:
    """Chromium with --remote-debugging-pipe: JSON messages separated by NUL on fds 3 and 4."""

    def __init__(self, url):
        self.tmp = tempfile.mkdtemp(prefix="rinfer-web-")
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        args = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-extensions", "--window-size=1000,900", "--remote-debugging-pipe",
                "--user-data-dir=" + self.tmp, "about:blank"]
        cmd = " ".join(f"'{a}'" for a in args)
        self.proc = subprocess.Popen(
            ["bash", "-c", f"exec {cmd} 3<&{to_chrome_r} 4>&{from_chrome_w}"],
            pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.next_id = 0
        self.replies = {}
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                m = json.loads(msg)
                if "id" in m:
                    with self.cv:
                        self.replies[m["id"]] = m
                        self.cv.notify_all()

    def call(self, method, params=None, session=False, timeout=60):
        with self.cv:
            self.next_id += 1
            i = self.next_id
        msg = {"id": i, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        with self.cv:
            if not self.cv.wait_for(lambda: i in self.replies, timeout):
                raise TimeoutError(method)
            m = self.replies.pop(i)
        if "error" in m:
            raise RuntimeError(f"{method}: {m['error']}")
        return m["result"]

    def js(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True}, session=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expr, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.js(expr):
                return
            time.sleep(0.1)
        raise TimeoutError(expr)

    def type_and_enter(self, text):
        self.js("document.getElementById('input').focus()")
        self.call("Input.insertText", {"text": text}, session=True)
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", {"type": kind, "key": "Enter", "code": "Enter",
                                                 "windowsVirtualKeyCode": 13}, session=True)

    def click(self, selector):
        x, y = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                       ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1}, session=True)

    def screenshot(self):
        data = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"},
                                          session=True)["data"])
        return decode_png(data)

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self.to_chrome)
        shutil.rmtree(self.tmp, ignore_errors=True)


def decode_png(data):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp : x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def dark_pixels(shot, rect):
    """Pixels darker than mid-grey inside rect (x, y, width, height) of a screenshot."""
    w, h, rows = shot
    x0, y0, rw, rh = (int(v) for v in rect)
    n = 0
    for y in range(max(0, y0), min(h, y0 + rh)):
        for x in range(max(0, x0), min(w, x0 + rw)):
            r, g, b = rows[y][x]
            n += (r + g + b) < 3 * 128
    return n


@unittest.skipIf(CHROMIUM is None, "chromium is not installed (scripts/install-deps.sh installs it)")
class WebPageTest(unittest.TestCase):
    def test_chat_in_the_page(self):
        with Server(SMOLLM2_RECIPE, "--threads", "2") as srv:
            page = DevTools(srv.url + "/")
            try:
                self._chat(srv, page)
            finally:
                page.close()

    def _chat(self, srv, page):
        page.wait_for("document.readyState === 'complete' && "
                      "document.querySelectorAll('#model option').length === 1")
        self.assertEqual(page.js("document.getElementById('model').value"), SMOLLM2)
        page.js("document.getElementById('temperature').value = '0';"
                "document.getElementById('max-tokens').value = '16'")
        before = page.screenshot()

        question = "What is the capital of France?"
        page.type_and_enter(question)
        page.wait_for("(document.querySelector('.msg.assistant') || {dataset: {}})"
                      ".dataset.state === 'done'")
        reply = page.js("document.querySelector('.msg.assistant .text').textContent")
        meta = page.js("document.querySelector('.msg.assistant .meta').textContent")
        self.assertTrue(reply)
        self.assertRegex(meta, r"^\d+ tokens, [\d.]+ tokens/s, finish: (stop|length)$")
        self.assertEqual(page.js("document.querySelector('.msg.user .text').textContent"), question)
        # The page's reply is the API's greedy reply to the same conversation.
        api = lambda msgs: json.loads(srv.post("/v1/chat/completions", {  # noqa: E731
            "model": SMOLLM2, "messages": msgs, "temperature": 0, "max_tokens": 16})[1])[
            "choices"][0]["message"]["content"]
        self.assertEqual(reply, api([{"role": "user", "content": question}]))

        # In the screenshot: the reply's box now holds text.
        after = page.screenshot()
        rect = page.js("(() => { const r = document.querySelector('.msg.assistant')"
                       ".getBoundingClientRect(); const d = window.devicePixelRatio;"
                       " return [r.x * d, r.y * d, r.width * d, r.height * d]; })()")
        self.assertGreater(dark_pixels(after, rect), 200)
        self.assertLess(dark_pixels(before, rect), 20)
        with open(os.path.join(tempfile.gettempdir(), "rinfer-web-test.png"), "wb") as f:
            f.write(base64.b64decode(page.call("Page.captureScreenshot", {"format": "png"},
                                               session=True)["data"]))

        # A second turn carries the history.
        follow = "And of Italy?"
        page.type_and_enter(follow)
        page.wait_for("document.querySelectorAll('.msg.assistant').length === 2 && "
                      "document.querySelectorAll('.msg.assistant')[1].dataset.state === 'done'")
        second = page.js("document.querySelectorAll('.msg.assistant')[1]"
                         ".querySelector('.text').textContent")
        self.assertEqual(second, api([{"role": "user", "content": question},
                                      {"role": "assistant", "content": reply},
                                      {"role": "user", "content": follow}]))

        # Stop: a long reply ended by the button; its blocks are freed.
        page.js("document.getElementById('max-tokens').value = '1000'")
        page.type_and_enter("Write a very long story about the sea.")
        page.wait_for("document.querySelectorAll('.msg.assistant').length === 3 && "
                      "document.querySelectorAll('.msg.assistant .text')[2].textContent.length > 20")
        page.click("#stop")
        page.wait_for("document.querySelectorAll('.msg.assistant')[2].dataset.state === 'stopped'")
        deadline = time.time() + 20
        while time.time() < deadline and srv.metric("rinfer_kv_blocks_used", {"model": SMOLLM2}):
            time.sleep(0.1)
        self.assertEqual(srv.metric("rinfer_kv_blocks_used", {"model": SMOLLM2}), 0)
        self.assertEqual(srv.metric("rinfer_requests_in_flight", {"model": SMOLLM2}), 0)
        self.assertFalse(page.js("document.getElementById('send').disabled"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
