"""Operational drills under steady load (issue 8): 20 SIGHUP reloads in a row,
SIGKILL of one worker, SIGTERM of the master.

The load is a Python generator in this file: keepalive connections, each
sending GETs at a fixed rate, that never retry and never replay. Every
request ends in exactly one outcome (ok, bad status, reset, EOF before the
response, timeout), so resets and EOFs-without-response are counted exactly.
Connection attempts that are refused are counted apart: after SIGTERM they
are the expected answer, during a reload there must be none.

Capacity is the backend's: a demo backend with BACKEND_THREADS threads that
sleeps SERVICE_MS per request serves at most THREADS * 1000 / SERVICE_MS
req/s, and sluice caps its connections to it at the same number. Each test
also measures what the whole chain delivers in a short unthrottled burst and
runs at LOAD_SHARE of the smaller figure, so a busy machine lowers the rate
instead of failing the drill.
"""

import os
import signal
import socket
import threading
import time

import pytest

import harness as H

BACKEND_THREADS = 8
SERVICE_MS = 20
LOAD_SHARE = 0.8
LOAD_CONNS = 16
RELOADS = 20
DRAIN_MS = 4000
SLACK = 0.5          # signal delivery and /proc polling, on top of the drain time


# ------------------------------------------------------------------ the load

OUTCOMES = ("ok", "bad", "reset", "eof", "timeout", "error")


class RateLoad:
    """CONNS keepalive connections, each sending GET PATH every CONNS / RATE
    seconds (open loop: a late response delays only its own connection; a
    connection that fell behind by more than a second drops the debt). A
    response with `Connection: close` closes the connection and the next
    request opens a new one. No request is ever retried."""

    def __init__(self, port, rate, sizes, conns=LOAD_CONNS, path="/", timeout=10.0,
                 stop_on_refused=False):
        self.port = port
        self.rate = rate
        self.sizes = set(sizes)
        self.conns = conns
        self.path = path
        self.timeout = timeout
        self.stop_on_refused = stop_on_refused
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.refused = 0
        self.closed_by_server = 0   # responses with Connection: close
        self.connects = 0
        self.failures = []          # dicts: t, conn, lport, outcome, nth, detail
        self.lports = {}            # conn index -> local port of its open socket
        self.sizes_seen = {}
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(conns)]

    def start(self):
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    @property
    def ok(self):
        return self.counts["ok"]

    def failed(self):
        with self.lock:
            return sum(v for k, v in self.counts.items() if k != "ok")

    def _record(self, i, lport, outcome, nth, detail=""):
        with self.lock:
            self.counts[outcome] += 1
            if outcome != "ok":
                self.failures.append({"t": time.monotonic(), "conn": i, "lport": lport,
                                      "outcome": outcome, "nth": nth, "detail": detail})

    def _run(self, i):
        interval = self.conns / self.rate
        next_t = self.t0 + interval * i / self.conns
        req = H.build_request("GET", self.path)
        sock = st = None
        lport, nth = None, 0
        while not self.stop_ev.is_set():
            now = time.monotonic()
            if next_t > now:
                if self.stop_ev.wait(next_t - now):
                    break
            next_t += interval
            if next_t < time.monotonic() - 1.0:
                next_t = time.monotonic()
            if sock is None:
                try:
                    sock = socket.create_connection((H.HOST, self.port), timeout=self.timeout)
                except ConnectionRefusedError:
                    with self.lock:
                        self.refused += 1
                    if self.stop_on_refused:
                        break
                    continue
                except OSError as e:
                    self._record(i, None, "error", 0, "connect: %r" % e)
                    continue
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                st = H.Stream(sock)
                lport, nth = sock.getsockname()[1], 0
                with self.lock:
                    self.connects += 1
                    self.lports[i] = lport
            nth += 1
            outcome, detail, close = "ok", "", False
            try:
                sock.sendall(req)
                r = H.read_response(st)
                if r.status != 200 or len(r.body) not in self.sizes:
                    outcome, detail = "bad", repr(r)
                close = r.has_token("connection", "close") or r.closed
                if close:
                    with self.lock:
                        self.closed_by_server += 1
                if outcome == "ok":
                    with self.lock:
                        self.sizes_seen[len(r.body)] = self.sizes_seen.get(len(r.body), 0) + 1
            except (ConnectionResetError, BrokenPipeError) as e:
                outcome, detail, close = "reset", repr(e), True
            except H.ConnClosed as e:
                outcome, detail, close = "eof", "%s partial=%r" % (e, e.partial[:80]), True
            except socket.timeout as e:
                outcome, detail, close = "timeout", repr(e), True
            except OSError as e:
                outcome, detail, close = "error", repr(e), True
            self._record(i, lport, outcome, nth, detail)
            if close:
                sock.close()
                sock = st = None
                with self.lock:
                    self.lports.pop(i, None)
        if sock is not None:
            sock.close()
        with self.lock:
            self.lports.pop(i, None)

    def wait_ok(self, n, timeout=10.0):
        target = self.ok + n
        H.wait_for(lambda: self.ok >= target, timeout, what="%d more successful requests" % n)

    def finish(self, timeout=15.0):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout)

    def summary(self):
        with self.lock:
            return ("rate %.0f/s over %d conns: %s, refused %d, connects %d, server closes %d"
                    % (self.rate, self.conns, self.counts, self.refused, self.connects,
                       self.closed_by_server))


def measure_capacity(port, conns=2 * BACKEND_THREADS, seconds=1.0, path="/"):
    """Requests per second the chain completes for closed-loop keepalive
    clients during SECONDS (after a short warm-up)."""
    done = [0]
    errors = []
    lock = threading.Lock()
    t_start = time.monotonic() + 0.3
    t_end = t_start + seconds

    def run():
        try:
            c = H.Client(port, timeout=10)
            try:
                while time.monotonic() < t_end:
                    r = c.request("GET", path)
                    assert r.status == 200, r
                    if time.monotonic() >= t_start:
                        with lock:
                            done[0] += 1
            finally:
                c.close()
        except Exception as e:  # reported by the caller
            with lock:
                errors.append(repr(e))
    ts = [threading.Thread(target=run, daemon=True) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert errors == [], "capacity burst failed: %r" % errors[:5]
    return done[0] / seconds


def steady_rate(port):
    """LOAD_SHARE of the smaller of the backend's capacity and a measured
    burst through sluice."""
    backend_cap = BACKEND_THREADS * 1000.0 / SERVICE_MS
    measured = measure_capacity(port)
    rate = LOAD_SHARE * min(backend_cap, measured)
    print("capacity: backend %.0f req/s, measured burst %.0f req/s -> load %.0f req/s"
          % (backend_cap, measured, rate))
    assert rate >= 50, "the chain served only %.0f req/s in the burst" % measured
    return rate


# ------------------------------------------------------------------ helpers

def conn_owners(listen_port, pids):
    """{client port: pid} for every established connection to LISTEN_PORT
    whose server side is held by one of PIDS (one pass over /proc)."""
    by_inode = {}
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fl = line.split()
            if int(fl[1].split(":")[1], 16) == listen_port and fl[3] == "01":
                by_inode["socket:[%s]" % fl[9]] = int(fl[2].split(":")[1], 16)
    out = {}
    for pid in pids:
        d = "/proc/%d/fd" % pid
        try:
            fds = os.listdir(d)
        except OSError:
            continue
        for fd in fds:
            try:
                cport = by_inode.get(os.readlink(os.path.join(d, fd)))
            except OSError:
                continue
            if cport is not None:
                out[cport] = pid
    return out


def proc_states(s):
    """The master's and its children's state and wait channel, for failure
    messages."""
    out = []
    for pid in [s.pid] + H.children_of(s.pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
            with open("/proc/%d/wchan" % pid) as f:
                wchan = f.read()
        except OSError:
            st, wchan = "gone", ""
        out.append("%d:%s:%s" % (pid, st, wchan))
    return " ".join(out)


class ExitWatch:
    """Polls a growing set of PIDs and records when each one is gone."""

    def __init__(self):
        self.lock = threading.Lock()
        self.since = {}     # pid -> monotonic time it was told to go
        self.gone = {}      # pid -> monotonic time it was seen gone
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def add(self, pids, t):
        with self.lock:
            for p in pids:
                self.since.setdefault(p, t)

    def _run(self):
        while not self.stop_ev.wait(0.02):
            with self.lock:
                pending = [p for p in self.since if p not in self.gone]
            for p in pending:
                if not H.pid_alive(p):
                    with self.lock:
                        self.gone[p] = time.monotonic()

    def wait_all(self, timeout):
        H.wait_for(lambda: len(self.gone) == len(self.since), timeout, what="old workers gone")

    def durations(self):
        with self.lock:
            return {p: self.gone[p] - t for p, t in self.since.items() if p in self.gone}

    def close(self):
        self.stop_ev.set()
        self.t.join(2)


def drill_setup(sluice, demo, sizes=(111,), drain_ms=DRAIN_MS, spare=0):
    """Demo backends (one per size, same capacity) and a 2-worker sluice in
    front of the first. SPARE: backend threads (and sluice connections) on
    top of the load's capacity, for a test's own slow requests. Returns
    (sluice, [configs, one per backend], rate)."""
    n = BACKEND_THREADS + spare
    backends = [demo(size=z, threads=n, service_ms=SERVICE_MS, backlog=256,
                     keepalive_ms=60000, name="d%d" % z) for z in sizes]
    port = H.free_port()
    cfgs = [H.make_config(port, [H.server(b.port, "s%d" % k, max_connections=n)],
                          workers=2, timeouts={"drain": "%dms" % drain_ms})
            for k, b in enumerate(backends)]
    s = sluice(cfgs[0])
    return s, cfgs, steady_rate(s.port)


def fast_get(port, timeout=10.0):
    """One request that skips the backend's service time, on a new
    connection; returns (response, client port, open Client)."""
    c = H.Client(port, timeout=timeout)
    r = c.request("GET", "/?sleep_ms=0")
    return r, c.sock.getsockname()[1], c


# ------------------------------------------------------------------ drills

def test_twenty_reloads_under_load_lose_nothing(sluice, demo):
    """20 SIGHUPs in a row under steady load, each waiting until the new
    generation serves: no failed request, no reset, no EOF before a
    response, no refused connection; every old worker is gone within the
    drain time."""
    s, cfgs, rate = drill_setup(sluice, demo, sizes=(111, 222))
    master = s.pid
    load = RateLoad(s.port, rate, sizes=(111, 222)).start()
    watch = ExitWatch()
    waits = []
    try:
        load.wait_ok(int(rate * 0.5))
        for k in range(RELOADS):
            cfg = cfgs[(k + 1) % 2]
            size = 222 if cfg is cfgs[1] else 111
            old = set(s.worker_pids())
            s.write_config(cfg)
            t_hup = time.monotonic()
            s.signal(signal.SIGHUP)
            watch.add(old, t_hup)
            H.wait_for(lambda: len(set(s.worker_pids()) - old) >= 2, 10,
                       what="reload %d: new generation forked" % (k + 1))

            def new_gen_serves():
                r, _, c = fast_get(s.port)
                c.close()
                assert r.status == 200, r
                return len(r.body) == size
            H.wait_for(new_gen_serves, 10, interval=0.01,
                       what="reload %d: new generation serving" % (k + 1))
            waits.append(time.monotonic() - t_hup)
            # space the reloads through the load: a few hundred requests each
            load.wait_ok(int(rate * 0.4), timeout=15)
            assert s.pid == master and s.alive()
        watch.wait_all(DRAIN_MS / 1000.0 + SLACK + 2)
    finally:
        load.finish()
        watch.close()
    exits = watch.durations()
    print(load.summary())
    print("new generation serving after %.0f ms (max %.0f ms); old workers gone after "
          "%.0f ms at most (drain %d ms)" % (1000 * sum(waits) / len(waits), 1000 * max(waits),
                                             1000 * max(exits.values()), DRAIN_MS))
    assert load.failures == [], load.failures[:10]
    assert load.refused == 0
    assert load.sizes_seen.get(111, 0) > 0 and load.sizes_seen.get(222, 0) > 0
    assert load.closed_by_server >= LOAD_CONNS, "the drained workers never said Connection: close"
    assert len(exits) == 2 * RELOADS
    late = {p: d for p, d in exits.items() if d > DRAIN_MS / 1000.0 + SLACK}
    assert late == {}, "old workers outlived the drain time: %r" % late
    assert len(s.worker_pids()) == 2


def test_sigkill_worker_loses_only_its_own_requests(sluice, demo):
    """SIGKILL of one worker under load: only requests on connections that
    worker held fail (at most one per connection), the others see nothing,
    and a new worker serves within a second."""
    s, _, rate = drill_setup(sluice, demo)
    load = RateLoad(s.port, rate, sizes=(111,)).start()
    probes = []
    try:
        load.wait_ok(int(rate * 0.5))
        pids = s.worker_pids()
        assert len(pids) == 2
        owners = H.wait_for(lambda: (lambda o: len(o) >= LOAD_CONNS and o)(
            conn_owners(s.port, pids)), 5, what="every load connection established")
        victim = max(pids, key=lambda p: sum(1 for v in owners.values() if v == p))
        with load.lock:
            live = dict(load.lports)
        victim_ports = {lp for lp in live.values() if owners.get(lp) == victim}
        assert victim_ports, "the victim holds none of the load's connections"
        assert load.failed() == 0, load.failures
        t_kill = time.monotonic()
        os.kill(victim, signal.SIGKILL)

        forked = H.wait_for(lambda: set(s.worker_pids()) - set(pids), 3, interval=0.002,
                            what="a new worker process")
        forked_after = time.monotonic() - t_kill

        # Probes on new connections, at most 8 at a time: those the kernel
        # puts in the dead worker's accept queue wait there until its
        # replacement accepts them.
        found = threading.Event()
        plock = threading.Lock()
        slots = threading.Semaphore(8)

        def probe():
            try:
                r, cport, c = fast_get(s.port, timeout=5)
            except Exception as e:  # recorded; the test asserts on it
                with plock:
                    probes.append(("error", repr(e), time.monotonic(), None))
                slots.release()
                return
            t = time.monotonic()
            owner = conn_owners(s.port, s.worker_pids()).get(cport)
            c.close()
            with plock:
                probes.append((r.status, len(r.body), t, owner))
            if owner in forked:
                found.set()
            slots.release()
        pthreads = []
        deadline = time.monotonic() + 3
        while not found.is_set() and time.monotonic() < deadline:
            if not slots.acquire(timeout=0.05):
                continue
            th = threading.Thread(target=probe, daemon=True)
            th.start()
            pthreads.append(th)
            found.wait(0.01)
        t_new = [t for (_, _, t, o) in probes if o in forked]
        new = set(s.worker_pids()) - set(pids)
        assert found.is_set(), ("no request was served by a new worker within 3 s: %r; "
                                "processes: %s; load: %s" % (probes, proc_states(s), load.summary()))
        replaced_after = min(t_new) - t_kill
        load.wait_ok(int(rate * 1.0))
        for th in pthreads:
            th.join(10)
    finally:
        load.finish()
    print(load.summary())
    print("victim %d held %d of %d load connections; replacement %s forked after %.0f ms, "
          "served after %.0f ms" % (victim, len(victim_ports), LOAD_CONNS, sorted(new),
                                    1000 * forked_after, 1000 * replaced_after))
    assert len(new) == 1 and len(s.worker_pids()) == 2
    assert replaced_after <= 1.0
    assert all(p[0] == 200 and p[1] == 111 for p in probes), probes
    bad = [f for f in load.failures if f["t"] < t_kill or f["lport"] not in victim_ports
           or f["outcome"] not in ("reset", "eof")]
    assert bad == [], "failures outside the killed worker's connections: %r" % bad
    per_conn = {}
    for f in load.failures:
        per_conn[f["lport"]] = per_conn.get(f["lport"], 0) + 1
    assert all(n == 1 for n in per_conn.values()), per_conn
    assert len(load.failures) <= len(victim_ports)
    assert H.read_text(s.error_log).count("killed by signal 9; starting a new one") == 1


def test_sigterm_under_load_drains_cleanly(sluice, demo):
    """SIGTERM of the master under load: requests in flight complete
    (slow ones included), no request gets a reset or an EOF before its
    response, new connection attempts are refused, the master exits 0
    within the drain time and no worker is left."""
    # spare threads: the slow requests must not leave the load queued (and
    # so never idle), or idle keepalive connections would go untested
    s, _, rate = drill_setup(sluice, demo, spare=4)
    load = RateLoad(s.port, rate, sizes=(111,), stop_on_refused=True).start()
    slow_results = []

    def slow(i):
        try:
            c = H.Client(s.port, timeout=10)
            r = c.request("GET", "/?sleep_ms=1000&i=%d" % i)
            slow_results.append((r.status, len(r.body), r.has_token("connection", "close")))
            c.close()
        except Exception as e:
            slow_results.append(("error", repr(e)))
    try:
        load.wait_ok(int(rate * 0.5))
        workers = s.worker_pids()
        slow_threads = [threading.Thread(target=slow, args=(i,), daemon=True) for i in range(4)]
        for t in slow_threads:
            t.start()
        # the slow requests are at the backend (or queued for it) before the stop
        H.wait_for(lambda: len(conn_owners(s.port, workers)) >= LOAD_CONNS + 4, 5,
                   what="slow requests connected")
        time.sleep(0.2)  # let them reach the backend: they are the in-flight ones
        ok_before = load.ok
        t_term = time.monotonic()
        s.signal(signal.SIGTERM)
        rc = s.proc.wait(timeout=DRAIN_MS / 1000.0 + 5)
        stopped_after = time.monotonic() - t_term
        for t in slow_threads:
            t.join(10)
    finally:
        load.finish()
    print(load.summary())
    print("master exited %s after %.0f ms; %d requests completed after the signal"
          % (rc, 1000 * stopped_after, load.ok - ok_before))
    assert rc == 0
    assert stopped_after <= DRAIN_MS / 1000.0 + SLACK
    assert slow_results == [(200, 111, True)] * 4, slow_results
    assert load.failures == [], load.failures[:10]
    assert load.ok > ok_before, "no request completed after the signal"
    assert load.closed_by_server >= 1
    H.wait_for(lambda: not any(H.pid_alive(w) for w in workers), 3, what="workers gone")
    assert not H.port_accepts(s.port)


def test_stop_serves_connections_waiting_in_accept_queue(sluice, demo):
    """Connections the kernel queued before the stop (their connect()
    succeeded) are accepted and answered, not reset when the listening
    sockets close; attempts after the stop began are not queued (and are
    refused once the sockets are closed). The workers are SIGSTOPped so the
    connections are certainly still queued when the master gets SIGTERM."""
    d = demo(size=111, threads=BACKEND_THREADS)
    cfg = H.make_config(H.free_port(), [H.server(d.port, max_connections=BACKEND_THREADS)],
                        workers=2, timeouts={"drain": "%dms" % DRAIN_MS})
    s = sluice(cfg)
    workers = s.worker_pids()
    assert H.http_request(s.port, "GET", "/").status == 200
    clients = []
    try:
        for w in workers:
            os.kill(w, signal.SIGSTOP)
        for i in range(6):
            c = H.Client(s.port, timeout=10)
            c.send(H.build_request("GET", "/queued%d" % i))
            clients.append(c)
        err_off = len(H.read_text(s.error_log))
        s.signal(signal.SIGTERM)
        s.wait_error_log(r"stopping: draining", start=err_off)
        # the sockets no longer take connections (the SYN is ignored, and
        # refused once they are closed) although they are still open
        with pytest.raises(socket.timeout):
            socket.create_connection((H.HOST, s.port), timeout=0.3).close()
    finally:
        for w in workers:
            os.kill(w, signal.SIGCONT)
    results = []
    for c in clients:
        try:
            r = c.read_response()
            results.append((r.status, len(r.body)))
        except (H.ConnClosed, ConnectionResetError) as e:
            results.append(repr(e))
        c.close()
    assert s.proc.wait(timeout=DRAIN_MS / 1000.0 + 5) == 0
    assert results == [(200, 111)] * 6, results
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((H.HOST, s.port), timeout=5).close()


def test_reload_keeps_keepalive_promised_by_a_response_in_flight(sluice, demo):
    """A response whose head said keep-alive before the reload is still
    being delivered when the old worker starts draining: the client's next
    request on that connection, sent the moment the body ends, gets an
    answer (with Connection: close), not a connection closed under it."""
    size = 64 << 20     # more than the socket buffers hold: still in flight at the reload
    d = demo(size=111)
    cfg = H.make_config(H.free_port(), [H.server(d.port)], workers=1,
                        timeouts={"drain": "%dms" % DRAIN_MS})
    s = sluice(cfg)
    c = H.Client(s.port, timeout=10)
    try:
        c.send(H.build_request("GET", "/?size=%d" % size))
        head = c.st.read_until(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0] and b"connection: close" not in head.lower(), head
        old = s.worker_pids()
        err_off = len(H.read_text(s.error_log))
        s.signal(signal.SIGHUP)
        s.wait_error_log(r"worker 0: draining: 1 client", timeout=10, start=err_off)
        # counted, not kept: Stream's buffer would copy 64 MiB over and over
        got, chunk = len(c.st.buf), bytearray(1 << 20)
        c.st.buf = b""
        while got < size:
            n = c.sock.recv_into(chunk, min(len(chunk), size - got))
            assert n > 0, "EOF after %d of %d body bytes" % (got, size)
            got += n
        c.send(H.build_request("GET", "/next"))
        r = c.read_response()
        assert r.status == 200 and len(r.body) == 111, r
        assert r.has_token("connection", "close"), r
        assert c.wait_closed(5) == b""
    finally:
        c.close()
    H.wait_for(lambda: not any(H.pid_alive(p) for p in old), DRAIN_MS / 1000.0 + SLACK,
               what="old worker gone")


def test_reload_dropping_a_listener_serves_its_queued_connections(sluice, demo):
    """A reload that removes a listener: connections already queued on its
    sockets are accepted and answered by the old workers before the sockets
    close; while they wait, new attempts are not queued. The old workers are
    SIGSTOPped so the connections are certainly still queued at the reload."""
    d = demo(size=111)
    pa, pb = H.free_port(), H.free_port()
    cfg = H.make_config(pa, [H.server(d.port)], workers=1, timeouts={"drain": "%dms" % DRAIN_MS})
    cfg["listeners"].append({"name": "b", "address": "%s:%d" % (H.HOST, pb), "backend": "app"})
    s = sluice(cfg)
    old = s.worker_pids()
    clients = []
    try:
        for w in old:
            os.kill(w, signal.SIGSTOP)
        for i in range(4):
            c = H.Client(pb, timeout=10)
            c.send(H.build_request("GET", "/queued%d" % i))
            clients.append(c)
        s.write_config(H.make_config(pa, [H.server(d.port)], workers=1,
                                     timeouts={"drain": "%dms" % DRAIN_MS}))
        s.signal(signal.SIGHUP)
        # The master waits on the queues once the new generation reports
        # ready; from then on a new attempt is not queued (it times out).
        # An attempt made before that is queued, and served like the rest.
        def not_queued():
            try:
                socket.create_connection((H.HOST, pb), timeout=0.3).close()
                return False
            except socket.timeout:
                return True
        H.wait_for(not_queued, 5, what="new connections no longer queued on the dropped listener")
    finally:
        for w in old:
            os.kill(w, signal.SIGCONT)
    results = []
    for c in clients:
        try:
            r = c.read_response()
            results.append((r.status, len(r.body)))
        except (H.ConnClosed, ConnectionResetError) as e:
            results.append(repr(e))
        c.close()
    assert results == [(200, 111)] * 4, results
    H.wait_for(lambda: not any(H.pid_alive(w) for w in old), DRAIN_MS / 1000.0 + SLACK,
               what="old worker gone")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((H.HOST, pb), timeout=5).close()
    assert H.http_request(pa, "GET", "/").status == 200
