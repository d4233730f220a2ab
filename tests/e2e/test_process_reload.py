"""Process model: graceful stop with in-flight requests, drain timeout,
SIGHUP reload under running load with zero failures, invalid reload keeps
the old config, SIGUSR1 log reopen, and a SIGKILLed worker is replaced."""

import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness as H

SLACK = 2.0


def gated_handler(gate):
    def handler(conn):
        while True:
            q = conn.read_request()
            if q.target.startswith("/slow"):
                gate.wait(20)
            conn.respond(q.target.encode())
    return handler


# ---------------------------------------------------------------- graceful stop

def probe_after_stop(port):
    """A connection attempt made after the stop signal: returns "refused",
    or what a request on it got ("closed", "reset", or the status)."""
    try:
        c = H.Client(port, timeout=15)
    except ConnectionRefusedError:
        return "refused"
    try:
        c.send(H.build_request("GET", "/late"))
        return c.read_response().status
    except H.ConnClosed:
        return "closed"
    except ConnectionResetError:
        return "reset"
    finally:
        c.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_graceful_stop_finishes_inflight_requests(sluice, recorder, sig):
    """In-flight requests complete, new connections are not served (refused,
    or left unaccepted and reset at exit; the spec says "stop accepting"),
    and the master exits 0."""
    gate = threading.Event()
    rb = recorder(gated_handler(gate))
    cfg = H.make_config(H.free_port(), [H.server(rb.port)], workers=2,
                        timeouts={"drain": "10s"})
    s = sluice(cfg)
    with ThreadPoolExecutor(6) as ex:
        fs = [ex.submit(H.http_request, s.port, "GET", "/slow%d" % i, timeout=20) for i in range(5)]
        rb.wait_requests(5)
        s.signal(sig)
        # wait until the workers have seen the signal: the listener is closed
        # or, at least, the master is still there draining
        try:
            H.wait_for(lambda: not H.port_accepts(s.port), 1.0)
        except TimeoutError:
            pass
        late = ex.submit(probe_after_stop, s.port)
        time.sleep(0.3)  # absence check: the late request must not be served
        assert s.alive(), "master exited before in-flight requests finished"
        assert len(rb.all_requests()) == 5, "a request arriving after the stop signal was forwarded"
        gate.set()
        res = [f.result(15) for f in fs]
        assert late.result(20) in ("refused", "closed", "reset", 503)
    assert [r.status for r in res] == [200] * 5
    assert sorted(r.body for r in res) == sorted(b"/slow%d" % i for i in range(5))
    assert s.proc.wait(timeout=10) == 0
    H.wait_for(lambda: not s.worker_pids(), 3)


def test_drain_timeout_bounds_shutdown(sluice, recorder):
    def handler(conn):
        conn.read_request()
        conn.hang(30)
    rb = recorder(handler)
    cfg = H.make_config(H.free_port(), [H.server(rb.port)], timeouts={"drain": "1s"})
    s = sluice(cfg)
    c = H.Client(s.port, timeout=10)
    try:
        c.send(H.build_request("GET", "/forever"))
        rb.wait_requests(1)
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        s.proc.wait(timeout=1 + SLACK + 5)
        assert time.monotonic() - t0 <= 1 + SLACK
        # the cut-off client got an error status or a closed connection
        try:
            data = c.wait_closed(3)
            assert data == b"" or data.startswith(b"HTTP/1.1 5")
        except ConnectionResetError:
            pass
    finally:
        c.close()


def test_stop_with_idle_keepalive_clients_is_prompt(sluice, recorder):
    rb = recorder()
    cfg = H.make_config(H.free_port(), [H.server(rb.port)], timeouts={"drain": "10s"})
    s = sluice(cfg)
    clients = [H.Client(s.port) for _ in range(5)]
    try:
        for c in clients:
            assert c.request("GET", "/").status == 200
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        assert s.proc.wait(timeout=15) == 0
        assert time.monotonic() - t0 < 5.0, "idle keepalive connections held up the stop"
        for c in clients:
            assert c.is_closed(2)
    finally:
        for c in clients:
            c.close()


# ---------------------------------------------------------------- reload under load

class Load:
    """Background load: keepalive clients (which, like real HTTP clients,
    replay an idempotent request once on a fresh connection when a REUSED
    connection is closed before any response byte) and one-connection-per-
    request clients (no retry at all)."""

    def __init__(self, port, sizes, keepalive=2, fresh=2):
        self.port = port
        self.sizes = sizes
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failures = []
        self.stale_retries = 0
        self.seen = {}
        self.last_fresh_size = None
        self.threads = [threading.Thread(target=self._keepalive, daemon=True) for _ in range(keepalive)]
        self.threads += [threading.Thread(target=self._fresh, daemon=True) for _ in range(fresh)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _record(self, r, fresh=False):
        with self.lock:
            if r.status != 200 or len(r.body) not in self.sizes:
                self.failures.append("bad response %r" % r)
                return
            self.ok += 1
            self.seen[len(r.body)] = self.seen.get(len(r.body), 0) + 1
            if fresh:
                self.last_fresh_size = len(r.body)

    def _fail(self, what):
        with self.lock:
            self.failures.append(what)

    def _keepalive(self):
        c, reused = None, False
        while not self.stop.is_set():
            try:
                if c is None:
                    c, reused = H.Client(self.port, timeout=10), False
                c.send(H.build_request("GET", "/"))
                r = c.read_response()
            except (H.ConnClosed, ConnectionResetError, BrokenPipeError) as e:
                clean = not isinstance(e, H.ConnClosed) or e.partial == b""
                c.close()
                c = None
                if reused and clean:
                    with self.lock:
                        self.stale_retries += 1
                    continue  # replay once on a fresh connection
                self._fail("keepalive: %r" % e)
                continue
            except Exception as e:
                self._fail("keepalive: %r" % e)
                c.close()
                c = None
                continue
            self._record(r)
            reused = True
            if r.has_token("connection", "close"):
                c.close()
                c = None
        if c:
            c.close()

    def _fresh(self):
        while not self.stop.is_set():
            try:
                r = H.http_request(self.port, "GET", "/", timeout=10)
            except Exception as e:
                self._fail("fresh: %r" % e)
                continue
            self._record(r, fresh=True)

    def wait_more(self, n, timeout=10):
        with self.lock:
            target = self.ok + n
        H.wait_for(lambda: self.ok >= target, timeout, what="%d more successful requests" % n)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(15)


def test_sighup_reload_under_load_zero_failures(sluice, demo):
    a = demo(size=111, threads=32, name="a")
    b = demo(size=222, threads=32, name="b")
    port = H.free_port()
    cfg_a = H.make_config(port, [H.server(a.port, "a")], workers=2, timeouts={"drain": "3s"})
    cfg_b = H.make_config(port, [H.server(b.port, "b")], workers=2, timeouts={"drain": "3s"})
    s = sluice(cfg_a)
    master = s.pid
    load = Load(s.port, sizes=(111, 222)).start()
    try:
        load.wait_more(50)
        for cfg, size in ((cfg_b, 222), (cfg_a, 111), (cfg_a, 111)):
            s.reload(cfg, timeout=15)
            H.wait_for(lambda: load.last_fresh_size == size, 5, what="new config serving")
            load.wait_more(50)
            assert s.pid == master and s.alive()
    finally:
        load.finish()
    assert load.failures == [], load.failures[:10]
    assert load.seen.get(111, 0) > 0 and load.seen.get(222, 0) > 0
    assert load.ok >= 200


def test_invalid_config_reload_keeps_old_config(sluice, demo):
    a = demo(size=111, name="a")
    b = demo(size=222, name="b")
    port = H.free_port()
    cfg = H.make_config(port, [H.server(a.port, "a")], workers=2)
    s = sluice(cfg)
    assert len(H.http_request(s.port, "GET", "/").body) == 111
    pids = s.worker_pids()
    err_off = len(H.read_text(s.error_log))
    # broken config pointing at b: must be rejected as a whole
    bad = H.make_config(port, [H.server(b.port, "b", max_connections="lots")], workers=2)
    s.write_config(bad)
    s.config = cfg  # the running config is still the old one
    s.signal(signal.SIGHUP)
    s.wait_error_log(r"\[error\]", timeout=5, start=err_off)
    for _ in range(10):
        r = H.http_request(s.port, "GET", "/")
        assert r.status == 200 and len(r.body) == 111
    assert s.worker_pids() == pids
    assert s.alive()
    # a valid config afterwards is picked up
    s.reload(H.make_config(port, [H.server(b.port, "b")], workers=2))
    H.wait_for(lambda: len(H.http_request(s.port, "GET", "/").body) == 222, 5)


def test_reload_keeps_listener_accepting(sluice, demo):
    """During reload no connection attempt is refused (the master keeps the
    listening sockets)."""
    a = demo(size=111)
    cfg = H.make_config(H.free_port(), [H.server(a.port)], workers=2)
    s = sluice(cfg)
    stop = threading.Event()
    refused = []

    def prober():
        while not stop.is_set():
            try:
                sk = socket.create_connection((H.HOST, s.port), timeout=2)
                sk.close()
            except OSError as e:
                refused.append(repr(e))
    t = threading.Thread(target=prober, daemon=True)
    t.start()
    try:
        for _ in range(3):
            s.reload()
    finally:
        stop.set()
        t.join(5)
    assert refused == []


# ---------------------------------------------------------------- logs and workers

def test_sigusr1_reopens_logs(sluice, demo):
    a = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(a.port)]))
    assert H.http_request(s.port, "GET", "/before").status == 200
    s.wait_access_log(r" GET /before 200 ")
    os.rename(s.access_log, s.access_log + ".1")
    os.rename(s.error_log, s.error_log + ".1")
    s.signal(signal.SIGUSR1)
    n = [0]

    def reopened():
        n[0] += 1
        H.http_request(s.port, "GET", "/after%d" % n[0])
        return os.path.exists(s.access_log) and "/after" in H.read_text(s.access_log)
    H.wait_for(reopened, 5, interval=0.1, what="access log reopened")
    assert "/before" not in H.read_text(s.access_log)
    assert "/before" in H.read_text(s.access_log + ".1")
    assert s.alive()


def test_killed_worker_is_replaced(sluice, demo):
    a = demo(size=50)
    s = sluice(H.make_config(H.free_port(), [H.server(a.port)], workers=2))
    pids = s.worker_pids()
    assert len(pids) == 2
    victim = pids[0]
    os.kill(victim, signal.SIGKILL)
    # service continues right away on new connections
    for i in range(20):
        r = H.http_request(s.port, "GET", "/k%d" % i, timeout=5)
        assert r.status == 200 and len(r.body) == 50
    new = H.wait_for(lambda: (len(s.worker_pids()) == 2 and victim not in s.worker_pids()
                              and s.worker_pids()), 5, what="replacement worker")
    assert pids[1] in new
    assert s.alive()
    for i in range(20):
        assert H.http_request(s.port, "GET", "/after%d" % i).status == 200


def test_master_stop_leaves_no_workers(sluice, demo):
    a = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(a.port)], workers=2))
    workers = s.worker_pids()
    assert s.stop() == 0
    H.wait_for(lambda: not any(H.pid_alive(w) for w in workers), 5, what="workers gone")
    assert not H.port_accepts(s.port)
