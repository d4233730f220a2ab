"""Smoke tests of the Tomcat 10 fixture (tomcat.py): real JVMs with their
own CATALINA_BASE, counting in the HTTP session, jvmRoute in the session
id, alone and behind sluice. The persistence tests build on these
guarantees, so they are checked here first."""

import re

import harness as H

BODY_RE = re.compile(r"^count=(\d+) route=(\S+) session=(\S+)$")


def parse_body(r):
    """(count, route, session id) from a counter.jsp answer."""
    m = BODY_RE.match(r.body.decode())
    assert m, r
    return int(m.group(1)), m.group(2), m.group(3)


def set_cookie(r, name="JSESSIONID"):
    """The value R sets for cookie NAME, or None."""
    for v in r.header_all("set-cookie"):
        n, _, rest = v.partition("=")
        if n.strip() == name:
            return rest.split(";", 1)[0]
    return None


def get_with_jar(port, jar, path="/counter.jsp"):
    """One request on a new connection, sending and updating the cookie
    JAR (a dict), like a browser would."""
    hs = [("Cookie", "; ".join("%s=%s" % kv for kv in jar.items()))] if jar else None
    r = H.http_request(port, "GET", path, headers=hs)
    v = set_cookie(r)
    if v is not None:
        jar["JSESSIONID"] = v
    return r


def test_session_counts_through_sluice_with_route_suffix(tomcat, sluice):
    t = tomcat(jvm_route="alpha")
    s = sluice(H.make_config(H.free_port(), [H.server(t.port, name="alpha")]))
    jar = {}
    seen = []
    for want in (1, 2, 3):
        r = get_with_jar(s.port, jar)
        assert r.status == 200, r
        assert r.header("content-type", "").startswith("text/plain"), r
        count, route, sid = parse_body(r)
        assert (count, route) == (want, "alpha"), r
        seen.append(sid)
    assert len(set(seen)) == 1, seen
    assert seen[0].endswith(".alpha"), seen
    assert jar["JSESSIONID"] == seen[0]


def test_two_routes_answer_directly_and_keep_apart(tomcat):
    a = tomcat(jvm_route="ra", start=False)
    b = tomcat(jvm_route="rb", start=False)
    for t in (a.launch(), b.launch()):     # overlap the two JVM startups
        t.wait_ready()
    assert a.port != b.port and a.pid != b.pid
    ra, rb = a.get(), b.get()
    ca, route_a, sid_a = parse_body(ra)
    cb, route_b, sid_b = parse_body(rb)
    assert (ca, route_a) == (1, "ra") and sid_a.endswith(".ra")
    assert (cb, route_b) == (1, "rb") and sid_b.endswith(".rb")
    # a's session means nothing to b: b starts its own (this is what makes a
    # lost persistence visible in a test)
    r = b.get(headers=[("Cookie", "JSESSIONID=" + sid_a)])
    cb2, _, sid_b2 = parse_body(r)
    assert cb2 == 1 and sid_b2.endswith(".rb") and set_cookie(r) == sid_b2
    # and a still has it; the path-parameter form works too
    r = a.get("/counter.jsp;jsessionid=" + sid_a)
    assert parse_body(r) == (2, "ra", sid_a), r


def test_kill_loses_sessions_and_restart_keeps_port_and_route(tomcat):
    t = tomcat(jvm_route="rk")
    jar = {}
    assert parse_body(get_with_jar(t.port, jar))[0] == 1
    assert parse_body(get_with_jar(t.port, jar))[0] == 2
    port, pid = t.port, t.pid
    t.kill()
    assert not H.pid_alive(pid)
    assert not H.port_accepts(port)
    t.restart()
    assert t.port == port and t.pid != pid
    count, route, sid = parse_body(get_with_jar(t.port, jar))
    assert (count, route) == (1, "rk") and sid.endswith(".rk")
    # a graceful restart loses them too (persist_sessions is off by default)
    t.restart()
    assert parse_body(get_with_jar(t.port, jar))[0] == 1
    t.stop()
    assert not t.alive() and not H.port_accepts(port)


def test_persist_sessions_survive_graceful_restart_not_kill(tomcat):
    t = tomcat(jvm_route="rp", persist_sessions=True)
    jar = {}
    get_with_jar(t.port, jar)
    sid = parse_body(get_with_jar(t.port, jar))[2]
    t.restart()                                   # graceful: SESSIONS.ser
    assert parse_body(get_with_jar(t.port, jar)) == (3, "rp", sid)
    t.kill()
    t.start()
    assert parse_body(get_with_jar(t.port, jar))[0] == 1
