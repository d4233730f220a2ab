"""Content routing (listeners[].routes): which backend got which request,
the exact bytes it received, redirects' exact Location, fixed responses
byte for byte, header edits both ways, first match wins, paths matched
after the same normalisation that is forwarded (so %2e%2e, //, ;params
cannot bypass a route), refused escapes, the route in the access log and in
the hook, and `sluice -t` errors for routes that are wrong."""

import json
import re
import socket
import subprocess

import pytest

import harness as H


def two_backends(recorder, routes, listener_extra=None, **kw):
    """Backends app (recorder a) and static (recorder b); the listener's
    default is app."""
    a, b = recorder(), recorder()
    cfg = H.make_config(H.free_port(), [H.server(a.port, "a")], **kw)
    cfg["backends"].append(dict(cfg["backends"][0], name="static",
                                servers=[H.server(b.port, "b")]))
    cfg["listeners"][0]["routes"] = routes
    cfg["listeners"][0].update(listener_extra or {})
    return cfg, a, b


def got(rec):
    return [(q.method, q.target) for q in rec.all_requests()]


def raw(port, data, timeout=5):
    """Send DATA, read until the server closes (the request says close)."""
    s = socket.create_connection((H.HOST, port), timeout=timeout)
    s.sendall(data)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    return out


ROUTES = [
    {"name": "maint", "match": {"path": {"exact": "/maintenance"}},
     "respond": {"status": 503, "body": "<h1>back soon</h1>\n", "content_type": "text/html"}},
    {"name": "admin-block", "match": {"path": {"prefix": "/admin"}}, "respond": {"status": 403, "body": "no\n"}},
    {"name": "static", "match": {"path": {"prefix": "/static/"}, "methods": ["GET", "HEAD"]},
     "backend": "static", "set_request_headers": [{"name": "X-Route", "value": "static"}],
     "remove_request_headers": ["X-Debug"],
     "set_response_headers": [{"name": "Cache-Control", "value": "max-age=60"}],
     "remove_response_headers": ["X-Powered-By"]},
    {"name": "img-host", "match": {"host": ["img.example.com", "*.cdn.example.com"]}, "backend": "static"},
    {"name": "beta", "match": {"cookies": [{"name": "beta", "equals": "on"}]}, "backend": "static"},
    {"name": "canary", "match": {"headers": [{"name": "X-Canary", "regex": "^(yes|1)$"}]}, "backend": "static"},
    {"name": "old", "match": {"path": {"regex": "^/old/"}},
     "redirect": {"status": 301, "location": "https://{host}/new{path}{query}"}},
]


def test_routing_table_sends_each_request_where_it_belongs(sluice, recorder):
    cfg, a, b = two_backends(recorder, ROUTES)
    s = sluice(cfg)
    cases = [
        ("GET", "/static/app.css", {}, "static"),
        ("HEAD", "/static/x", {}, "static"),
        ("POST", "/static/x", {}, "app"),          # methods: GET, HEAD only
        ("GET", "/staticfile", {}, "app"),         # not the /static subtree
        ("GET", "/", {"Host": "IMG.example.com"}, "static"),
        ("GET", "/", {"Host": "a.b.cdn.example.com:8080"}, "static"),
        ("GET", "/", {"Host": "cdn.example.com"}, "app"),  # *. needs a label before it
        ("GET", "/", {"Cookie": "x=1; beta=on"}, "static"),
        ("GET", "/", {"Cookie": "beta=off"}, "app"),
        ("GET", "/", {"X-Canary": "yes"}, "static"),
        ("GET", "/", {"X-Canary": "no"}, "app"),
        ("GET", "/api/x", {}, "app"),
    ]
    for i, (m, path, hdrs, want) in enumerate(cases):
        tgt = path + ("&" if "?" in path else "?") + "n=%d" % i
        r = H.http_request(s.port, m, tgt, headers=hdrs)
        assert r.status == 200, (i, r)
        e = s.wait_access_entry(lambda e, t=tgt: e["target"] == t)
        assert e["server"].startswith(want + "/"), (i, path, hdrs, e)
    assert [t for _, t in got(b)] == [c[1] + "?n=%d" % i for i, c in enumerate(cases) if c[3] == "static"]


def test_route_header_edits_reach_backend_and_client(sluice, recorder):
    def handler(conn):
        while True:
            q = conn.read_request()
            conn.respond(b"css", headers=[("X-Powered-By", "Servlet/5"), ("X-Keep", "1")])
    cfg, a, _ = two_backends(recorder, ROUTES)
    b = recorder(handler)
    cfg["backends"][1]["servers"] = [H.server(b.port, "b")]
    s = sluice(cfg)
    r = H.http_request(s.port, "GET", "/static/a.css", headers={"X-Debug": "1", "X-Route": "spoofed"})
    assert r.status == 200 and r.body == b"css"
    q = b.all_requests()[0]
    assert q.header_all("X-Route") == ["static"]
    assert q.header("X-Debug") is None
    assert r.header("Cache-Control") == "max-age=60"
    assert r.header("X-Powered-By") is None and r.header("X-Keep") == "1"
    e = s.wait_access_entry(lambda e: e["target"] == "/static/a.css")
    assert e["route"] == "static", e


def test_respond_is_exact_bytes_and_keeps_the_connection(sluice, recorder):
    cfg, a, b = two_backends(recorder, ROUTES)
    s = sluice(cfg)
    with H.Client(s.port) as c:
        r = c.request("GET", "/maintenance")
        assert r.status == 503 and r.body == b"<h1>back soon</h1>\n"
        assert r.header("Content-Type") == "text/html"
        r2 = c.request("GET", "/api/after")    # same connection
        assert r2.status == 200
    out = raw(s.port, b"GET /maintenance HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out == (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nContent-Length: 19\r\n"
                   b"Connection: close\r\n\r\n<h1>back soon</h1>\n"), out
    assert got(a) == [("GET", "/api/after")] and got(b) == []
    e = s.wait_access_entry(lambda e: e["target"] == "/maintenance")
    assert int(e["status"]) == 503 and e["reason"] == "route_respond" and e["route"] == "maint", e


def test_redirect_location_is_exact(sluice, recorder):
    routes = [{"name": "https", "redirect": {"status": 308, "location": "https://{host}{path}{query}"}}]
    cfg, a, b = two_backends(recorder, routes)
    s = sluice(cfg)
    for target, host, loc in [
        ("/a/b?x=1&y=2", "shop.example.com:8080", "https://shop.example.com/a/b?x=1&y=2"),
        ("/", "h.example", "https://h.example/"),
        ("/a/../c;jsessionid=1", "h", "https://h/c;jsessionid=1"),
    ]:
        r = H.http_request(s.port, "GET", target, headers={"Host": host})
        assert r.status == 308, r
        assert r.header("Location") == loc, (target, r.headers)
    out = raw(s.port, b"GET /old?x=1 HTTP/1.0\r\n\r\n")     # no Host: the address it reached
    assert b"\r\nLocation: https://127.0.0.1/old?x=1\r\n" in out, out
    cfg2, _, _ = two_backends(recorder, ROUTES)
    s2 = sluice(cfg2)
    r = H.http_request(s2.port, "GET", "/old/page?q=1", headers={"Host": "w.example"})
    assert r.status == 301 and r.header("Location") == "https://w.example/new/old/page?q=1"
    assert got(a) == []


@pytest.mark.parametrize("target,want_status,want_route,forwarded", [
    ("/static/%2e%2e/admin/users", 403, "admin-block", None),
    ("/static/%2E%2e/admin", 403, "admin-block", None),
    ("/static/..;/admin", 403, "admin-block", None),
    ("/static//../admin", 403, "admin-block", None),
    ("//admin", 403, "admin-block", None),
    ("/admin;jsessionid=1/x", 403, "admin-block", None),
    ("/./admin", 403, "admin-block", None),
    ("/static/./a//b.css", 200, "static", "/static/a/b.css"),
    ("/static/%7euser/%61.css", 200, "static", "/static/~user/a.css"),
    ("/api/%2e%2e/static/x", 200, "static", "/static/x"),
])
def test_encoded_paths_cannot_bypass_a_route(sluice, recorder, target, want_status, want_route, forwarded):
    cfg, a, b = two_backends(recorder, ROUTES)
    s = sluice(cfg)
    r = H.http_request(s.port, "GET", target)
    assert r.status == want_status, (target, r)
    e = s.wait_access_entry(lambda e: True)
    assert e["route"] == want_route, e
    if forwarded:
        assert got(b) == [("GET", forwarded)]
    else:
        assert got(a) == [] and got(b) == []


@pytest.mark.parametrize("target", ["/static/a%2fb", "/a%5C..%5Cadmin", "/a%00", "/bad%zz", "/bad%2"])
def test_refused_escapes_get_400_and_reach_no_backend(sluice, recorder, target):
    cfg, a, b = two_backends(recorder, ROUTES)
    s = sluice(cfg)
    r = H.http_request(s.port, "GET", target)
    assert r.status == 400, (target, r)
    e = s.wait_access_entry(lambda e: True)
    assert e["reason"] == "path_refused", e
    assert got(a) == [] and got(b) == []
    assert H.http_request(s.port, "GET", "/still-serving").status == 200


def test_first_match_wins_and_default_backend(sluice, recorder):
    routes = [
        {"name": "one", "match": {"path": {"prefix": "/x"}, "headers": [{"name": "X-A", "present": True}]},
         "backend": "static"},
        {"name": "two", "match": {"path": {"prefix": "/x/y"}}, "backend": "app"},
        {"name": "three", "match": {"path": {"prefix": "/x"}}, "backend": "static"},
    ]
    cfg, a, b = two_backends(recorder, routes)
    s = sluice(cfg)
    for tgt, hdrs, want_route, want_be in [
        ("/x/y/1", {"X-A": "1"}, "one", "static"),
        ("/x/y/2", {}, "two", "app"),
        ("/x/z", {}, "three", "static"),
        ("/elsewhere", {}, None, "app"),
    ]:
        assert H.http_request(s.port, "GET", tgt, headers=hdrs).status == 200
        e = s.wait_access_entry(lambda e, t=tgt: e["target"] == t)
        assert e.get("route") == want_route and e["server"].startswith(want_be + "/"), e


def test_hook_sees_the_route_and_may_still_override(sluice, recorder, tmp_path):
    script = tmp_path / "r.lua"
    script.write_text(
        "function inspect(req)\n"
        "  req:set_header('X-Seen-Route', tostring(req:route()))\n"
        "  if req:header('X-Override') then req:set_backend('app') end\n"
        "end\n")
    cfg, a, b = two_backends(recorder, ROUTES, listener_extra={"inspect": {"script": str(script)}})
    s = sluice(cfg)
    assert H.http_request(s.port, "GET", "/static/1").status == 200
    assert H.http_request(s.port, "GET", "/static/2", headers={"X-Override": "1"}).status == 200
    assert H.http_request(s.port, "GET", "/other").status == 200
    assert [q.header("X-Seen-Route") for q in b.all_requests()] == ["static"]
    assert [(q.target, q.header("X-Seen-Route")) for q in a.all_requests()] == [("/static/2", "static"),
                                                                                ("/other", "nil")]


def test_text_access_log_names_the_route(sluice, recorder, tmp_path):
    log = tmp_path / "access.log"
    cfg, a, b = two_backends(recorder, ROUTES, access_log=str(log))
    s = sluice(cfg)
    assert H.http_request(s.port, "GET", "/static/t").status == 200
    assert H.http_request(s.port, "GET", "/plain").status == 200
    H.wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2, 5, what="2 log lines")
    lines = log.read_text().splitlines()
    assert " route=static reason=ok" in [l for l in lines if "/static/t" in l][0]
    assert " route=" not in [l for l in lines if "/plain" in l][0]


BASE = """workers: 1
listeners:
  - address: 127.0.0.1:%d
    backend: app
    routes:
%s
backends:
  - name: app
    servers:
      - address: 127.0.0.1:9
"""


@pytest.mark.parametrize("routes,line,key,words", [
    ("      - match: {path: {prefix: /a}}\n        backend: nope\n", 7, "listeners[0].routes[0].backend",
     "unknown backend"),
    ("      - name: all\n      - name: never\n        match: {path: {exact: /x}}\n", 7, "listeners[0].routes[1]",
     "can never match"),
    ("      - {name: root, match: {path: {prefix: /}}}\n      - {name: never}\n", 7, "listeners[0].routes[1]",
     "can never match"),
    ("      - match: {path: {regex: '^/(a'}}\n", 6, "listeners[0].routes[0].match.path.regex", "bad regex"),
    ("      - match: {headers: [{name: X-A, regex: '[z-a]'}]}\n", 6,
     "listeners[0].routes[0].match.headers[0].regex", "bad regex"),
    ("      - redirect: {location: 'https://{hots}{path}'}\n", 6, "listeners[0].routes[0].redirect.location",
     "unknown substitution"),
    ("      - redirect: {status: 200, location: '/x'}\n", 6, "listeners[0].routes[0].redirect.status",
     "301, 302"),
    ("      - {backend: app, respond: {body: x}}\n", 6, "listeners[0].routes[0]", "one action"),
    ("      - set_request_headers: [{name: X-Forwarded-For, value: x}]\n", 6,
     "listeners[0].routes[0].set_request_headers[0].name", "cannot be edited"),
    ("      - set_response_headers: [{name: Content-Length, value: '1'}]\n", 6,
     "listeners[0].routes[0].set_response_headers[0].name", "cannot be edited"),
    ("      - match: {methods: [get]}\n", 6, "listeners[0].routes[0].match.methods[0]", "unknown method"),
    ("      - match: {path: {prefix: '/a%2e'}}\n", 6, "listeners[0].routes[0].match.path.prefix", "escapes"),
    ("      - match: {host: ['a.example.com:80']}\n", 6, "listeners[0].routes[0].match.host[0]", "bad host"),
    ("      - respond: {status: 204}\n", 6, "listeners[0].routes[0].respond.status", "no body"),
])
def test_config_check_reports_bad_routes(sluice_bin, tmp_path, routes, line, key, words):
    p = tmp_path / "bad.yaml"
    p.write_text(H.with_user(BASE % (H.free_port(), routes.rstrip("\n"))))
    r = subprocess.run([sluice_bin, "-t", "-c", str(p)], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1, r.stderr
    rx = re.compile(r"^%s:(\d+):(\d+): (\S+): (.+)$" % re.escape(str(p)), re.M)
    errs = [(int(m.group(1)), m.group(3), m.group(4)) for m in rx.finditer(r.stderr)]
    assert any(l == line and k == key and words in msg for l, k, msg in errs), (errs, r.stderr)


def test_per_route_response_timeout_body_limit_and_inspect(sluice, recorder, tmp_path):
    """A route's response_timeout replaces the backend's for its requests
    only; its max_body_size likewise (0: none, even under a listener-wide
    limit); inspect: off skips the listener's hook for it."""
    def slow(conn):
        while True:
            q = conn.read_request()
            if q.target.startswith("/slow"):
                conn.hang(2)
                return
            conn.respond(b"ok")
    script = tmp_path / "deny.lua"
    script.write_text("function inspect(req) if req:header('X-Deny') then req:deny(403) end end\n")
    routes = [
        {"name": "quick", "match": {"path": {"prefix": "/slow/quick"}}, "response_timeout": "300ms"},
        {"name": "small", "match": {"path": {"prefix": "/upload/small"}}, "max_body_size": "10"},
        {"name": "big", "match": {"path": {"prefix": "/upload/big"}}, "max_body_size": "0"},
        {"name": "public", "match": {"path": {"prefix": "/public"}}, "inspect": "off"},
    ]
    a = recorder(slow)
    cfg = H.make_config(H.free_port(), [H.server(a.port, "a")], limits={"max_body_size": "100"},
                        backend={"response_timeout": "5s"})
    cfg["listeners"][0]["routes"] = routes
    cfg["listeners"][0]["inspect"] = {"script": str(script)}
    s = sluice(cfg)
    # inspect: off
    assert H.http_request(s.port, "GET", "/public/x", headers={"X-Deny": "1"}).status == 200
    assert H.http_request(s.port, "GET", "/private", headers={"X-Deny": "1"}).status == 403
    # response_timeout 300ms on the route (the backend's is 5 s)
    import time
    t0 = time.monotonic()
    r = H.http_request(s.port, "GET", "/slow/quick", timeout=10)
    assert r.status == 504 and time.monotonic() - t0 < 2, r
    # max_body_size
    assert H.http_request(s.port, "POST", "/upload/small/a", body=b"x" * 11).status == 413
    assert H.http_request(s.port, "POST", "/upload/big/a", body=b"x" * 1000).status == 200
    assert H.http_request(s.port, "POST", "/public/a", body=b"x" * 101).status == 413       # listener's limit
    assert H.http_request(s.port, "POST", "/public/b", body=b"x" * 100).status == 200


def test_local_answers_with_bodies_head_and_pipelining(sluice, recorder):
    """A respond route: a POST's body is read and dropped and the
    connection goes on; HEAD gets the head only; two pipelined requests,
    the first answered by the route and the second forwarded, both answered
    in order; a body announced with Expect: 100-continue is not invited
    (no 100), the answer comes at once and the connection closes."""
    cfg, a, b = two_backends(recorder, ROUTES)
    s = sluice(cfg)
    with H.Client(s.port) as c:
        r = c.request("POST", "/maintenance", body=b"x" * 5000)
        assert r.status == 503 and r.body == b"<h1>back soon</h1>\n"
        r = c.request("HEAD", "/maintenance")
        assert r.status == 503 and r.body == b"" and r.header("Content-Length") == "19"
        r = c.request("GET", "/after")
        assert r.status == 200
    out = raw(s.port, b"GET /maintenance HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    first = out.index(b"HTTP/1.1 503 ")
    second = out.index(b"HTTP/1.1 200 ")
    assert first == 0 and second > first, out
    assert got(a) == [("GET", "/after"), ("GET", "/next")], got(a)
    out = raw(s.port, b"POST /maintenance HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                      b"Expect: 100-continue\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 503 ") and b"100 Continue" not in out, out
    assert b"Connection: close" in out


def test_route_counters_in_metrics_and_status(sluice, recorder):
    """Each route's requests, by status class, in /metrics (a route label)
    and in /status; a route's name keeps its counters across a reload, and
    requests no route matched are in no route's."""
    cfg, a, b = two_backends(recorder, ROUTES, admin=H.admin_config(), workers=2)
    s = sluice(cfg)
    for path in ("/static/a", "/static/b", "/maintenance", "/old/x", "/other"):
        H.http_request(s.port, "GET", path)
    H.wait_for(lambda: len(s.access_entries()) >= 5, 5, what="5 access log entries")
    m = s.metrics_text()
    want = {
        ('route_requests_total{listener="http",route="static"}', 2),
        ('route_responses_total{listener="http",route="static",class="2xx"}', 2),
        ('route_responses_total{listener="http",route="maint",class="5xx"}', 1),
        ('route_responses_total{listener="http",route="old",class="3xx"}', 1),
        ('route_requests_total{listener="http",route="beta"}', 0),
    }
    for series, n in want:
        assert "\nsluice_%s %d\n" % (series, n) in m, (series, m[-3000:])
    li = s.status()["listeners"][0]
    routes = {r["name"]: r for r in li["routes"]}
    assert [r["name"] for r in li["routes"]] == [r["name"] for r in ROUTES]
    assert routes["static"]["requests"] == 2 and routes["static"]["backend"] == "static"
    assert routes["static"]["responses"]["2xx"] == 2 and routes["static"]["bytes_out"] > 0
    assert routes["maint"]["action"] == "respond" and routes["maint"]["backend"] is None
    assert routes["old"]["responses"]["3xx"] == 1
    assert sum(r["requests"] for r in li["routes"]) == 4        # /other matched none
    s.reload(cfg)
    H.http_request(s.port, "GET", "/static/c")
    H.wait_for(lambda: {r["name"]: r for r in s.status()["listeners"][0]["routes"]}["static"]["requests"] == 3,
               5, what="the static route's count after a reload")


def test_route_inspect_override_runs_another_script_and_mode(sluice, recorder, tmp_path):
    """inspect_override: the route's requests run its own script in its own
    mode (here shadow, and with a body), the others the listener's; a route
    with an override on a listener without inspect is inspected alone."""
    main = tmp_path / "main.lua"
    main.write_text("function inspect(req) if req:header('X-Deny') then req:deny(403) end end\n")
    api = tmp_path / "api.lua"
    api.write_text("function inspect(req)\n"
                   "  req:set_header('X-Api-Script', 'yes')\n"
                   "  if (req:body() or ''):find('DROP') then req:tag('sqli') req:deny(403) end\n"
                   "end\n")
    routes = [
        {"name": "api", "match": {"path": {"prefix": "/api"}},
         "inspect_override": {"script": str(api), "mode": "shadow", "body": "1k"}},
        {"name": "enforced", "match": {"path": {"prefix": "/strict"}},
         "inspect_override": {"script": str(api), "body": "64"}},
    ]
    a = recorder()
    cfg = H.make_config(H.free_port(), [H.server(a.port, "a")])
    cfg["listeners"][0]["routes"] = routes
    cfg["listeners"][0]["inspect"] = {"script": str(main)}
    s = sluice(cfg)
    # the listener's script everywhere else
    assert H.http_request(s.port, "GET", "/other", headers={"X-Deny": "1"}).status == 403
    # the route's script: not the listener's (X-Deny means nothing to it), its body seen, shadow
    r = H.http_request(s.port, "POST", "/api/q", headers={"X-Deny": "1"}, body=b"x=1; DROP TABLE t")
    assert r.status == 200, r
    q = a.all_requests()[-1]
    assert q.target == "/api/q" and q.header("x-api-script") is None    # shadow: no edit applied
    assert q.body == b"x=1; DROP TABLE t"
    e = s.wait_access_entry(lambda e: e["target"] == "/api/q")
    assert e["inspect"] == "would_deny" and e["tags"] == "sqli" and e["route"] == "api", e
    # the same script enforcing on another route
    assert H.http_request(s.port, "POST", "/strict/q", body=b"DROP").status == 403
    r = H.http_request(s.port, "GET", "/strict/ok")
    assert r.status == 200 and a.all_requests()[-1].header("x-api-script") == "yes"
    # sluice -t checks the route's script like the listener's
    bad = tmp_path / "bad.lua"
    bad.write_text("function inspect(req) syntax error here\n")
    routes[0]["inspect_override"]["script"] = str(bad)
    t = sluice(cfg, start=False, name="bad")
    out = t.check()
    assert out.returncode == 1 and re.search(r"listeners\[0\]\.routes\[0\]\.inspect_override\.script: .*bad\.lua",
                                             out.stderr), out.stderr
