"""Direct tests of the simulated WebLogic member (wlsim.py): the cookie
format a WebLogic proxy plug-in routes on, the session counter, restart
semantics and in-memory replication failover. The persistence tests rely
on these behaviours, so they are pinned here without sluice."""

import re

import harness as H
import wlsim as wl

COOKIE_RE = re.compile(r"^JSESSIONID=([A-Za-z0-9]{52})!(-?\d+|NONE)!(-?\d+|NONE); path=/; HttpOnly$")
BODY_RE = re.compile(r"^count=(\d+) server=(\S+) id=(-?\d+)$")


def body(r):
    """(count, server name, server id) from a wlsim answer."""
    m = BODY_RE.match(r.body.decode())
    assert m, r
    return int(m.group(1)), m.group(2), m.group(3)


def cookie_value(r, name="JSESSIONID"):
    for v in r.header_all("set-cookie"):
        n, _, rest = v.partition("=")
        if n == name:
            return rest.split(";", 1)[0]
    return None


def get(port, value=None, path="/app", name="JSESSIONID", client=None):
    """GET with the session cookie VALUE (if any); on CLIENT's connection
    when given, else a new one."""
    hs = [("Cookie", "%s=%s" % (name, value))] if value else None
    if client is not None:
        return client.request("GET", path, headers=hs)
    return H.http_request(port, "GET", path, headers=hs)


def test_new_session_cookie_format_and_jvmid_header(wlsim):
    s = wlsim(server_id=-1234567890, secondary=987654321)
    r = get(s.port)
    assert r.status == 200, r
    sc = r.header("set-cookie")
    m = COOKIE_RE.match(sc)
    assert m, sc
    assert m.group(2) == "-1234567890" and m.group(3) == "987654321"
    assert r.header("x-weblogic-jvmid") == "-1234567890"
    assert body(r) == (1, s.name, "-1234567890")
    # a random id is a signed 32-bit decimal; no peer gives NONE
    lone = wlsim(jvmid_header=False)
    r = get(lone.port)
    sid, primary, secondary = wl.parse_cookie_value(cookie_value(r))
    assert len(sid) == 52 and -2**31 <= int(primary) < 2**31 and secondary == "NONE"
    assert r.header("x-weblogic-jvmid") is None


def test_counter_climbs_with_cookie_on_keepalive_and_new_connections(wlsim):
    s = wlsim()
    with H.Client(s.port) as c:
        r1 = get(s.port, client=c)
        v = cookie_value(r1)
        r2 = get(s.port, v, client=c)
        assert body(r1)[0] == 1 and body(r2)[0] == 2
        assert r2.header("set-cookie") is None        # unchanged cookie: not reissued
    assert body(get(s.port, v))[0] == 3
    assert body(get(s.port))[0] == 1                  # no cookie: a new session
    reqs = s.all_requests()
    assert [q.method for q in reqs] == ["GET"] * 4
    assert reqs[1].header("cookie") == "JSESSIONID=" + v and reqs[1].target == "/app"
    assert s.conn_count() == 3


def test_path_parameter_session_id_and_custom_cookie_name(wlsim):
    s = wlsim(cookie_name="WLSID")
    v = cookie_value(get(s.port, name="WLSID"), "WLSID")
    assert v is not None
    r = H.http_request(s.port, "GET", "/app/page;jsessionid=%s?x=1" % v)
    assert body(r)[0] == 2, r
    # the default name means nothing to a member configured otherwise
    assert body(get(s.port, v, name="JSESSIONID"))[0] == 1


def test_restart_changes_id_and_forgets_sessions(wlsim):
    s = wlsim()
    v = cookie_value(get(s.port))
    old_id, port = s.server_id, s.port
    s.restart()
    assert s.server_id != old_id and s.port == port
    r = get(s.port, v)
    assert body(r) == (1, s.name, s.server_id)
    sid, primary, _ = wl.parse_cookie_value(cookie_value(r))
    assert sid != wl.parse_cookie_value(v)[0] and primary == s.server_id
    # told to keep them, the session survives and moves to the new id
    v = cookie_value(r)
    s.restart(keep_sessions=True)
    r = get(s.port, v)
    assert body(r)[0] == 2
    assert wl.parse_cookie_value(cookie_value(r))[:2] == (sid, s.server_id)


def test_kill_resets_connections_and_refuses(wlsim):
    s = wlsim()
    with H.Client(s.port) as c:
        assert body(get(s.port, client=c))[0] == 1
        s.kill()
        assert c.wait_closed(2.0) == b""
    assert not H.port_accepts(s.port)
    s.restart()
    assert body(get(s.port))[0] == 1


def test_replication_failover_to_secondary(wlsim):
    store = {}
    a = wlsim("wlsA", replicated=store)
    b = wlsim("wlsB", replicated=store, secondary=a)
    a.secondary = b
    r = get(a.port)
    v = cookie_value(r)
    sid, primary, secondary = wl.parse_cookie_value(v)
    assert (primary, secondary) == (a.server_id, b.server_id)
    assert body(get(a.port, v))[0] == 2
    dead = a.server_id
    a.kill()
    # the proxy sends the request to the secondary: it serves the replica,
    # becomes primary, and names no secondary while its only peer is down
    r = get(b.port, v)
    assert body(r) == (3, "wlsB", b.server_id)
    v = cookie_value(r)
    assert wl.parse_cookie_value(v) == (sid, b.server_id, "NONE")
    assert b.takeovers == [(sid, dead)]
    # the old primary comes back under a new id and becomes the secondary
    a.restart()
    r = get(b.port, v)
    assert body(r)[0] == 4
    assert wl.parse_cookie_value(cookie_value(r)) == (sid, b.server_id, a.server_id)
    # without the shared store a member does not know the session
    c = wlsim("wlsC")
    assert body(get(c.port, cookie_value(r)))[0] == 1


def test_replica_wins_over_stale_copy_when_stickiness_breaks(wlsim):
    """Both members alive, the proxy alternates: each promotes the replica
    (no stale count), and the cookie follows the server that answered."""
    store = {}
    a = wlsim("wlsA", replicated=store)
    b = wlsim("wlsB", replicated=store, secondary=a)
    a.secondary = b
    v = cookie_value(get(a.port))
    assert body(get(a.port, v))[0] == 2
    r = get(b.port, v)
    assert body(r)[0] == 3
    v = cookie_value(r)
    assert wl.parse_cookie_value(v)[1:] == (b.server_id, a.server_id)
    r = get(a.port, v)
    assert body(r)[0] == 4                           # not a's stale 2
    assert wl.parse_cookie_value(cookie_value(r))[1:] == (a.server_id, b.server_id)
