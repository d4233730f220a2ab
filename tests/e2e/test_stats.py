"""Statistics against known traffic: exact counters per listener, backend
and server, latency histograms whose buckets move exactly where an injected
delay says, sums over 2 workers, totals that survive a killed worker and a
reload, TLS handshakes by kind, and gauges.

/metrics is parsed with prometheus_client's own text parser (the one a
Prometheus client library ships); /status is JSON. The access log is the
independent record the counters are compared with: both come from the same
per-request figures, so sums match to the microsecond and the byte."""

import os
import re
import signal
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import harness as H

parser = pytest.importorskip(
    "prometheus_client.parser",
    reason="needs prometheus_client (Debian python3-prometheus-client or pip; `make test-deps`)")

LI = {"listener": "http"}
BE = {"backend": "app"}


def srv(name):
    return {"backend": "app", "server": name}


# --------------------------------------------------------------------------
# /metrics through the real parser

class Metrics:
    """One scrape: families by name, samples by (sample name, labels)."""

    def __init__(self, text):
        self.text = text
        self.families = {}
        self.samples = {}
        for fam in parser.text_string_to_metric_families(text):
            assert fam.name not in self.families, "family %s twice" % fam.name
            self.families[fam.name] = fam
            for smp in fam.samples:
                key = (smp.name, frozenset(smp.labels.items()))
                assert key not in self.samples, "duplicate sample %s %s" % key
                self.samples[key] = smp.value

    def get(self, name, labels, default=None):
        return self.samples.get((name, frozenset(labels.items())), default)

    def v(self, name, labels):
        """A sample that must exist."""
        val = self.get(name, labels)
        assert val is not None, "no sample %s%s in /metrics" % (name, labels)
        return val

    def n(self, name, labels):
        """A sample as an int (counters and bucket counts are whole numbers)."""
        val = self.v(name, labels)
        assert val == int(val), (name, labels, val)
        return int(val)

    def errors(self, labels, reason):
        """sluice_errors_total for LABELS and REASON; absent means 0."""
        val = self.get("sluice_errors_total", dict(labels, reason=reason), 0)
        return int(val)

    def buckets(self, hist, labels):
        """[(le as float, cumulative count)] in exported order."""
        out = []
        for (name, lbls), val in self.samples.items():
            if name != hist + "_bucket":
                continue
            d = dict(lbls)
            le = d.pop("le")
            if d == labels:
                out.append((float("inf") if le == "+Inf" else float(le), int(val)))
        return sorted(out)

    def bucket(self, hist, labels, le):
        """Cumulative count of bucket LE (a string exactly as exported)."""
        return self.n(hist + "_bucket", dict(labels, le=le))

    def hist_sum_us(self, hist, labels):
        return round(self.v(hist + "_sum", labels) * 1e6)


def scrape(s):
    return Metrics(s.metrics_text())


def wait_metric(s, pred, timeout=5.0, what="metrics"):
    """Scrape until PRED(Metrics) is true; returns that scrape."""
    box = {}

    def ok():
        box["m"] = scrape(s)
        return pred(box["m"])
    try:
        H.wait_for(ok, timeout, interval=0.05, what=what)
    except TimeoutError:
        raise AssertionError("timed out waiting for %s; last scrape:\n%s"
                             % (what, "\n".join(l for l in box["m"].text.splitlines()
                                                if "_bucket" not in l and not l.startswith("#"))))
    return box["m"]


def access_lines(s, n, timeout=5.0):
    """Wait until the access log holds N entries; returns them."""
    H.wait_for(lambda: len(s.access_entries()) >= n, timeout, what="%d access log lines" % n)
    es = s.access_entries()
    assert len(es) == n, "expected %d access log lines, got %d" % (n, len(es))
    return es


def us(e, k):
    return 0 if e[k] == "-" else int(e[k])


def edges_us():
    """The exported bucket edges in microseconds: powers of two and 1.5x
    powers of two from 1 us, the last below 2^26 us (67 s)."""
    out = set()
    k = 0
    while (1 << k) < (1 << 26):
        out.add(1 << k)
        if k >= 1:
            out.add(3 << (k - 1))
        k += 1
    return sorted(e for e in out if e < (1 << 26))


# --------------------------------------------------------------------------
# exact counts


def test_known_traffic_exact_counts(sluice, demo):
    """30 requests (GETs of several sizes on 5 keepalive connections, and
    POSTs with bodies on fresh connections) through one demo server: the
    listener, backend and server all count exactly 30 requests and 30 2xx
    responses; response bytes equal the bytes the clients received and the
    access log's byte column; request body bytes equal what was sent; the
    new/reused backend connection split equals the access log's be_conn_req;
    histogram counts and sums equal the access log's timings to the
    microsecond; /status agrees."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], admin=H.admin_config()))
    m0 = scrape(s)
    accepted0 = m0.n("sluice_connections_accepted_total", LI)
    assert m0.n("sluice_requests_total", LI) == 0
    received = 0
    body_bytes = 0
    n = 0
    for c in range(5):
        with H.Client(s.port) as cl:
            for i in range(4):
                r = cl.request("GET", "/k%d-%d?size=%d" % (c, i, 10 + 97 * (c * 4 + i)))
                assert r.status == 200 and len(r.body) == 10 + 97 * (c * 4 + i)
                received += len(r.raw)
                n += 1
    for i in range(10):
        body = H.pattern_bytes(1000 + 333 * i, seed=i)
        r = H.http_request(s.port, "POST", "/p%d" % i, body=body)
        assert r.status == 200, r
        received += len(r.raw)
        body_bytes += len(body)
        n += 1
    assert n == 30
    es = access_lines(s, n)
    assert sum(int(e["bytes"]) for e in es) == received
    new = sum(1 for e in es if e["be_conn_req"] == "1")
    reused = sum(1 for e in es if e["be_conn_req"] not in ("-", "1"))
    assert new + reused == n and new >= 1 and reused >= 1, (new, reused)

    m = scrape(s)
    assert m.n("sluice_connections_accepted_total", LI) == accepted0 + 15
    for lb in (LI, BE, srv("s1")):
        assert m.n("sluice_requests_total", lb) == n, lb
        assert m.n("sluice_responses_2xx_total", lb) == n, lb
        for cls in ("1xx", "3xx", "4xx", "5xx", "none"):
            assert m.n("sluice_responses_%s_total" % cls, lb) == 0, (cls, lb)
        assert m.n("sluice_response_bytes_total", lb) == received, lb
        assert m.n("sluice_request_body_bytes_total", lb) == body_bytes, lb
        assert m.n("sluice_request_seconds_count", lb) == n, lb
        assert m.hist_sum_us("sluice_request_seconds", lb) == sum(us(e, "total_us") for e in es)
        assert not [k for k in m.samples if k[0] == "sluice_errors_total"
                    and set(lb.items()) <= set(k[1])], "errors counted for ok requests"
    for lb in (BE, srv("s1")):
        assert m.n("sluice_backend_requests_new_connection_total", lb) == new, lb
        assert m.n("sluice_backend_requests_reused_connection_total", lb) == reused, lb
        assert m.n("sluice_queue_seconds_count", lb) == n
        assert m.hist_sum_us("sluice_queue_seconds", lb) == sum(us(e, "queue_us") for e in es)
        assert m.n("sluice_backend_response_seconds_count", lb) == n
        assert m.hist_sum_us("sluice_backend_response_seconds", lb) == \
            sum(us(e, "backend_us") for e in es)
        # connect time exists only for requests that opened a connection
        assert m.n("sluice_backend_connect_seconds_count", lb) == new
        assert m.hist_sum_us("sluice_backend_connect_seconds", lb) == \
            sum(us(e, "connect_us") for e in es if e["be_conn_req"] == "1")
    # backend/server scopes carry no listener-only counters
    assert m.n("sluice_connections_accepted_total", BE) == 0
    assert m.n("sluice_backend_requests_new_connection_total", LI) == 0

    st = s.status()
    li = st["listeners"][0]
    assert li["name"] == "http" and li["requests"] == n and li["responses"]["2xx"] == n
    assert li["bytes_out"] == received and li["bytes_in"] == body_bytes
    assert li["accepted"] == accepted0 + 15 and li["errors"] == {}
    be = st["backends"][0]
    assert be["requests"] == n and be["connection_reuse"] == pytest.approx(reused / n, abs=1e-4)
    sv = be["servers"][0]
    assert sv["name"] == "s1" and sv["requests"] == n and sv["bytes_out"] == received
    assert sv["connection_reuse"] == pytest.approx(reused / n, abs=1e-4)
    assert sv["latency_us"]["request_seconds"]["count"] == n
    assert d.stats()["requests"] == n


def test_refused_server_counts_backend_refused(sluice, demo):
    """Two servers, one refusing connections: each request round robin
    sends to it is redispatched to the working server, so every client gets
    200, and the refused connects are counted as
    errors_total{reason="backend_refused"} at the refusing server only (the
    requests themselves succeeded: no error at the listener or backend, no
    5xx anywhere). A refused connect is not a 0 us connect-time observation."""
    d = demo(keepalive_ms=60000)
    dead = H.free_port()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "ok"), H.server(dead, "dead")],
                             admin=H.admin_config()))
    statuses = [H.http_request(s.port, "GET", "/r%d" % i).status for i in range(12)]
    assert statuses == [200] * 12
    es = access_lines(s, 12)
    assert all(e["server"] == "app/ok" and e["reason"] == "ok" for e in es)
    refused = H.read_text(s.error_log).count("to server dead; trying another server")
    assert refused >= 1
    m = scrape(s)
    assert m.errors(srv("dead"), "backend_refused") == refused
    for lb in (LI, BE, srv("ok")):
        assert m.errors(lb, "backend_refused") == 0, lb
    for lb in (LI, BE, srv("ok"), srv("dead")):
        assert m.n("sluice_responses_5xx_total", lb) == 0, lb
    assert m.n("sluice_requests_total", srv("ok")) == 12
    assert m.n("sluice_requests_total", srv("dead")) == 0
    assert m.n("sluice_responses_2xx_total", LI) == 12
    assert m.n("sluice_requests_total", LI) == 12
    # no connection was made to "dead": it has no connect time, and no
    # observation of exactly 0 us anywhere
    for lb in (BE, srv("dead"), srv("ok")):
        assert m.bucket("sluice_backend_connect_seconds", lb, "0.000001") == 0, \
            "refused connects recorded as 0 us connect time at %s" % lb
    assert m.n("sluice_backend_connect_seconds_count", srv("dead")) == 0
    st = s.status()
    assert not st["listeners"][0]["errors"]
    dead_st = [x for x in st["backends"][0]["servers"] if x["name"] == "dead"][0]
    assert dead_st["errors"] == {"backend_refused": refused}


def test_malformed_requests_count_at_listener_only(sluice, demo):
    """Requests sluice rejects itself (400) are counted at the listener
    (requests, 4xx, errors by reason) and never at the backend or server."""
    d = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], admin=H.admin_config()))
    bad = [
        (b"GARBAGE\r\n\r\n", "bad_request"),
        (b"GET / HTTP/1.1\r\n\r\n", "missing_host"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "missing_host"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked, x\r\n\r\n", None),
    ]
    want = {}
    for raw, reason in bad:
        r, _ = H.raw_exchange(s.port, raw)
        assert 400 <= r.status < 500 or r.status == 501, (raw, r)
    es = access_lines(s, len(bad))
    n4 = sum(1 for e in es if e["status"].startswith("4"))
    for e, (raw, reason) in zip(es, bad):
        if reason:
            assert e["reason"] == reason, (raw, e)
        want[e["reason"]] = want.get(e["reason"], 0) + 1
    assert H.http_request(s.port, "GET", "/fine").status == 200
    access_lines(s, len(bad) + 1)
    m = scrape(s)
    assert m.n("sluice_requests_total", LI) == len(bad) + 1
    assert m.n("sluice_responses_4xx_total", LI) == n4
    assert m.n("sluice_responses_2xx_total", LI) == 1
    for reason, k in want.items():
        assert m.errors(LI, reason) == k, reason
    for lb in (BE, srv("s1")):
        assert m.n("sluice_requests_total", lb) == 1, lb
        assert m.n("sluice_responses_4xx_total", lb) == 0, lb
        assert m.n("sluice_responses_5xx_total", lb) == 0, lb
        for reason in want:
            assert m.errors(lb, reason) == 0, (lb, reason)
    assert d.stats()["requests"] == 1


def gated_handler(gate):
    def handler(conn):
        while True:
            q = conn.read_request()
            if q.target.startswith("/hold"):
                gate.wait(20)
            conn.respond(q.target.encode())
    return handler


def test_queue_time_and_queue_gauge(sluice, recorder):
    """max_connections 1: one request holds the only connection, three more
    queue. The queued_requests gauge (metrics and /status) shows 3; once
    released, the queue histogram has 4 observations, exactly the 3 queued
    ones at or above the time they were held (0.3 s), and its sum is the
    access log's queue_us sum."""
    gate = threading.Event()
    rb = recorder(gated_handler(gate))
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port, "s1", max_connections=1)],
                             backend={"queue_timeout": "20s"}, admin=H.admin_config()))
    with ThreadPoolExecutor(4) as ex:
        fa = ex.submit(H.http_request, s.port, "GET", "/hold", timeout=20)
        rb.wait_requests(1)
        fs = [ex.submit(H.http_request, s.port, "GET", "/q%d" % i, timeout=20) for i in range(3)]
        m = wait_metric(s, lambda m: m.n("sluice_queued_requests", BE) == 3, what="3 queued")
        assert s.status()["backends"][0]["queued"] == 3
        assert m.n("sluice_backend_connections_busy", srv("s1")) == 1
        time.sleep(0.3)
        gate.set()
        assert fa.result(20).status == 200
        assert [f.result(20).status for f in fs] == [200] * 3
    es = access_lines(s, 4)
    queued = sorted(int(e["queue_us"]) for e in es)
    assert queued[0] < 300000 <= queued[1], queued
    m = wait_metric(s, lambda m: m.n("sluice_queued_requests", BE) == 0, what="queue empty")
    for lb in (BE, srv("s1")):
        assert m.n("sluice_queue_seconds_count", lb) == 4
        assert m.hist_sum_us("sluice_queue_seconds", lb) == sum(queued) > 900000
        assert m.bucket("sluice_queue_seconds", lb, "0.262144") == 1
        assert m.bucket("sluice_queue_seconds", lb, "+Inf") == 4
    assert s.status()["backends"][0]["latency_us"]["queue_seconds"]["p90"] >= 300000


def test_injected_delay_lands_in_the_right_bucket(sluice, demo):
    """The demo backend sleeps 100 ms per request: every request_seconds
    and backend_response_seconds bucket, at the listener, backend and
    server, counts exactly the requests whose access-log time is at most
    its edge (none below 0.098304: a sleep is never shorter); /status p50
    is within 4% of the logged median. The exported edges are exactly the
    powers of two and 1.5x powers of two (in us). Placement is checked
    against the logged times rather than against 100 ms so that a slow
    (ASan, loaded) machine cannot push a request over the next edge."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], admin=H.admin_config()))
    n = 12

    def client(i):
        with H.Client(s.port, timeout=10) as c:
            return [c.request("GET", "/d%d-%d?sleep_ms=100" % (i, j)).status for j in range(3)]
    with ThreadPoolExecutor(4) as ex:
        assert list(ex.map(client, range(4))) == [[200] * 3] * 4
    es = access_lines(s, n)
    m = scrape(s)
    col = {"sluice_request_seconds": "total_us", "sluice_backend_response_seconds": "backend_us"}
    logged = {h: sorted(int(e[k]) for e in es) for h, k in col.items()}
    for hist, lbs in (("sluice_request_seconds", (LI, BE, srv("s1"))),
                      ("sluice_backend_response_seconds", (BE, srv("s1")))):
        assert logged[hist][0] >= 100000, logged[hist]
        for lb in lbs:
            bs = m.buckets(hist, lb)
            assert [le for le, _ in bs] == [e / 1e6 for e in edges_us()] + [float("inf")], \
                "exported edges of %s" % hist
            assert m.bucket(hist, lb, "0.098304") == 0, (hist, lb, bs)
            want = [sum(1 for us in logged[hist] if us <= edge) for edge in edges_us()] + [n]
            assert [c for _, c in bs] == want, (hist, lb, bs, logged[hist])
            assert m.n(hist + "_count", lb) == n
    for hist in col:
        assert m.hist_sum_us(hist, BE) == sum(logged[hist])
    median = {h: (v[n // 2 - 1] + v[n // 2]) / 2 for h, v in logged.items()}
    st = s.status()
    for scope in (st["backends"][0], st["backends"][0]["servers"][0]):
        for h in ("request_seconds", "backend_response_seconds"):
            lat = scope["latency_us"][h]
            mid, top = median["sluice_" + h], logged["sluice_" + h][-1]
            assert lat["count"] == n
            assert abs(lat["p50"] - mid) <= 0.04 * mid, (h, lat, mid)
            assert 100000 <= lat["p99"] <= top * 1.04, (h, lat, top)
    mid = median["sluice_request_seconds"]
    assert abs(st["listeners"][0]["latency_us"]["request_seconds"]["p50"] - mid) <= 0.04 * mid


def test_sums_across_two_workers(sluice, demo):
    """workers: 2; 40 connections x 2 requests land on both workers (checked
    through the kernel's socket table); the totals are exactly 80 and
    /status lists both workers."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], workers=2,
                             admin=H.admin_config()))
    owners = {}
    received = 0
    for i in range(40):
        with H.Client(s.port) as c:
            for j in range(2):
                r = c.request("GET", "/w%d-%d" % (i, j))
                assert r.status == 200
                received += len(r.raw)
            owners[i] = s.socket_owner(c.sock.getsockname()[1])
    workers = set(s.worker_pids())
    assert len(workers) == 2
    assert set(owners.values()) == workers, "connections reached only %s" % set(owners.values())
    access_lines(s, 80)
    m = scrape(s)
    for lb in (LI, BE, srv("s1")):
        assert m.n("sluice_requests_total", lb) == 80
        assert m.n("sluice_responses_2xx_total", lb) == 80
        assert m.n("sluice_response_bytes_total", lb) == received
        assert m.n("sluice_request_seconds_count", lb) == 80
    st = s.status()
    assert sorted(w["pid"] for w in st["workers"]) == sorted(workers)
    assert st["listeners"][0]["requests"] == 80


class Poller:
    """Scrapes /metrics in a thread as fast as it can and records three
    totals of every successful scrape (a scrape fails while the admin
    worker is being replaced). Plain regexes here, to scrape often."""

    RX = [re.compile(r'^sluice_requests_total\{listener="http"\} (\d+)$', re.M),
          re.compile(r'^sluice_response_bytes_total\{listener="http"\} (\d+)$', re.M),
          re.compile(r'^sluice_request_seconds_count\{backend="app"\} (\d+)$', re.M)]

    def __init__(self, s):
        self.s = s
        self.seen = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_ev.is_set():
            try:
                r = self.s.admin_get("/metrics", timeout=2)
                if r.status == 200:
                    text = r.body.decode()
                    self.seen.append(tuple(int(rx.search(text).group(1)) for rx in self.RX))
            except (OSError, H.ConnClosed):
                pass
            self.stop_ev.wait(0.005)

    def wait_more(self, k=3):
        """Wait until K more scrapes have succeeded."""
        n = len(self.seen)
        H.wait_for(lambda: len(self.seen) >= n + k, 10, what="%d more scrapes" % k)

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        return self.seen


def traffic(s, n, tag):
    for i in range(n):
        with H.Client(s.port) as c:
            assert c.request("GET", "/%s%d" % (tag, i)).status == 200


def test_counters_survive_killed_workers_and_reload(sluice, demo):
    """Counters never go backwards: a scraper runs throughout while a
    worker is SIGKILLed, then the admin worker itself, then a SIGHUP reload;
    after each, the totals are exactly what was sent so far."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], workers=2,
                             admin=H.admin_config()))
    poll = Poller(s)
    total = 0
    try:
        poll.wait_more()
        traffic(s, 20, "a")
        total += 20
        assert scrape(s).n("sluice_requests_total", LI) == total
        poll.wait_more()
        admin_pid = s.admin_owner()
        assert len(admin_pid) == 1
        other = [p for p in s.worker_pids() if p != admin_pid[0]]
        # 1: a worker that does not serve the admin listener
        for victim in (other[0], admin_pid[0]):
            before = set(s.worker_pids())
            os.kill(victim, signal.SIGKILL)
            H.wait_for(lambda: victim not in s.worker_pids() and len(s.worker_pids()) == 2, 10,
                       what="worker %d replaced" % victim)
            H.wait_port(s.admin_port, 10)
            m = wait_metric(s, lambda m: m.n("sluice_requests_total", LI) == total, 5,
                            what="total %d after killing %d" % (total, victim))
            for lb in (BE, srv("s1")):
                assert m.n("sluice_requests_total", lb) == total
                assert m.n("sluice_request_seconds_count", lb) == total
            assert len(set(s.worker_pids()) - before) == 1
            poll.wait_more()
            traffic(s, 10, "k%d-" % victim)
            total += 10
            assert scrape(s).n("sluice_requests_total", LI) == total
            poll.wait_more()
        gen0 = max(w["generation"] for w in s.status()["workers"])
        s.reload()
        H.wait_port(s.admin_port, 10)
        m = wait_metric(s, lambda m: m.n("sluice_requests_total", LI) == total, 5,
                        what="total %d after reload" % total)
        assert m.n("sluice_requests_total", srv("s1")) == total
        st = s.status()
        assert min(w["generation"] for w in st["workers"]) > gen0
        poll.wait_more()
        traffic(s, 10, "r")
        total += 10
        m = scrape(s)
        assert m.n("sluice_requests_total", LI) == total
        assert m.n("sluice_responses_2xx_total", srv("s1")) == total
        poll.wait_more()
    finally:
        seen = poll.stop()
    assert len(seen) >= 24, "the scraper barely ran: %d scrapes" % len(seen)
    for k in range(3):
        col = [x[k] for x in seen]
        drops = [(a, b) for a, b in zip(col, col[1:]) if b < a]
        assert not drops, "a counter went backwards (column %d): %s" % (k, drops[:5])
    assert seen[-1][0] == total


# --------------------------------------------------------------------------
# Prometheus format


def test_metrics_parse_as_prometheus_text(sluice, demo):
    """After mixed traffic (2xx, 404 from the origin, 502, 400) the whole
    page parses with prometheus_client's parser: every sluice_ family has a
    type, counters are counters, the five latency families are histograms
    whose buckets are cumulative (non-decreasing in le order), end in +Inf
    equal to _count, and errors_total has a reason label."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1"),
                                             H.server(H.free_port(), "dead")],
                             admin=H.admin_config()))
    for i in range(8):
        H.http_request(s.port, "GET", "/m%d?sleep_ms=%d" % (i, i * 3))
    H.http_request(s.port, "GET", "/status/404")
    H.raw_exchange(s.port, b"NOT HTTP\r\n\r\n")
    r = s.admin_get("/metrics")
    assert r.status == 200
    assert r.header("content-type").startswith("text/plain; version=0.0.4")
    m = Metrics(r.body.decode())
    types = {name: f.type for name, f in m.families.items()}
    assert all(n.startswith("sluice_") for n in types), types
    hists = {"sluice_queue_seconds", "sluice_backend_connect_seconds",
             "sluice_backend_response_seconds", "sluice_request_seconds",
             "sluice_inspect_seconds"}
    for h in hists:
        assert types.get(h) == "histogram", (h, types.get(h))
    for name in ("sluice_requests", "sluice_responses_2xx", "sluice_response_bytes",
                 "sluice_errors", "sluice_backend_requests_new_connection",
                 "sluice_tls_handshakes_resumed", "sluice_inspect_allow", "sluice_inspect_deny"):
        assert types.get(name) == "counter", (name, types.get(name))
    for name in ("sluice_client_connections", "sluice_backend_connections_idle",
                 "sluice_queued_requests", "sluice_inspect_enabled", "sluice_server_up"):
        assert types.get(name) == "gauge", (name, types.get(name))
    assert m.families["sluice_errors"].samples
    assert all("reason" in smp.labels for smp in m.families["sluice_errors"].samples)
    checked = 0
    for h in hists:
        series = {}
        for smp in m.families[h].samples:
            lbls = {k: v for k, v in smp.labels.items() if k != "le"}
            key = frozenset(lbls.items())
            series.setdefault(key, {"b": [], "count": None, "sum": None})
            if smp.name.endswith("_bucket"):
                series[key]["b"].append((float(smp.labels["le"]), smp.value))
            elif smp.name.endswith("_count"):
                series[key]["count"] = smp.value
            elif smp.name.endswith("_sum"):
                series[key]["sum"] = smp.value
        assert len(series) == 4, (h, series.keys())   # listener, backend, 2 servers
        for key, sr in series.items():
            b = sr["b"]
            assert b == sorted(b, key=lambda x: x[0]), "buckets out of order"
            assert b[-1][0] == float("inf")
            vals = [v for _, v in b]
            assert all(x <= y for x, y in zip(vals, vals[1:])), (h, key, vals)
            assert b[-1][1] == sr["count"], (h, key)
            assert sr["sum"] >= 0
            if sr["count"]:
                checked += 1
    assert checked >= 8


# --------------------------------------------------------------------------
# TLS handshakes


_CTX = {}


def tls12_ctx(ciphers):
    """One client context per cipher list (a session resumes only through
    the context that made it)."""
    if ciphers not in _CTX:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers(ciphers)
        _CTX[ciphers] = ctx
    return _CTX[ciphers]


def tls_client(port, ciphers, session=None):
    raw = socket.create_connection((H.HOST, port), timeout=5)
    try:
        sk = tls12_ctx(ciphers).wrap_socket(raw, server_hostname="localhost", session=session)
    except BaseException:
        raw.close()
        raise
    sk.settimeout(5)
    return sk


def tls_get(port, ciphers, path, session=None):
    sk = tls_client(port, ciphers, session)
    try:
        sk.sendall(H.build_request("GET", path))
        r = H.read_response(H.Stream(sk))
        assert r.status == 200
        return sk.session, sk.session_reused, sk.getpeercert(binary_form=True)
    finally:
        sk.close()


def test_tls_handshakes_by_kind(sluice, demo, id_pki):
    """A TLS listener with an ECDSA and an RSA certificate: 3 full
    handshakes that pick ECDSA, 2 that pick RSA (by the TLS 1.2 suite the
    client offers), 4 resumed ones and 2 failed ones (garbage, and a client
    offering no suite in common) are counted exactly, in /metrics and
    /status."""
    pki = id_pki
    d = demo(keepalive_ms=60000)
    cfg = H.make_config(H.free_port(), [H.server(d.port, "s1")], admin=H.admin_config(),
                        listener={"name": "https",
                                  "tls": {"certificates": [pki.ecdsa.entry(), pki.rsa.entry()]}})
    s = sluice(cfg)
    lb = {"listener": "https"}
    names = ["full_ecdsa", "full_rsa", "resumed", "failed"]
    # the readiness probe of Sluice.start (connect, close: no TLS byte)
    # is not a failed handshake
    time.sleep(0.2)
    m0 = scrape(s)
    base = {k: m0.n("sluice_tls_handshakes_%s_total" % k, lb) for k in names}
    assert base == dict.fromkeys(names, 0), base
    ecdsa = "ECDHE-ECDSA-AES128-GCM-SHA256"
    rsa = "ECDHE-RSA-AES128-GCM-SHA256"
    ders = set()
    sess = None
    for i in range(3):
        sess_i, reused, der = tls_get(s.port, ecdsa, "/e%d" % i)
        assert not reused
        ders.add(("ecdsa", der))
        sess = sess or sess_i
    rsess = None
    for i in range(2):
        sess_i, reused, der = tls_get(s.port, rsa, "/r%d" % i)
        assert not reused
        ders.add(("rsa", der))
        rsess = rsess or sess_i
    assert len({der for _, der in ders}) == 2, "ECDSA and RSA suites got the same certificate"
    for i, (ciph, se) in enumerate([(ecdsa, sess), (ecdsa, sess), (rsa, rsess), (rsa, rsess)]):
        _, reused, _ = tls_get(s.port, ciph, "/res%d" % i, session=se)
        assert reused, "handshake %d was not resumed" % i
    with socket.create_connection((H.HOST, s.port), timeout=5) as raw:
        raw.sendall(b"\x16\x03\x01\x00\x05hello" + b"\x00" * 64)
        try:
            raw.recv(100)
        except OSError:
            pass
    with pytest.raises(ssl.SSLError):
        tls_get(s.port, "AES128-SHA256:@SECLEVEL=0", "/nosuite")
    es = access_lines(s, 9)
    kinds = {e["target"]: e["tls_rest"] for e in es}
    assert all("cert=ecdsa" in kinds["/e%d" % i] for i in range(3))
    assert all("cert=rsa" in kinds["/r%d" % i] for i in range(2))
    assert all("resumed=1" in kinds["/res%d" % i] for i in range(4))
    want = {"full_ecdsa": 3, "full_rsa": 2, "resumed": 4, "failed": 2}
    m = wait_metric(s, lambda m: m.n("sluice_tls_handshakes_failed_total", lb)
                    == base["failed"] + 2, what="2 failed handshakes")
    for k in names:
        assert m.n("sluice_tls_handshakes_%s_total" % k, lb) - base[k] == want[k], k
    st = s.status()["listeners"][0]
    assert st["tls"] is True
    assert {k: st["tls_handshakes"][k] - base[k] for k in names} == want
    assert st["requests"] == 9


# --------------------------------------------------------------------------
# gauges


def test_client_connections_gauge(sluice, demo):
    """5 idle keepalive client connections: client_connections is 5 (the
    admin connection is not counted), and 0 again once they close."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1")], admin=H.admin_config()))
    wait_metric(s, lambda m: m.n("sluice_client_connections", LI) == 0, what="no clients")
    clients = [H.Client(s.port) for _ in range(5)]
    try:
        for i, c in enumerate(clients):
            assert c.request("GET", "/c%d" % i).status == 200
        m = wait_metric(s, lambda m: m.n("sluice_client_connections", LI) == 5, what="5 clients")
        assert s.status()["listeners"][0]["connections"] == 5
        time.sleep(0.3)
        assert scrape(s).n("sluice_client_connections", LI) == 5
    finally:
        for c in clients:
            c.close()
    wait_metric(s, lambda m: m.n("sluice_client_connections", LI) == 0, what="clients gone")
    assert s.status()["listeners"][0]["connections"] == 0


def test_backend_connection_gauges(sluice, demo):
    """3 concurrent slow requests open 3 backend connections; afterwards
    they are idle in the pool: backend_connections_idle 3, busy 0,
    backend_connections 3, /status idle 3 busy 0 connections 3; during the
    requests busy is 3."""
    d = demo(keepalive_ms=60000)
    s = sluice(H.make_config(H.free_port(), [H.server(d.port, "s1", max_connections=8)],
                             admin=H.admin_config()))
    lb = srv("s1")
    with ThreadPoolExecutor(3) as ex:
        fs = [ex.submit(H.http_request, s.port, "GET", "/g%d?sleep_ms=800" % i, timeout=10)
              for i in range(3)]
        m = wait_metric(s, lambda m: m.n("sluice_backend_connections_busy", lb) == 3,
                        what="3 busy")
        assert m.n("sluice_backend_connections_idle", lb) == 0
        assert [f.result(10).status for f in fs] == [200] * 3
    m = wait_metric(s, lambda m: m.n("sluice_backend_connections_idle", lb) == 3, what="3 idle")
    assert m.n("sluice_backend_connections_busy", lb) == 0
    assert m.n("sluice_backend_connections", lb) == 3
    sv = s.status()["backends"][0]["servers"][0]
    assert (sv["idle"], sv["busy"], sv["connections"]) == (3, 0, 3)
    assert d.stats()["active"] == 3 + 1   # + the stats control connection
