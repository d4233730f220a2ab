"""Native rate limits (`rate_limit:` on a listener or a route, docs/config.md):
GCRA with an exact count at the boundary across 2 workers (the instance-wide
table in shared memory) and across 2 instances (one redis-server), Retry-After,
refill after 1/rate, header and cookie keys, route overrides, a 429 that never
reaches the backend nor the hook, metrics, Redis stopped, paused and back,
while the verdict waits: a chunked body over `inspect.body` rejected, a silent
client closed by client_body, pipelined requests each timed out, one slow
answer not taken for a dead connection; and `sluice -t` errors for every bad
key and value."""

import concurrent.futures
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest

import harness as H

HOOK = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "lua", "allow_all.lua"))


def limited_config(rec, rate_limit, workers=2, routes=None, admin=True, listener=None, **kw):
    li = {"rate_limit": rate_limit}
    li.update(listener or {})
    cfg = H.make_config(H.free_port(), [H.server(rec.port, "a")], workers=workers, listener=li,
                        admin=H.admin_config() if admin else None, **kw)
    if routes is not None:
        cfg["listeners"][0]["routes"] = routes
    return cfg


def get(port, path="/", headers=None):
    return H.http_request(port, "GET", path, headers=list((headers or {}).items()))


def burst(port, n, path="/", headers=None):
    """N requests at once, each on its own connection: their statuses and
    Retry-After values."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as ex:
        rs = list(ex.map(lambda _: get(port, path, headers), range(n)))
    return [r.status for r in rs], [r.header("Retry-After") for r in rs]


def access_lines(s, n=None):
    """The access log's lines (waiting, with a deadline, for N of them)."""
    def read():
        ls = [l for l in H.read_text(s.access_log).splitlines() if " reason=" in l]
        return ls if n is None or len(ls) >= n else None
    return read() if n is None else H.wait_for(read, what="%d access log lines" % n)


def metric(text, name, **labels):
    """The value of sample NAME{LABELS} (labels matched as a subset)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r"^%s(?:\{(.*)\})? (\S+)$" % re.escape(name), line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            return float(m.group(2))
    return None


# ------------------------------------------------------------- instance-wide


def test_burst_is_exact_across_two_workers(sluice, recorder):
    """30 requests at once from one client, burst 10, 2 workers: exactly 10
    reach the backend; 20 get 429 with Retry-After (ceil of the time until a
    token comes back: 6 s at 10/m), an access log line with reason
    rate_limited and no inspection, and are counted."""
    rec = recorder()
    cfg = limited_config(rec, {"key": "client", "rate": "10/m", "burst": 10},
                         listener={"inspect": {"script": HOOK}})
    s = sluice(cfg)
    statuses, retry = burst(s.port, 30)
    assert statuses.count(200) == 10, statuses
    assert statuses.count(429) == 20, statuses
    assert {ra for st, ra in zip(statuses, retry) if st == 429} == {"6"}
    assert {ra for st, ra in zip(statuses, retry) if st == 200} == {None}
    assert len(rec.all_requests()) == 10
    lines = access_lines(s, 30)
    limited = [l for l in lines if " 429 " in l]
    assert len(limited) == 20
    assert all("reason=rate_limited" in l and "inspect=off" in l and " - total_us" in l for l in limited)
    assert all("inspect=allow" in l for l in lines if " 200 " in l)
    m = s.metrics_text()
    assert metric(m, "sluice_errors_total", listener="http", reason="rate_limited") == 20
    assert metric(m, "sluice_rate_limit_decisions_total", store="local", result="deny") == 20
    assert metric(m, "sluice_rate_limit_decisions_total", store="local", result="allow") == 10
    assert metric(m, "sluice_rate_limit_table_entries") == 65536


def test_a_token_comes_back_after_one_interval(sluice, recorder):
    """2/s, burst 2: two pass, the third is refused (Retry-After 1); the
    next one passes only once 500 ms have gone by, and only one does (the
    interval is long against the scheduling of a loaded machine)."""
    rec = recorder()
    s = sluice(limited_config(rec, {"rate": "2/s", "burst": 2}, workers=1, admin=False))
    t0 = time.monotonic()
    rs = [get(s.port) for _ in range(3)]
    assert [r.status for r in rs] == [200, 200, 429]
    assert rs[2].header("Retry-After") == "1"
    H.wait_for(lambda: get(s.port).status == 200, timeout=5, interval=0.02, what="a refilled token")
    assert time.monotonic() - t0 >= 0.49
    assert get(s.port).status == 429
    assert len(rec.all_requests()) == 3


def test_header_and_cookie_keys(sluice, recorder):
    """Each header value, each cookie value has its own bucket; a request
    without the header or cookie is not limited."""
    rec = recorder()
    routes = [{"name": "by-cookie", "match": {"path": {"prefix": "/c"}},
               "rate_limit": {"key": "cookie:sid", "rate": "10/m", "burst": 2}}]
    s = sluice(limited_config(rec, {"key": "header:X-Api-Key", "rate": "10/m", "burst": 2},
                              workers=1, routes=routes, admin=False))
    a = {"X-Api-Key": "alpha"}
    b = {"x-api-key": "beta"}
    assert [get(s.port, headers=a).status for _ in range(3)] == [200, 200, 429]
    assert [get(s.port, headers=b).status for _ in range(3)] == [200, 200, 429]
    assert [get(s.port).status for _ in range(5)] == [200] * 5
    c1 = {"Cookie": "x=1; sid=one"}
    c2 = {"Cookie": "sid=two"}
    assert [get(s.port, "/c", c1).status for _ in range(3)] == [200, 200, 429]
    assert [get(s.port, "/c", c2).status for _ in range(3)] == [200, 200, 429]
    assert [get(s.port, "/c", {"Cookie": "other=1"}).status for _ in range(4)] == [200] * 4
    # the route's limit replaces the listener's: the header does not count there
    assert get(s.port, "/c", {"X-Api-Key": "alpha", "Cookie": "sid=three"}).status == 200


def test_route_overrides_and_lifts_the_listeners_limit(sluice, recorder):
    rec = recorder()
    routes = [
        {"name": "free", "match": {"path": {"prefix": "/free"}}, "rate_limit": {"rate": "off"}},
        {"name": "strict", "match": {"path": {"prefix": "/strict"}},
         "rate_limit": {"rate": "10/m", "burst": 3}},
        {"name": "rest", "match": {"path": {"prefix": "/"}}},
    ]
    s = sluice(limited_config(rec, {"rate": "10/m", "burst": 1}, workers=1, routes=routes))
    assert [get(s.port, "/x").status for _ in range(2)] == [200, 429]
    assert [get(s.port, "/free").status for _ in range(6)] == [200] * 6
    # its own bucket: the listener's, already empty, does not count here
    assert [get(s.port, "/strict").status for _ in range(4)] == [200, 200, 200, 429]
    m = s.metrics_text()
    assert metric(m, "sluice_route_rate_limited_total", listener="http", route="strict") == 1
    assert metric(m, "sluice_route_rate_limited_total", listener="http", route="rest") == 1
    assert metric(m, "sluice_route_rate_limited_total", listener="http", route="free") == 0
    assert sorted(q.target for q in rec.all_requests()) == ["/free"] * 6 + ["/strict"] * 3 + ["/x"]


def test_limited_request_with_a_body_keeps_the_connection(sluice, recorder):
    """A POST over the limit: 429, its body read and dropped, the next
    request on the same connection served."""
    rec = recorder()
    s = sluice(limited_config(rec, {"rate": "10/m", "burst": 1}, workers=1, admin=False,
                              routes=[{"name": "free", "match": {"path": {"exact": "/free"}},
                                       "rate_limit": {"rate": "off"}}]))
    with H.Client(s.port) as c:
        assert c.request("POST", "/a", body=b"x" * 1000).status == 200
        r = c.request("POST", "/a", body=b"y" * 5000)
        assert r.status == 429 and r.header("Retry-After") == "6"
        assert c.request("GET", "/free").status == 200
    assert [q.target for q in rec.all_requests()] == ["/a", "/free"]


# ------------------------------------------------------------------ config


def check(sluice_bin, tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return subprocess.run([sluice_bin, "-t", "-c", str(p)], capture_output=True, text=True, timeout=10)


def cfg_text(listener_extra="", top="", route_extra=None):
    lines = [
        top,
        "listeners:",
        "  - name: http",
        '    address: "127.0.0.1:%d"' % H.free_port(),
        "    backend: app",
    ]
    if listener_extra:
        lines += ["    " + l for l in listener_extra.strip("\n").split("\n")]
    if route_extra is not None:
        lines += ["    routes:", "      - name: r1", "        match: {path: {prefix: /r}}"]
        lines += ["        " + l for l in route_extra.strip("\n").split("\n")]
    lines += ["backends:", "  - name: app", "    servers:",
              '      - address: "127.0.0.1:%d"' % H.free_port()]
    return "\n".join(lines) + "\n"


BAD = [
    ("rate_limit: {burst: 5}", {}, r"listeners\[0\]\.rate_limit: needs rate"),
    ("rate_limit: {rate: 10/d}", {}, r"rate_limit\.rate: bad rate \"10/d\": the period is s, m or h"),
    ("rate_limit: {rate: 0/s}", {}, r"rate: bad rate \"0/s\": 0 would refuse every request"),
    ("rate_limit: {rate: fast}", {}, r"rate: bad rate \"fast\": expected requests per period"),
    ("rate_limit: {rate: 2000000/s}", {}, r"more than 1000000 requests per second"),
    ("rate_limit: {rate: 1/h, burst: 100}", {}, r"rate_limit\.burst: a burst of 100 at this rate takes more than a day"),
    ("rate_limit: {rate: 10/s, burst: 0}", {}, r"rate_limit\.burst: 0 is out of range \(1\.\.1000000\)"),
    ("rate_limit: {rate: 10/s, key: ip}", {}, r"rate_limit\.key: unknown key \"ip\" \(expected client, header:<Name> or cookie:<name>\)"),
    ("rate_limit: {rate: 10/s, key: \"header:X Bad\"}", {}, r"rate_limit\.key: bad header name \"X Bad\""),
    ("rate_limit: {rate: 10/s, key: \"cookie:\"}", {}, r"rate_limit\.key: bad cookie name \"\""),
    ("rate_limit: {rate: 10/s, store: memcached}", {}, r"rate_limit\.store: unknown value \"memcached\" \(expected local or redis\)"),
    ("rate_limit: {rate: 10/s, store: redis}", {}, r"rate_limit\.store: store: redis needs the top-level redis: mapping"),
    ("rate_limit: {rate: 10/s, on_store_error: deny}", {}, r"rate_limit\.on_store_error: applies to store: redis only"),
    ("rate_limit: {rate: 10/s, store: redis, on_store_error: maybe}", {"top": "redis: {address: \"127.0.0.1:6379\"}"},
     r"rate_limit\.on_store_error: unknown value \"maybe\" \(expected allow or deny\)"),
    ("rate_limit: {rate: \"off\"}", {}, r"rate_limit\.rate: off applies to a route"),
    ("rate_limit: {rate: 10/s, colour: red}", {}, r"colour"),
    ("", {"route": "rate_limit: {rate: \"off\", burst: 3}"}, r"routes\[0\]\.rate_limit: rate: off takes no other key"),
    ("", {"route": "respond: {status: 200}\nrate_limit: {rate: 1/s}"},
     r"routes\[0\]\.rate_limit: a route that answers itself .* is not rate limited"),
    ("", {"top": "redis: {address: \"nohost\"}"}, r"redis\.address: bad address \"nohost\""),
    ("", {"top": "redis: {address: \"127.0.0.1:6379\", timeout: 20s}"}, r"redis\.timeout: at most 10s"),
    ("", {"top": "redis: {address: \"127.0.0.1:6379\", db: -1}"}, r"redis\.db: expected an integer"),
    ("", {"top": "redis: {timeout: 1s}"}, r"address"),
    ("", {"top": "limits: {rate_limit_entries: 10}"}, r"limits\.rate_limit_entries: 10 is out of range \(64\.\.16777216\)"),
]


@pytest.mark.parametrize("listener,extra,pattern", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_rate_limit_config_is_refused(sluice_bin, tmp_path, listener, extra, pattern):
    r = check(sluice_bin, tmp_path, cfg_text(listener, extra.get("top", ""), extra.get("route")))
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(pattern, r.stderr), r.stderr


def test_good_rate_limit_config_passes(sluice_bin, tmp_path):
    text = cfg_text("rate_limit: {key: \"header:X-Api-Key\", rate: 6000/m, burst: 50, store: redis, "
                    "on_store_error: deny}",
                    "redis: {address: /run/redis/redis.sock, timeout: 20ms, connect_timeout: 500ms, "
                    "password: pw, db: 2}\nlimits: {rate_limit_entries: 1024}",
                    "rate_limit: {key: \"cookie:sid\", rate: \"5\"}")
    r = check(sluice_bin, tmp_path, text)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------- redis store

REDIS = shutil.which("redis-server") or ("/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None)
needs_redis = pytest.mark.skipif(REDIS is None, reason="redis-server missing (make test-deps installs it)")


class Redis:
    """A redis-server of the test's own on a free port: no persistence,
    stopped by PID."""

    def __init__(self, workdir, port=None):
        self.dir = str(workdir)
        self.port = port or H.free_port()
        self.proc = None

    def start(self):
        log = open(os.path.join(self.dir, "redis-%d.log" % self.port), "ab")
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--daemonize", "no"],
            stdout=log, stderr=log, start_new_session=True)
        log.close()
        H.wait_port(self.port, proc=self.proc)
        return self

    def stop(self):
        if self.proc is not None:
            H.kill_popen(self.proc)
            self.proc = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port


@pytest.fixture
def redis(tmp_path):
    made = []

    def make(port=None):
        r = Redis(tmp_path, port).start()
        made.append(r)
        return r
    yield make
    for r in made:
        r.stop()


def redis_unread(port):
    """Bytes the Redis on PORT has not read yet, over its connections."""
    out = subprocess.run(["ss", "-tnH", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True, timeout=10).stdout
    return sum(int(l.split()[0]) for l in out.splitlines() if l.strip())


def redis_config(rec, rds, rate_limit, workers=2, routes=None, timeout="200ms"):
    cfg = limited_config(rec, rate_limit, workers=workers, routes=routes)
    cfg["redis"] = {"address": rds.address, "timeout": timeout, "connect_timeout": "500ms"}
    return cfg


@needs_redis
def test_cluster_wide_burst_is_exact_across_two_instances(sluice, recorder, redis):
    """Two instances of 2 workers each on one Redis: 40 requests at once,
    split between them, burst 10: exactly 10 pass in all."""
    rds = redis()
    rec = recorder()
    rl = {"rate": "10/m", "burst": 10, "store": "redis"}
    s1 = sluice(redis_config(rec, rds, rl), name="one")
    s2 = sluice(redis_config(rec, rds, rl), name="two")
    with concurrent.futures.ThreadPoolExecutor(max_workers=40) as ex:
        rs = list(ex.map(lambda i: get((s1, s2)[i % 2].port), range(40)))
    statuses = [r.status for r in rs]
    assert statuses.count(200) == 10, statuses
    assert statuses.count(429) == 30, statuses
    assert {r.header("Retry-After") for r in rs if r.status == 429} == {"6"}
    assert len(rec.all_requests()) == 10
    both = [s1.metrics_text(), s2.metrics_text()]
    assert sum(metric(m, "sluice_rate_limit_decisions_total", store="redis", result="allow") for m in both) == 10
    assert sum(metric(m, "sluice_rate_limit_decisions_total", store="redis", result="deny") for m in both) == 30
    assert sum(metric(m, "sluice_rate_limit_decisions_total", store="redis", result="store_error")
               for m in both) == 0


@needs_redis
def test_redis_down_applies_on_store_error_and_back_limits_again(sluice, recorder, redis):
    """Redis stopped: the allow route lets requests through, the deny route
    answers 503 with Retry-After 1; both counted, and logged (rate-limited).
    Redis started again on its port: limits apply again without a restart."""
    rds = redis()
    rec = recorder()
    routes = [
        {"name": "open", "match": {"path": {"prefix": "/open"}},
         "rate_limit": {"rate": "10/m", "burst": 2, "store": "redis", "on_store_error": "allow"}},
        {"name": "closed", "match": {"path": {"prefix": "/closed"}},
         "rate_limit": {"rate": "10/m", "burst": 2, "store": "redis", "on_store_error": "deny"}},
    ]
    s = sluice(redis_config(rec, rds, {"rate": "10/m", "burst": 100},
                            workers=1, routes=routes))
    assert [get(s.port, "/open").status for _ in range(3)] == [200, 200, 429]
    rds.stop()
    assert [get(s.port, "/open").status for _ in range(5)] == [200] * 5
    rs = [get(s.port, "/closed") for _ in range(3)]
    assert [r.status for r in rs] == [503] * 3
    assert {r.header("Retry-After") for r in rs} == {"1"}
    m = s.metrics_text()
    assert metric(m, "sluice_rate_limit_decisions_total", store="redis", result="store_error") == 8
    assert metric(m, "sluice_rate_limit_store_errors_total", kind="connect") == 8
    assert metric(m, "sluice_errors_total", listener="http", reason="rate_limit_store_error") == 3
    s.wait_error_log(r"rate limit store redis 127\.0\.0\.1:%d: " % rds.port)
    entries = [l for l in access_lines(s, 11) if "/closed" in l]
    assert all("reason=rate_limit_store_error" in l for l in entries) and len(entries) == 3
    # back on the same port, empty: the limits hold again
    redis(rds.port)
    H.wait_for(lambda: get(s.port, "/closed").status == 200, timeout=10, what="Redis reconnected")
    assert [get(s.port, "/closed").status for _ in range(2)] == [200, 429]
    s.wait_error_log(r"rate limit store redis 127\.0\.0\.1:%d: connected again" % rds.port)


@needs_redis
def test_redis_not_answering_times_out_and_a_client_that_left_is_forgotten(sluice, recorder, redis):
    """Redis paused (SIGSTOP): a decision waits its 200 ms deadline, then
    on_store_error applies (allow); a client that closes while its decision
    is pending leaves nothing behind. Resumed: its late replies are dropped
    and limits apply."""
    rds = redis()
    rec = recorder()
    s = sluice(redis_config(rec, rds, {"rate": "10/m", "burst": 2, "store": "redis"}, workers=1))
    assert get(s.port).status == 200
    os.kill(rds.proc.pid, signal.SIGSTOP)
    try:
        c = H.Client(s.port)
        c.send(b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
        # its decision is on its way when the paused Redis has bytes unread
        H.wait_for(lambda: redis_unread(rds.port) > 0, what="the decision sent to Redis")
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # a reset: the client is gone, not half-closed
        t0 = time.monotonic()
        assert get(s.port).status == 200
        assert time.monotonic() - t0 >= 0.18
    finally:
        os.kill(rds.proc.pid, signal.SIGCONT)
    m = s.metrics_text()
    # the client that left was dropped at once: one decision timed out
    assert metric(m, "sluice_rate_limit_store_errors_total", kind="timeout") == 1
    assert any("/gone 499 " in l and "reason=client_aborted" in l for l in access_lines(s, 3))
    # Redis ran the two late decisions once resumed: they count (burst 2
    # spent), though nobody waited for their verdicts
    r = H.wait_for(lambda: (lambda x: x if x.status == 429 else None)(get(s.port)), what="a 429")
    assert r.header("Retry-After") is not None
    assert s.alive()
    assert "/gone" not in [q.target for q in rec.all_requests()]


@needs_redis
def test_http2_streams_are_limited_locally_and_by_redis(sluice, recorder, redis):
    """Over one h2c connection, 12 concurrent streams per route, burst 4:
    4 answered by the backend and 8 by sluice with 429 and retry-after, on
    the local table and while waiting for Redis alike; the connection stays
    usable."""
    from h2client import H2Client
    rds = redis()
    rec = recorder()
    routes = [{"name": "r", "match": {"path": {"prefix": "/r"}},
               "rate_limit": {"rate": "10/m", "burst": 4, "store": "redis"}}]
    cfg = redis_config(rec, rds, {"rate": "10/m", "burst": 4}, workers=1, routes=routes)
    cfg["listeners"][0]["h2c"] = True
    s = sluice(cfg)
    c = H2Client(s.port)
    try:
        for path in ("/l", "/r"):
            recs = c.wait(*[c.request("%s/%d" % (path, i)) for i in range(12)])
            assert sorted(r.status for r in recs) == [200] * 4 + [429] * 8, path
            assert {r.header("retry-after") for r in recs if r.status == 429} == {"6"}
        assert c.get("/r/again").status == 429
    finally:
        c.close()
    assert len(rec.all_requests()) == 8


class GateProxy:
    """A TCP proxy in front of a Redis whose replies can be held back:
    `hold()` stops Redis's bytes towards sluice (they wait, in order),
    `release()` lets them go. `commands(word)` counts the commands seen
    from sluice whose name is WORD (EVALSHA: the decisions asked). Threads,
    sockets closed by stop()."""

    def __init__(self, upstream_port):
        import threading
        self.up = upstream_port
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        self.seen = b""
        self.socks = []
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((H.HOST, 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self):
        return "%s:%d" % (H.HOST, self.port)

    def _accept(self):
        import threading
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            u = socket.create_connection((H.HOST, self.up))
            self.socks += [c, u]
            threading.Thread(target=self._pump, args=(c, u, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, True), daemon=True).start()

    def _pump(self, src, dst, gated):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            if gated:
                self.gate.wait()
            else:
                with self.lock:
                    self.seen += data
            try:
                dst.sendall(data)
            except OSError:
                return

    def commands(self, word):
        with self.lock:
            return self.seen.upper().count(b"\r\n%s\r\n" % word)

    def hold(self):
        self.gate.clear()

    def release(self):
        self.gate.set()

    def stop(self):
        self.stopped = True
        self.gate.set()
        for so in [self.ls] + self.socks:
            try:
                so.close()
            except OSError:
                pass


@pytest.fixture
def gate_proxy():
    made = []

    def make(port):
        p = GateProxy(port)
        made.append(p)
        return p
    yield make
    for p in made:
        p.stop()


@needs_redis
def test_redis_verdict_after_a_chunked_body_over_inspect_body_rejects_it(sluice, recorder, redis, gate_proxy):
    """body_overflow: reject on a Redis-limited listener: a chunked body
    (no Content-Length to refuse up front) of 4 KiB against `body: 1k`,
    read in full while the verdict is held back, gets 413 once Redis
    allows; the hook never runs and the backend receives nothing."""
    rds = redis()
    gp = gate_proxy(rds.port)
    rec = recorder()
    cfg = redis_config(rec, gp, {"rate": "10/m", "burst": 5, "store": "redis"}, workers=1, timeout="5s")
    cfg["listeners"][0]["inspect"] = {"script": HOOK, "body": "1k", "body_overflow": "reject"}
    s = sluice(cfg)
    assert get(s.port).status == 200  # connected, script loaded
    gp.hold()
    with H.Client(s.port) as c:
        # Head and body in one write: one read by sluice, parsed in full
        # before the decision leaves (hiredis writes on the next loop turn).
        c.send(H.build_request("POST", "/up", [("Transfer-Encoding", "chunked")])
               + H.chunk_encode(b"z" * 4096, chunk=1024))
        H.wait_for(lambda: gp.commands(b"EVALSHA") == 2, what="the decision sent to Redis")
        gp.release()
        r = c.read_response()
        assert r.status == 413, r
        assert c.is_closed(3.0)
    assert [q.target for q in rec.all_requests()] == ["/"]
    assert any("POST /up 413 " in l and "reason=inspect_body_too_large" in l for l in access_lines(s, 2))


@needs_redis
@pytest.mark.parametrize("verdict", ["deny", "allow_held"])
def test_client_silent_mid_body_after_a_redis_verdict_is_closed_by_client_body(sluice, recorder, redis, verdict):
    """A head with Content-Length: 1000 and 1 byte of body, then silence:
    after Redis's verdict (a 429 that waits for the body to drop it, or an
    allow whose body the hook holds) timeouts.client_body (1s) closes the
    connection with 408; the backend receives nothing."""
    rds = redis()
    rec = recorder()
    cfg = redis_config(rec, rds, {"rate": "10/m", "burst": 1, "store": "redis"}, workers=1)
    cfg["timeouts"]["client_body"] = "1s"
    cfg["listeners"][0]["inspect"] = {"script": HOOK, "body": "4k"}
    s = sluice(cfg)
    if verdict == "deny":
        assert get(s.port).status == 200  # the burst spent
    with H.Client(s.port) as c:
        c.send(H.build_request("POST", "/silent", [("Content-Length", "1000")]) + b"x")
        result = "deny" if verdict == "deny" else "allow"
        H.wait_for(lambda: metric(s.metrics_text(), "sluice_rate_limit_decisions_total", store="redis",
                                  result=result) == 1, what="the verdict: " + result)
        t0 = time.monotonic()
        rest = c.wait_closed(5.0)
        took = time.monotonic() - t0
    assert rest.startswith(b"HTTP/1.1 408 "), rest[:100]
    assert 0.5 <= took <= 3.0, took
    assert "/silent" not in [q.target for q in rec.all_requests()]
    lines = access_lines(s, 2 if verdict == "deny" else 1)
    assert any("POST /silent 408 " in l and "reason=client_body_timeout" in l for l in lines), lines


@needs_redis
def test_client_silent_mid_body_while_the_verdict_is_awaited_is_closed_by_client_body(sluice, recorder, redis,
                                                                                     gate_proxy):
    """Redis slow to answer (replies held, redis.timeout 5s) and a client
    that stops mid-body: timeouts.client_body (1s) closes it with 408
    before any verdict; the decision is dropped, the backend sees nothing."""
    rds = redis()
    gp = gate_proxy(rds.port)
    rec = recorder()
    cfg = redis_config(rec, gp, {"rate": "10/m", "burst": 5, "store": "redis"}, workers=1, timeout="5s")
    cfg["timeouts"]["client_body"] = "1s"
    s = sluice(cfg)
    assert get(s.port).status == 200
    gp.hold()
    try:
        with H.Client(s.port) as c:
            c.send(H.build_request("POST", "/silent", [("Content-Length", "1000")]) + b"x")
            H.wait_for(lambda: gp.commands(b"EVALSHA") == 2, what="the decision sent to Redis")
            t0 = time.monotonic()
            rest = c.wait_closed(4.0)
            took = time.monotonic() - t0
    finally:
        gp.release()
    assert rest.startswith(b"HTTP/1.1 408 "), rest[:100]
    assert took <= 2.5, took
    assert [q.target for q in rec.all_requests()] == ["/"]


@needs_redis
def test_store_timeout_with_deny_answers_every_pipelined_request(sluice, recorder):
    """on_store_error: deny and a Redis that accepts but never answers: two
    pipelined requests get 503 each, one redis.timeout apart (the second
    decision, asked from within the first one's verdict, keeps its
    deadline)."""
    hole = socket.socket()
    hole.bind((H.HOST, 0))
    hole.listen(8)  # connections complete in the backlog; nothing is read
    try:
        rec = recorder()

        class Addr:
            address = "%s:%d" % (H.HOST, hole.getsockname()[1])
        cfg = redis_config(rec, Addr, {"rate": "10/m", "burst": 5, "store": "redis", "on_store_error": "deny"},
                           workers=1, timeout="300ms")
        s = sluice(cfg)
        with H.Client(s.port) as c:
            t0 = time.monotonic()
            c.send(H.build_request("GET", "/one") + H.build_request("GET", "/two"))
            r1 = c.read_response()
            r2 = c.read_response()
            took = time.monotonic() - t0
        assert (r1.status, r2.status) == (503, 503), (r1, r2)
        assert r2.header("Retry-After") == "1"
        assert 0.55 <= took <= 1.5, took
        m = s.metrics_text()
        assert metric(m, "sluice_rate_limit_store_errors_total", kind="timeout") == 2
        assert rec.all_requests() == []
    finally:
        hole.close()


@needs_redis
def test_one_slow_decision_after_an_idle_spell_keeps_the_redis_connection(sluice, recorder, redis, gate_proxy):
    """A connection idle for over a second, then one decision slower than
    redis.timeout: it times out (on_store_error allow), but the connection
    is not taken for stuck, so the decision in flight behind it is not
    failed and later ones are decided by Redis on the same connection."""
    rds = redis()
    gp = gate_proxy(rds.port)
    rec = recorder()
    # timeout 100ms: the stuck threshold is max(1 s, 10 x timeout) = 1 s
    s = sluice(redis_config(rec, gp, {"rate": "10/m", "burst": 10, "store": "redis"}, workers=1,
                            timeout="100ms"))
    assert get(s.port).status == 200
    # The scenario itself, not a wait for readiness: the connection idles
    # past the 1 s "stuck" threshold of the old check (time since any reply).
    time.sleep(1.1)
    gp.hold()
    a, b = H.Client(s.port), H.Client(s.port)
    try:
        # B's decision follows A's at once: in flight when A times out.
        a.send(H.build_request("GET", "/slow"))
        b.send(H.build_request("GET", "/behind"))
        H.wait_for(lambda: gp.commands(b"EVALSHA") == 3, what="both decisions sent")
        assert a.read_response().status == 200  # timed out: on_store_error allow
        gp.release()
        assert b.read_response().status == 200
    finally:
        a.close()
        b.close()
    assert get(s.port).status == 200
    m = s.metrics_text()
    assert metric(m, "sluice_rate_limit_redis_connects_total") == 1
    assert metric(m, "sluice_rate_limit_store_errors_total", kind="connect") == 0
    assert metric(m, "sluice_rate_limit_store_errors_total", kind="timeout") in (1, 2)
    assert metric(m, "sluice_rate_limit_decisions_total", store="redis", result="allow") >= 2
    assert "no reply for over a second" not in H.read_text(s.error_log), H.read_text(s.error_log)
