"""The admin dashboard in a real browser: Debian's chromium, headless,
driven over the DevTools protocol (a websocket; the frame codec is
harness.ws_frame / ws_read_frame, nothing beyond the standard library).

While a thread sends traffic, the page must draw non-empty charts (the
canvases' data-points and actual pixels in the series colour), list the
servers, and its buttons must work (disable a server, set max_connections,
switch inspection), checked through /status. A screenshot is saved as
tests/artifacts/dashboard.png."""

import base64
import json
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest

import harness as H

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ARTIFACTS = os.path.join(REPO, "tests", "artifacts")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]


def _find_chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


@pytest.fixture(scope="session")
def chromium_bin():
    """Debian's chromium; installed with apt-get when missing (as root).
    Skips only when it cannot be installed."""
    p = _find_chromium()
    if p:
        return p
    why = "not installed"
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "install", "-y", "-qq", "chromium"],
                    ["sh", "-c", "apt-get update -qq && apt-get install -y -qq chromium"]):
            try:
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
                why = "apt-get: " + (r.stderr.strip().splitlines() or ["rc %d" % r.returncode])[-1]
            except (OSError, subprocess.TimeoutExpired) as e:
                why = "apt-get: %s" % e
            p = _find_chromium()
            if p:
                return p
    else:
        why = "not installed, and apt-get is not usable here (needs root)"
    pytest.skip("chromium (Debian package chromium) is unavailable: %s" % why)


class Browser:
    """A headless chromium on a fresh profile, its DevTools port read from
    DevToolsActivePort (port 0: no race for a free port)."""

    def __init__(self, binary, workdir, url):
        self.dir = os.path.join(str(workdir), "chromium-profile")
        os.makedirs(self.dir)
        self.log = os.path.join(str(workdir), "chromium.log")
        out = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen(
                [binary] + CHROMIUM_FLAGS + ["--user-data-dir=" + self.dir,
                                             "--remote-debugging-port=0",
                                             "--window-size=1280,1400", url],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        finally:
            out.close()
        portfile = os.path.join(self.dir, "DevToolsActivePort")

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("chromium exited %s:\n%s"
                                   % (self.proc.returncode, H.read_text(self.log)[-3000:]))
            txt = H.read_text(portfile)
            return txt.splitlines()[0] if "\n" in txt else None
        self.port = int(H.wait_for(ready, 30, interval=0.1, what="chromium DevTools port"))

    def page_ws(self, url_prefix, timeout=15):
        """The webSocketDebuggerUrl of the page target whose URL starts with
        URL_PREFIX."""
        def find():
            r = H.http_request(self.port, "GET", "/json/list", host="127.0.0.1:%d" % self.port)
            for t in json.loads(r.body):
                if t.get("type") == "page" and t.get("url", "").startswith(url_prefix):
                    return t["webSocketDebuggerUrl"]
            return None
        return H.wait_for(find, timeout, interval=0.1, what="page target %s" % url_prefix)

    def stop(self):
        H.kill_popen(self.proc, grace=3.0)


class Cdp:
    """DevTools protocol over one websocket: call(method, **params) sends a
    command and returns its result; events are skipped."""

    def __init__(self, ws_url, timeout=15.0):
        assert ws_url.startswith("ws://"), ws_url
        hostport, path = ws_url[5:].split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.st = H.Stream(self.sock)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        r = H.read_response(self.st)
        assert r.status == 101, r
        assert r.header("sec-websocket-accept") == H.ws_accept(key)
        self.next_id = 0

    def _read_message(self):
        parts = []
        while True:
            fin, op, payload = H.ws_read_frame(self.st)
            if op == 8:
                raise H.ConnClosed("DevTools websocket closed")
            if op in (9, 10):          # ping / pong
                if op == 9:
                    self.sock.sendall(H.ws_frame(payload, opcode=10))
                continue
            parts.append(payload)
            if fin:
                return json.loads(b"".join(parts).decode())

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.sock.sendall(H.ws_frame(json.dumps({"id": mid, "method": method,
                                                 "params": params}).encode(), opcode=1))
        while True:
            msg = self._read_message()
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def js(self, expr):
        """Evaluate EXPR in the page (promises awaited); its JSON value."""
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError("JS %r threw: %s" % (expr, json.dumps(res["exceptionDetails"])[:800]))
        return res["result"].get("value")

    def close(self):
        try:
            self.sock.sendall(H.ws_frame(b"\x03\xe8", opcode=8))
        except OSError:
            pass
        self.sock.close()


class Traffic:
    """Keepalive GET loop in a thread until stop(); every response must be
    200 (failures are collected, not raised in the thread)."""

    def __init__(self, port, tag):
        self.port = port
        self.tag = tag
        self.n = 0
        self.bad = []
        self.ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        c = None
        while not self.ev.is_set():
            try:
                if c is None:
                    c = H.Client(self.port, timeout=5)
                r = c.request("GET", "/%s%d?sleep_ms=%d" % (self.tag, self.n, 1 + self.n % 7))
                if r.status != 200:
                    self.bad.append(r.status)
                if r.has_token("connection", "close"):
                    c.close()
                    c = None
                self.n += 1
            except (OSError, H.ConnClosed) as e:
                self.bad.append(repr(e))
                if c:
                    c.close()
                c = None
            self.ev.wait(0.005)
        if c:
            c.close()

    def stop(self):
        self.ev.set()
        self.t.join(10)


# JS snippets evaluated in the page
POINTS = ("Object.fromEntries(Array.from(document.querySelectorAll('canvas'))"
          ".map(c => [c.id, Number(c.dataset.points || 0)]))")
TABLE = ("Array.from(document.querySelectorAll('#servers tbody tr'))"
         ".map(tr => Array.from(tr.cells).map(td => td.textContent))")
# pixels of the first series colour (#1f77b4) on a chart canvas
PIXELS = """(id => { const c = document.getElementById(id);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
  for (let i = 0; i < d.length; i += 4)
    if (Math.abs(d[i] - 31) < 40 && Math.abs(d[i+1] - 119) < 40 && Math.abs(d[i+2] - 180) < 40
        && d[i+3] > 100) n++;
  return n; })('%s')"""


def status_server(s, name):
    st = s.status()
    return [x for x in st["backends"][0]["servers"] if x["name"] == name][0]


def test_dashboard_in_headless_chromium(sluice, demo, chromium_bin, tmp_path):
    d1, d2 = demo(keepalive_ms=60000), demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d1.port, "s1", max_connections=16),
                                             H.server(d2.port, "s2", max_connections=16)],
                             admin=H.admin_config()))
    url = "http://127.0.0.1:%d/" % s.admin_port
    traffic = Traffic(s.port, "dash")
    browser = cdp = None
    try:
        browser = Browser(chromium_bin, tmp_path, url)
        cdp = Cdp(browser.page_ws(url))
        H.wait_for(lambda: cdp.js("document.readyState === 'complete' && document.title"
                                  " === 'sluice dashboard' && location.href") == url, 15,
                   interval=0.1, what="dashboard loaded")
        t0 = time.monotonic()

        # charts fill once per second: after ~4 s of traffic requests/s and
        # latency have several points
        def filled():
            pts = cdp.js(POINTS)
            if pts.get("chart-rps", 0) >= 3 and pts.get("chart-latency", 0) >= 3:
                return pts
            return None
        pts = H.wait_for(filled, 20, interval=0.5, what="charts with data points")
        assert time.monotonic() - t0 < 20
        assert traffic.n > 50 and not traffic.bad, (traffic.n, traffic.bad[:5])
        rps = cdp.js("charts.rps.series['all listeners']")
        assert max(rps) > 10, rps
        p50 = [v for v in cdp.js("charts.latency.series.p50") if v is not None]
        assert p50 and all(v > 0 for v in p50), p50
        # the canvases really were drawn on
        for cid in ("chart-rps", "chart-latency"):
            # (3 points of a 120 s window span ~20 px: a short line)
            assert cdp.js(PIXELS % cid) >= 5, "nothing drawn on %s" % cid
        for cid in ("chart-queue", "chart-pool", "chart-tls"):
            assert pts.get(cid, 0) > 0, (cid, pts)
        assert cdp.js("document.getElementById('err').textContent") == ""
        meta = cdp.js("document.getElementById('meta').textContent")
        assert "1 worker" in meta and s.config_path in meta, meta

        # the server table lists both servers
        rows = cdp.js(TABLE)
        assert [(r[0], r[1]) for r in rows] == [("app", "s1"), ("app", "s2")], rows
        assert all(r[3] == "up" and r[4] == "enabled" for r in rows), rows
        assert rows[0][2] == "127.0.0.1:%d" % d1.port
        H.wait_for(lambda: all(int(r[9]) > 0 for r in cdp.js(TABLE)), 5,
                   what="request counts in the table")

        # disable s2 with its button
        cdp.js("document.querySelector('button[data-action=\"/servers/app/s2/disable\"]').click()")
        H.wait_for(lambda: status_server(s, "s2")["admin"] == "disabled", 5,
                   what="s2 disabled through the dashboard")
        H.wait_for(lambda: cdp.js(TABLE)[1][4] == "disabled", 5, what="table shows disabled")
        off = len(s.access_entries())
        n0 = traffic.n
        H.wait_for(lambda: traffic.n >= n0 + 20, 10, what="traffic after disabling")
        after = s.access_entries()[off + 2:]
        assert after and all(e["server"] == "app/s1" for e in after), \
            {e["server"] for e in after}

        # set max_connections from the table's input
        cdp.js("(() => { const b = document.querySelector("
               "'button[data-action=\"/servers/app/s1/max_connections\"]');"
               " b.previousSibling.value = '5'; b.click(); })()")
        H.wait_for(lambda: status_server(s, "s1")["max_connections"] == 5, 5,
                   what="max_connections 5 through the dashboard")
        # inspection switch
        cdp.js("document.getElementById('inspect-off').click()")
        H.wait_for(lambda: s.status()["inspect"] == "off", 5, what="inspection off")
        H.wait_for(lambda: cdp.js("document.getElementById('inspect').textContent") == "off", 5,
                   what="page shows inspection off")
        cdp.js("document.getElementById('inspect-on').click()")
        H.wait_for(lambda: s.status()["inspect"] == "on", 5, what="inspection on")
        # and enable s2 again
        cdp.js("document.querySelector('button[data-action=\"/servers/app/s2/enable\"]').click()")
        H.wait_for(lambda: status_server(s, "s2")["admin"] == "enabled", 5, what="s2 enabled")
        time.sleep(1.2)   # one more refresh, so the screenshot shows the final state
        assert cdp.js("document.getElementById('err').textContent") == ""

        shot = cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        png = base64.b64decode(shot["data"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, len(png)
        os.makedirs(ARTIFACTS, exist_ok=True)
        with open(os.path.join(ARTIFACTS, "dashboard.png"), "wb") as f:
            f.write(png)
    finally:
        traffic.stop()
        if cdp:
            cdp.close()
        if browser:
            browser.stop()
    assert not traffic.bad, traffic.bad[:5]
