"""Retry of idempotent requests on a stale pooled connection (never POST),
redispatch to another server after a failed connect (any method: nothing
was sent), and active health checks: a dead server is taken out and brought
back; all servers down gives 503 at once."""

import time

import harness as H


def reset_on_second_request(conn):
    """Connection 0 serves its first request, then resets on the next one
    (a backend that dropped the pooled connection). Later connections are
    healthy keepalives."""
    while True:
        q = conn.read_request()
        if conn.index == 0 and len(conn.requests) >= 2:
            conn.reset()
            return
        conn.respond(b"conn=%d %s" % (conn.index, q.target.encode()))


def close_after_first_response(conn):
    """Connection 0 answers once (keepalive framing, no Connection: close)
    then closes it while idle."""
    q = conn.read_request()
    conn.respond(b"conn=%d %s" % (conn.index, q.target.encode()))
    if conn.index == 0:
        conn.close()
        return
    while True:
        q = conn.read_request()
        conn.respond(b"conn=%d %s" % (conn.index, q.target.encode()))


def one_worker(port, **kw):
    return H.make_config(H.free_port(), [H.server(port)], workers=1, **kw)


def test_get_retried_on_reset_pooled_connection(sluice, recorder):
    rb = recorder(reset_on_second_request)
    s = sluice(one_worker(rb.port))
    with H.Client(s.port) as c:
        assert c.request("GET", "/a").body == b"conn=0 /a"
        r = c.request("GET", "/b")
    assert r.status == 200, r
    assert r.body == b"conn=1 /b"
    # proof the first attempt really went over the reused connection
    assert [q.target for q in rb.conns[0].requests] == ["/a", "/b"]
    assert [q.target for q in rb.conns[1].requests] == ["/b"]


def test_head_retried_on_reset_pooled_connection(sluice, recorder):
    rb = recorder(reset_on_second_request)
    s = sluice(one_worker(rb.port))
    with H.Client(s.port) as c:
        assert c.request("GET", "/a").status == 200
        r = c.request("HEAD", "/h")
    assert r.status == 200
    assert [q.method for q in rb.conns[1].requests] == ["HEAD"]


def test_post_not_retried_on_reset_pooled_connection(sluice, recorder):
    rb = recorder(reset_on_second_request)
    s = sluice(one_worker(rb.port))
    with H.Client(s.port) as c:
        assert c.request("GET", "/a").status == 200
        r = c.request("POST", "/p", body=b"payload")
    assert r.status == 502, r
    assert [q.target for q in rb.conns[0].requests] == ["/a", "/p"]
    # the POST was never replayed on another connection
    assert all(q.method != "POST" for cn in rb.conns[1:] for q in cn.requests)


def test_get_after_backend_closed_idle_connection(sluice, recorder):
    """The backend closes the pooled connection while it is idle: the next
    GET succeeds (stale connection detected or request retried)."""
    rb = recorder(close_after_first_response)
    s = sluice(one_worker(rb.port))
    with H.Client(s.port) as c:
        assert c.request("GET", "/a").body == b"conn=0 /a"
        H.wait_for(lambda: rb.conns[0].closed, 3, what="backend to close conn 0")
        r = c.request("GET", "/b")
    assert r.status == 200 and r.body == b"conn=1 /b"
    for i in range(5):  # and sluice keeps using the fresh connection
        assert H.http_request(s.port, "GET", "/n%d" % i).status == 200
    assert rb.conn_count() == 2


# ---------------------------------------------------------------- health checks

HEALTH = {"path": "/health", "interval": "200ms", "timeout": "200ms", "expect_status": 200,
          "rise": 2, "fall": 2}


def which_server(port, size_to_name, n=1):
    out = []
    for _ in range(n):
        r = H.http_request(port, "GET", "/")
        out.append(size_to_name.get(len(r.body), "status%d" % r.status) if r.status == 200
                   else "status%d" % r.status)
    return out


def test_health_check_takes_dead_server_out_and_back(sluice, demo, demo_bin, tmp_path):
    a = demo(size=111, name="a")
    b = demo(size=222, name="b")
    names = {111: "a", 222: "b"}
    cfg = H.make_config(H.free_port(), [H.server(a.port, "a"), H.server(b.port, "b")],
                        health=HEALTH, backend={"connect_timeout": "300ms"})
    s = sluice(cfg)
    H.wait_for(lambda: set(which_server(s.port, names, 4)) == {"a", "b"}, 5,
               what="both servers in rotation")
    # kill a: after fall checks, all traffic goes to b with no errors
    a.kill9()
    H.wait_for(lambda: which_server(s.port, names, 6) == ["b"] * 6, 5,
               what="dead server a taken out of rotation")
    assert which_server(s.port, names, 20) == ["b"] * 20
    # bring a back on the same port: after rise checks it gets traffic again
    a2 = demo(size=111, name="a2", port=a.port)
    H.wait_for(lambda: "a" in which_server(s.port, names, 4), 5, what="server a back in rotation")
    assert all(x in ("a", "b") for x in which_server(s.port, names, 10))
    a2.stop()


def test_health_check_status_down_and_up(sluice, demo):
    """The server answers but /health returns 503: it is taken out; when
    /health returns 200 again it comes back."""
    a = demo(size=111, name="a")
    b = demo(size=222, name="b")
    names = {111: "a", 222: "b"}
    cfg = H.make_config(H.free_port(), [H.server(a.port, "a"), H.server(b.port, "b")],
                        health=HEALTH)
    s = sluice(cfg)
    H.wait_for(lambda: set(which_server(s.port, names, 4)) == {"a", "b"}, 5, what="both up")
    a.health_down()
    H.wait_for(lambda: which_server(s.port, names, 6) == ["b"] * 6, 5, what="a marked down")
    a.health_up()
    H.wait_for(lambda: "a" in which_server(s.port, names, 4), 5, what="a back up")


def test_all_servers_down_503_immediately(sluice, demo):
    a = demo(size=111)
    cfg = H.make_config(H.free_port(), [H.server(a.port, "a")], health=HEALTH,
                        backend={"queue_timeout": "5s"})
    s = sluice(cfg)
    H.wait_for(lambda: H.http_request(s.port, "GET", "/").status == 200, 5, what="server up")
    a.health_down()

    def fast_503():
        t0 = time.monotonic()
        r = H.http_request(s.port, "GET", "/", timeout=10)
        return r.status == 503 and time.monotonic() - t0 < 1.0 and r
    r = H.wait_for(fast_503, 5, what="immediate 503 with all servers down")
    assert r.has_token("connection", "close")
    assert (r.header("content-type") or "").startswith("text/plain")
    a.health_up()
    H.wait_for(lambda: H.http_request(s.port, "GET", "/").status == 200, 5, what="server back")


def test_health_check_requests_reach_backend(sluice, recorder):
    """Active checks are real GETs of health_check.path at about the
    configured interval."""
    rb = recorder()
    cfg = H.make_config(H.free_port(), [H.server(rb.port)], health=HEALTH)
    sluice(cfg)
    qs = H.wait_for(lambda: len(rb.all_requests()) >= 3 and rb.all_requests(), 5,
                    what="3 health checks")
    for q in qs[:3]:
        assert q.method == "GET" and q.target == "/health"


# ------------------------------------------------------ redispatch on connect


def test_refused_connect_goes_to_another_server_any_method(sluice, recorder):
    """s1 refuses (nothing listens), s2 serves; no health checks, so s1 is
    never taken out: round robin sends every other request to s1, and each
    of those is redispatched to s2 with its body intact, POST included."""
    rb = recorder()
    dead = H.free_port()
    s = sluice(H.make_config(H.free_port(), [H.server(dead, name="s1"), H.server(rb.port, name="s2")]))
    for i in range(6):
        body = b"payload-%d" % i
        r = H.http_request(s.port, "POST", "/p%d" % i, body=body)
        assert (r.status, r.body.startswith(b"conn=")) == (200, True), r
        assert rb.all_requests()[-1].body == body
    assert len(rb.all_requests()) == 6
    s.wait_error_log(r"backend connection failed to server s1; trying another server")
    # The last line may reach the file a loop turn after its response.
    entries = H.wait_for(lambda: len(s.access_entries()) >= 6 and s.access_entries(), 3.0,
                         what="6 access log lines")
    assert [e["server"] for e in entries] == ["app/s2"] * 6
    assert all(e["reason"] == "ok" for e in entries)


def test_connect_timeout_goes_to_another_server(sluice, recorder, blackhole):
    rb = recorder()
    s = sluice(H.make_config(H.free_port(), [H.server(blackhole.port, name="s1"),
                                             H.server(rb.port, name="s2")],
                             backend={"connect_timeout": "300ms"}))
    for i in range(2):
        t0 = time.monotonic()
        r = H.http_request(s.port, "GET", "/t%d" % i)
        assert r.status == 200, r
    assert time.monotonic() - t0 < 3
    s.wait_error_log(r"backend connect timeout to server s1; trying another server")


def test_every_server_refusing_is_one_502(sluice):
    """Both servers refuse: one redispatch, then 502 (never a loop)."""
    a, b = H.free_port(), H.free_port()
    s = sluice(H.make_config(H.free_port(), [H.server(a, name="s1"), H.server(b, name="s2")]))
    r = H.http_request(s.port, "GET", "/")
    assert r.status == 502, r
    e = s.wait_access_entry(lambda e: e["target"] == "/")
    assert e["reason"] == "backend_refused"
    log = H.read_text(s.error_log)
    assert log.count("trying another server") == 1, log


def test_redispatch_skips_servers_marked_down(sluice, recorder):
    """With health checks a refused connect marks s1 DOWN at once (passive),
    so later requests go straight to s2 without a failed connect."""
    rb = recorder()
    dead = H.free_port()
    s = sluice(H.make_config(H.free_port(), [H.server(dead, name="s1"), H.server(rb.port, name="s2")],
                             health={"interval": "30s", "timeout": "1s", "rise": 1, "fall": 1}))
    for i in range(6):
        assert H.http_request(s.port, "GET", "/h%d" % i).status == 200
    log = H.read_text(s.error_log)
    assert log.count("trying another server") <= 1, log
