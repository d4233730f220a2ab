"""A real browser over HTTP/2: headless Chromium (Debian's `chromium`,
installed by `make test-deps`) loads, through a sluice TLS listener that
offers h2 by ALPN (the default protocols), a page with 50 sub-resources.

What is checked, from three sides:
- the browser: the DOM Chromium dumps once the page has loaded shows all
  50 scripts ran (each counts itself in; an inline script at the end writes
  the count and the ids into the page);
- sluice: 51 access log entries, proto=HTTP/2.0, all 200, and the TLS part
  says alpn=h2;
- the backend: 51 HTTP/1.1 requests, each with a Host header (the
  :authority Chromium sent), in sluice's normalised form.

Chromium runs in its own process group, bounded by a deadline, and is killed
by that group's id when it overstays. A machine where Chromium cannot run at
all fails here with its exit status and stderr, never a silent skip."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import harness as H
import tlsutil as T
from test_smuggling import parse_strict

N = 50
CHROMIUM_DEADLINE = 45.0  # seconds for one page load, start to exit


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    return T.make_pki(tmp_path_factory.mktemp("h2browser-pki"))


def chromium_bin():
    p = shutil.which("chromium") or shutil.which("chromium-browser")
    if p is None:
        pytest.fail("chromium missing: `make test-deps` installs Debian's chromium package")
    return p


def pids_mentioning(marker):
    """PIDs of live processes whose command line contains MARKER (a path
    unique to one Chromium run)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if marker.encode() in cmd and H.pid_alive(int(name)):
            out.append(int(name))
    return out


def run_chromium(url, workdir, deadline=CHROMIUM_DEADLINE):
    """Run headless Chromium on URL with --dump-dom; return (returncode,
    stdout text, stderr text). Killed (its whole process group) past
    DEADLINE; then raise with what it printed.

    HOME and the XDG directories point into a fresh directory of this run,
    so its profile and the crash handlers' database are there, and
    whatever it left running (chrome_crashpad_handler starts sessions of
    its own, out of the process group) is found by that path and killed
    by PID."""
    home = tempfile.mkdtemp(prefix="chromium-", dir=str(workdir))
    udd = os.path.join(home, "profile")
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_CACHE_HOME=os.path.join(home, ".cache"))
    args = [chromium_bin(), "--headless=new", "--disable-gpu", "--ignore-certificate-errors",
            "--user-data-dir=" + udd, "--no-first-run", "--no-default-browser-check",
            "--no-proxy-server", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
            "--disable-breakpad", "--dump-dom", url]
    if os.geteuid() == 0:
        args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    out_path = os.path.join(home, "chromium.out")
    err_path = os.path.join(home, "chromium.err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                             start_new_session=True)
    try:
        try:
            rc = p.wait(timeout=deadline * H.SLOW)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            raise AssertionError("chromium did not finish %s within %.0fs (killed, pgid %d); stderr:\n%s"
                                 % (url, deadline, p.pid, H.read_text(err_path)[-3000:]))
        return rc, H.read_text(out_path), H.read_text(err_path)
    finally:
        # the zygotes, renderers and utility processes share the group
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
        for pid in pids_mentioning(home):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        H.wait_for(lambda: not pids_mentioning(home), 5, what="chromium's processes gone")
        shutil.rmtree(home, ignore_errors=True)


PAGE_SCRIPT = "window.__n = (window.__n || 0) + 1; (window.__ids = window.__ids || []).push(%d);\n"

PAGE = ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>h2 browser</title>"
        "<link rel=\"icon\" href=\"data:,\"></head>\n<body>\n<div id=\"count\">not run</div>\n"
        + "".join("<script src=\"/r/%d.js\"></script>\n" % i for i in range(N))
        + "<script>document.getElementById('count').textContent = 'loaded=' + (window.__n || 0)"
          " + ' ids=' + (window.__ids || []).slice().sort(function (a, b) { return a - b; }).join(',');"
          "</script>\n</body></html>\n")


def page_handler(conn):
    """The page at /, /r/N.js for the scripts, 404 for anything else."""
    while True:
        q = conn.read_request()
        m = re.match(r"^/r/(\d+)\.js$", q.target)
        if q.target == "/":
            conn.respond(PAGE.encode(), headers=[("Content-Type", "text/html; charset=utf-8"),
                                                  ("Cache-Control", "no-store")])
        elif m:
            conn.respond((PAGE_SCRIPT % int(m.group(1))).encode(),
                         headers=[("Content-Type", "application/javascript"),
                                  ("Cache-Control", "no-store")])
        else:
            conn.respond(b"not here", status=404)


def test_chromium_runs_here(tmp_path):
    """Chromium itself works on this machine (a data: page, no network):
    if this fails, the browser test below says nothing about sluice."""
    rc, out, err = run_chromium("data:text/html,<p id=x>chromium-ok</p>", tmp_path)
    assert rc == 0 and "chromium-ok" in out, \
        "chromium cannot run here (exit %s); stdout %r; stderr:\n%s" % (rc, out[:500], err[-3000:])


def test_chromium_loads_50_subresources_over_h2(sluice, recorder, pki, tmp_path):
    be = recorder(page_handler)
    cfg = H.make_config(H.free_port(), [H.server(be.port)],
                        listener={"tls": {"certificates": [pki.ecdsa.entry()]}})
    s = sluice(cfg)
    url = "https://127.0.0.1:%d/" % s.port
    t0 = time.monotonic()
    rc, dom, err = run_chromium(url, tmp_path)
    took = time.monotonic() - t0

    # -- the browser's view
    want = "loaded=%d ids=%s" % (N, ",".join(str(i) for i in range(N)))
    m = re.search(r'<div id="count">([^<]*)</div>', dom)
    assert rc == 0 and m, ("chromium exit %s after %.1fs; DOM %r; stderr:\n%s\n%s"
                           % (rc, took, dom[:1000], err[-3000:], s.diagnostics()))
    assert m.group(1) == want, (m.group(1), s.diagnostics())

    # -- sluice's view: one entry per request, all HTTP/2 over TLS with ALPN h2
    expected = ["/"] + ["/r/%d.js" % i for i in range(N)]
    H.wait_for(lambda: len(s.access_entries()) >= N + 1, 5, what="%d access log entries" % (N + 1))
    es = s.access_entries()
    assert sorted(e["target"] for e in es) == sorted(expected), [e["target"] for e in es]
    assert len(es) == N + 1
    for e in es:
        assert e["proto"] == "HTTP/2.0", e
        assert e["status"] == "200" and e["method"] == "GET", e
        assert e["tls"] is not None and re.search(r"(^|\s)alpn=h2(\s|$)", e["tls_rest"]), e
    # (the scripts were asked for while the page was still being parsed: by
    # then Chromium had one h2 connection, which it does not duplicate)
    assert len({e["cport"] for e in es}) == 1, sorted({e["cport"] for e in es})

    # -- the backend's view: HTTP/1.1, a Host header each, normalised
    qs = be.all_requests()
    assert len(qs) == N + 1, [q.target for q in qs]
    assert sorted(q.target for q in qs) == sorted(expected)
    for q in qs:
        assert q.method == "GET" and q.version == "HTTP/1.1", q
        assert q.header_all("Host") == ["127.0.0.1:%d" % s.port], q.headers
    strict = []
    for conn in be.conns:
        with conn.lock:
            data = bytes(conn.data)
        got, tail = parse_strict(data)
        assert tail == b"", tail[:200]
        strict += got
    assert sorted(q.target for q in strict) == sorted(expected)
