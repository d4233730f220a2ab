"""Weighted balancing, backups and slow start: smooth weighted round-robin's
exact sequences (nginx's), weight 0, weights set at run time through the
admin listener, least connections relative to weight, backup servers taking
over when no primary can be used and giving the traffic back, and slow
start's ramp after a server comes back, measured from the access log."""

import time
from concurrent.futures import ThreadPoolExecutor

import harness as H


def servers_by_name(st, backend="app"):
    be = [b for b in st["backends"] if b["name"] == backend][0]
    return {x["name"]: x for x in be["servers"]}


def sequence(s, prefix, n, any_status=False):
    """N sequential requests, each on its own connection; the servers that
    answered them, in order, from the access log. Each must get 200 unless
    ANY_STATUS."""
    for i in range(n):
        r = H.http_request(s.port, "GET", "%s%04d" % (prefix, i))
        assert any_status or r.status == 200, r
    return answered(s, prefix, n)


def answered(s, prefix, n):
    """The servers that answered the N requests whose targets start with
    PREFIX (numbered in the order they were sent), from the access log."""
    H.wait_for(lambda: len([e for e in s.access_entries() if e["target"].startswith(prefix)]) >= n,
               5, what="%d access log entries" % n)
    es = sorted((e for e in s.access_entries() if e["target"].startswith(prefix)),
                key=lambda e: e["target"])
    return "".join(e["server"].split("/", 1)[1] for e in es)


def cluster(sluice, demo, weights, backend=None, admin=True, **server_extra):
    ds = [demo(keepalive_ms=60000) for _ in weights]
    names = "abcdefgh"
    servers = []
    for i, (d, w) in enumerate(zip(ds, weights)):
        srv = H.server(d.port, names[i])
        if w is not None:
            srv["weight"] = w
        srv.update(server_extra.get(names[i], {}))
        servers.append(srv)
    cfg = H.make_config(H.free_port(), servers, backend=backend,
                        admin=H.admin_config() if admin else None)
    return sluice(cfg), ds


def test_smooth_weighted_round_robin_sequence(sluice, demo):
    """Weights 5, 1, 1: nginx's documented interleaving a a b a c a a, twice
    over; the lighter servers are never sent two requests in a row."""
    s, _ = cluster(sluice, demo, [5, 1, 1])
    assert sequence(s, "/swrr", 14) == "aabacaa" * 2


def test_equal_weights_alternate(sluice, demo):
    """Default weights (1 each): plain rotation, a b c a b c."""
    s, _ = cluster(sluice, demo, [None, None, None])
    assert sequence(s, "/rr", 9) == "abc" * 3


def test_weight_zero_takes_no_new_requests(sluice, demo):
    """weight 0 in the config: the server gets nothing; with every server
    at 0 a request is answered 503 (no server available), the worker still
    serving."""
    s, ds = cluster(sluice, demo, [0, 2])
    assert sequence(s, "/zero", 6) == "bbbbbb"
    assert ds[0].stats()["requests"] == 0
    assert servers_by_name(s.status())["a"]["weight"] == 0
    assert s.admin_post("/servers/app/b/weight", b"0").status == 200
    r = H.http_request(s.port, "GET", "/none")
    assert r.status == 503, r
    e = s.wait_access_entry(lambda e: e["target"] == "/none")
    assert e["reason"] == "no_server_available", e
    assert s.admin_post("/servers/app/b/weight", b"1").status == 200
    assert sequence(s, "/again", 2) == "bb"


def test_admin_sets_weight_at_run_time(sluice, demo):
    """POST /servers/app/a/weight 3: the sequence becomes a a b a (weights
    3, 1) at once; /status and sluice_server_weight show it; bad bodies are
    refused with 400 and change nothing; a reload keeps the override (the
    operator's max_connections does too)."""
    s, _ = cluster(sluice, demo, [1, 1])
    assert sequence(s, "/w1-", 4) == "abab"
    r = s.admin_post("/servers/app/a/weight", b"3\n")
    assert r.status == 200 and b"weight 3" in r.body, r
    assert sequence(s, "/w3-", 8) == "aabaaaba"
    st = servers_by_name(s.status())
    assert st["a"]["weight"] == 3 and st["a"]["effective_weight"] == 3.0, st["a"]
    assert st["b"]["weight"] == 1
    m = s.metrics_text()
    assert 'sluice_server_weight{backend="app",server="a"} 3.00' in m
    assert 'sluice_server_weight{backend="app",server="b"} 1.00' in m
    for bad in (b"257", b"-1", b"", b"three", b"1.5", b"99999999999999999999"):
        r = s.admin_post("/servers/app/a/weight", bad)
        assert r.status == 400 and b"0-256" in r.body, (bad, r)
    assert servers_by_name(s.status())["a"]["weight"] == 3
    s.reload()
    assert servers_by_name(s.status())["a"]["weight"] == 3
    r = s.admin_post("/servers/app/zz/weight", b"2")
    assert r.status == 404, r


def test_leastconn_relative_to_weight(sluice, demo):
    """leastconn, a weight 3 and b weight 1: eight slow requests started
    one after another (each running before the next starts) land six on a
    and two on b: each goes where (busy + 1) / weight is lowest."""
    s, ds = cluster(sluice, demo, [3, 1], backend={"balance": "leastconn"})
    with ThreadPoolExecutor(8) as ex:
        fs = []
        for i in range(8):
            fs.append(ex.submit(H.http_request, s.port, "GET", "/lc%d?sleep_ms=1500" % i, timeout=20))
            H.wait_for(lambda: sum(x["busy"] for x in servers_by_name(s.status()).values()) == i + 1,
                       5, what="%d requests running" % (i + 1))
        st = servers_by_name(s.status())
        busy = {k: v["busy"] for k, v in st.items()}
        assert [f.result(20).status for f in fs] == [200] * 8
    assert busy == {"a": 6, "b": 2}, busy


def test_backup_takes_over_and_gives_back(sluice, demo):
    """a, b primary; c, d backup. With a primary up the backups get
    nothing; with both primaries out (disabled, or down by health check)
    only the first backup serves; all_backups shares among them; a primary
    coming back takes the traffic back at once."""
    s, ds = cluster(sluice, demo, [None, None, None, None],
                    c={"backup": True}, d={"backup": True})
    assert sequence(s, "/p", 4) == "abab"
    assert s.admin_post("/servers/app/a/disable").status == 200
    assert sequence(s, "/one", 3) == "bbb"
    assert s.admin_post("/servers/app/b/drain").status == 200
    assert sequence(s, "/bk", 4) == "cccc"
    assert ds[3].stats()["requests"] == 0
    st = servers_by_name(s.status())
    assert st["c"]["backup"] is True and st["a"]["backup"] is False
    assert s.admin_post("/servers/app/b/enable").status == 200
    assert sequence(s, "/back", 3) == "bbb"


def test_all_backups_share(sluice, demo):
    s, _ = cluster(sluice, demo, [None, 2, 1], backend={"all_backups": True},
                   b={"backup": True}, c={"backup": True})
    assert sequence(s, "/pri", 3) == "aaa"
    assert s.admin_post("/servers/app/a/disable").status == 200
    assert sequence(s, "/all", 6) == "bcbbcb"


def test_backup_after_health_check_failure(sluice, demo):
    """The primary's health checks fail: it goes down and the backup serves;
    its checks pass again: it comes back and the backup is idle again."""
    ds = [demo(keepalive_ms=60000), demo(keepalive_ms=60000)]
    cfg = H.make_config(H.free_port(), [H.server(ds[0].port, "a"), H.server(ds[1].port, "b", backup=True)],
                        health={"path": "/health", "interval": "200ms", "timeout": "150ms",
                                "expect_status": 200, "rise": 1, "fall": 1},
                        admin=H.admin_config())
    s = sluice(cfg)
    assert sequence(s, "/up", 2) == "aa"
    ds[0].health_down()
    H.wait_for(lambda: servers_by_name(s.status())["a"]["health"] == "down", 5, what="a down")
    assert sequence(s, "/down", 3) == "bbb"
    ds[0].health_up()
    H.wait_for(lambda: servers_by_name(s.status())["a"]["health"] == "up", 5, what="a up")
    assert sequence(s, "/again", 2) == "aa"


def test_slow_start_ramps_weight_and_max_connections(sluice, demo):
    """slow_start 3s, a and b of equal weight, b enabled again after a
    disable: for its first 600 ms b gets at most a fifth of the requests
    (its weight is on the ramp); /status shows its effective weight and
    max_connections below full; once the 3 s are over the two alternate
    again. The ramp is read from the access log's timestamps."""
    s, _ = cluster(sluice, demo, [8, 8], backend={"slow_start": "3s"},
                   a={"max_connections": 40}, b={"max_connections": 40})
    assert sequence(s, "/before", 4) == "abab"    # no ramp at start
    assert s.admin_post("/servers/app/b/disable").status == 200
    t0 = time.monotonic()
    assert s.admin_post("/servers/app/b/enable").status == 200
    early = []
    while time.monotonic() - t0 < 0.6:
        r = H.http_request(s.port, "GET", "/early%05d" % len(early))
        assert r.status == 200
        early.append(r)
    st = servers_by_name(s.status())["b"]
    assert 0 < st["effective_weight"] < 8 and st["max_connections"] < 40, st
    while time.monotonic() - t0 < 3.2:
        time.sleep(0.05)
    st = servers_by_name(s.status())["b"]
    assert st["effective_weight"] == 8 and st["max_connections"] == 40, st
    late = sequence(s, "/late", 20)
    early_seq = answered(s, "/early", len(early))
    assert len(early) >= 10, "too few requests in 600 ms to judge the ramp"
    assert early_seq.count("b") <= len(early) / 5, early_seq
    assert abs(late.count("b") - 10) <= 1, late


# --------------------------------------------------------------------------
# passive outlier ejection


def failing(status=500, every=1):
    """A recorder handler answering STATUS to every EVERY-th request (200
    otherwise), keep-alive."""
    def handler(conn):
        n = 0
        while True:
            conn.read_request()
            n += 1
            conn.respond(b"x", status=status if n % every == 0 else 200)
    return handler


def ejection_cluster(sluice, recorder, handler_a, handler_b=None, eject=None, backend=None):
    a, b = recorder(handler_a), recorder(handler_b)
    be = {"eject": eject or {"consecutive_5xx": 3, "duration": "1500ms"}}
    be.update(backend or {})
    s = sluice(H.make_config(H.free_port(), [H.server(a.port, "a"), H.server(b.port, "b")],
                             backend=be, admin=H.admin_config()))
    return s, a, b


def test_consecutive_5xx_eject_a_server_then_it_returns(sluice, recorder):
    """a answers 500 to everything: after its third in a row it is ejected
    (logged, counted, /status and sluice_server_up show it) and b gets every
    request; after the duration a is back in rotation."""
    s, a, b = ejection_cluster(sluice, recorder, failing(500))
    seq = sequence(s, "/e", 10, any_status=True)
    assert seq == "ababab" + "bbbb", seq
    s.wait_error_log(r"backend app server a EJECTED for 1500 ms: 3 consecutive 5xx")
    st = servers_by_name(s.status())
    assert st["a"]["ejected"] is True and st["b"]["ejected"] is False
    m = s.metrics_text()
    assert 'sluice_server_up{backend="app",server="a"} 0' in m
    assert 'sluice_server_ejections_total{backend="app",server="a"} 1' in m, m
    H.wait_for(lambda: not servers_by_name(s.status())["a"]["ejected"], 5, what="a back")
    assert "a" in sequence(s, "/back", 4, any_status=True)


def test_success_resets_the_count(sluice, recorder):
    """Every second answer of a is a 500: never three in a row, never
    ejected."""
    s, a, b = ejection_cluster(sluice, recorder, failing(500, every=2))
    assert sequence(s, "/r", 16, any_status=True) == "ab" * 8
    assert servers_by_name(s.status())["a"]["ejected"] is False


def test_sluices_own_502_counts_as_5xx(sluice, recorder):
    """A server that resets every connection (sluice answers 502) is
    ejected like one that answers 5xx itself."""
    def reset(conn):
        conn.read_request()
        conn.reset()
    s, a, b = ejection_cluster(sluice, recorder, reset, eject={"consecutive_5xx": 2, "duration": "5s"},
                               backend={"balance": "roundrobin"})
    got = [H.http_request(s.port, "GET", "/x%d" % i).status for i in range(8)]
    assert got.count(502) <= 2, got
    s.wait_error_log(r"server a EJECTED for 5000 ms: 2 consecutive 5xx")
    assert got[-4:] == [200] * 4, got


def test_consecutive_timeouts_eject(sluice, recorder):
    """a never answers: two response timeouts in a row eject it."""
    def hang(conn):
        conn.read_request()
        conn.hang()
    s, a, b = ejection_cluster(sluice, recorder, hang, eject={"consecutive_5xx": 0, "consecutive_timeouts": 2,
                                                              "duration": "10s"},
                               backend={"response_timeout": "300ms"})
    got = [H.http_request(s.port, "GET", "/t%d" % i, timeout=5).status for i in range(6)]
    assert got.count(504) == 2, got
    s.wait_error_log(r"server a EJECTED for 10000 ms: 2 consecutive timeouts")
    assert got[-2:] == [200, 200], got


def test_max_ejected_percent_keeps_servers_in(sluice, recorder):
    """Both servers fail; with max_ejected_percent 50 only the first to
    reach the count is ejected, the other is kept in (and says so)."""
    s, a, b = ejection_cluster(sluice, recorder, failing(503), failing(503),
                               eject={"consecutive_5xx": 2, "duration": "10s", "max_ejected_percent": 50})
    got = [H.http_request(s.port, "GET", "/m%d" % i).status for i in range(8)]
    assert got == [503] * 8, got
    s.wait_error_log(r"server b: 2 consecutive 5xx, but 1 of 2 servers are ejected already \(max_ejected_percent 50\): kept in")
    st = servers_by_name(s.status())
    assert [st["a"]["ejected"], st["b"]["ejected"]] == [True, False]
