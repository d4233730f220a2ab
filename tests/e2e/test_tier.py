"""A tier of two sluice instances behind a layer-4 balancer, on this machine.

HAProxy from Debian in TCP mode (`send-proxy-v2`, roundrobin, `option
httpchk GET /ready` on each instance's traffic port — its `monitor_uri`,
behind a PROXY header and TLS, as `check-send-proxy check-ssl` sends) in front of
two sluice instances on distinct loopback addresses (127.0.0.2 and
127.0.0.3, the same port), one ticket-key file for both, cookie persistence
over two demo servers. What a tier must give, checked end to end:

- the client's own address reaches each instance through PROXY v2;
- a TLS session made on one instance resumes on the other;
- a persistence cookie set by one instance is honoured by the other;
- rolling operations while wrk (HTTPS, keep-alive) and h2load (HTTP/2 over
  TLS) run through the balancer fail no request: a reload of each
  instance, a binary upgrade of each (SIGUSR2), and a stop and start of
  each, where HAProxy's log shows the instance taken out before its
  listener closed (timeouts.drain_notice).
"""

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time

import pytest

import harness as H
import peers
import tlsutil as T
from test_upgrade import read_pid, stop_master, upgrade

ADDRS = ("127.0.0.2", "127.0.0.3")
NOTICE = "1500ms"


def tls_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@pytest.fixture
def tier(sluice, demo, tmp_path):
    """Two instances on ADDRS, the same TLS port, a shared ticket-key file
    and two demo servers with cookie persistence; HAProxy in front once
    both answer. Returns a namespace with .instances, .haproxy, .make(i)
    (a new Sluice for instance i with the same config), .port (HAProxy's)."""
    if peers.HAPROXY is None:
        pytest.skip("haproxy not installed")
    os.makedirs(str(tmp_path / "pki"), exist_ok=True)
    pki = T.make_pki(tmp_path / "pki")
    keys = T.ticket_keys_file(str(tmp_path / "ticket.keys"), [os.urandom(48), os.urandom(48)])
    d1, d2 = demo(threads=32, keepalive_ms=60000), demo(threads=32, keepalive_ms=60000)
    port = H.free_port()

    class Tier:
        pass
    t = Tier()
    t.configs = []
    for i, addr in enumerate(ADDRS):
        admin_port = H.free_port()
        cfg = H.make_config(port, [H.server(d1.port, "a", cookie="alpha"),
                                   H.server(d2.port, "b", cookie="beta")],
                            workers=1, listen_host=addr, access_log_format=None,
                            timeouts={"drain_notice": NOTICE, "drain": "5s"},
                            backend={"persistence": {"type": "cookie"}, "queue_timeout": "10s"},
                            listener={"accept_proxy_from": ["127.0.0.1/32"], "monitor_uri": "/ready",
                                      "tls": {"certificates": [pki.ecdsa.entry()], "ticket_keys": keys}},
                            admin={"address": "%s:%d" % (addr, admin_port)})
        cfg["instances"] = 2
        cfg["pid_file"] = str(tmp_path / ("i%d.pid" % i))
        t.configs.append(cfg)
    t.make = lambda i: sluice(t.configs[i], name="i%d" % i)
    t.instances = [t.make(i) for i in range(2)]
    # The check goes to the traffic port's monitor_uri, as the traffic does:
    # a PROXY header (LOCAL), then TLS. Those sockets stay open across
    # reloads and upgrades; the admin listener is bound anew by each
    # generation (operator-guide.md, Running a tier). Two failed checks take
    # an instance out: with `inter 100ms` HAProxy gives a check's TLS
    # handshake 100 ms, which one scheduling stall of a sanitizer build on a
    # loaded 2-core machine can exceed; a 503 still takes it out in 200 ms.
    t.haproxy = peers.TcpBalancer(tmp_path, [("i%d" % i, ADDRS[i], port, None) for i in range(2)],
                                  send_proxy=True, fall=2,
                                  check_opts="check-send-proxy check-ssl verify none").start()
    t.port = t.haproxy.port
    try:
        for i in range(2):
            t.haproxy.wait_state("i%d" % i, "UP")
        yield t
    finally:
        t.haproxy.stop()
    # A master made by an upgrade is no child of the harness: stopped here.
    for c in t.configs:
        pid = read_pid(c["pid_file"])
        if pid and H.pid_alive(pid):
            stop_master(pid)


def tls_request(ctx, port, path, session=None, cookie=None, source="127.0.0.9"):
    """One HTTPS request on a new connection from SOURCE. Returns (Response,
    session, reused)."""
    raw = socket.create_connection((H.HOST, port), timeout=5, source_address=(source, 0))
    with ctx.wrap_socket(raw, session=session) as s:
        s.settimeout(5)
        c = H.Client.__new__(H.Client)
        c.sock, c.st = s, H.Stream(s)
        hdrs = [("Host", "tier.test")] + ([("Cookie", cookie)] if cookie else [])
        r = c.request("GET", path, headers=hdrs)
        return r, s.session, s.session_reused


def served(s):
    """Requests S served for clients (the balancer's checks left out)."""
    return len([e for e in s.access_entries() if e["reason"] != "monitor"])


def test_tier_identity_resumption_and_persistence(tier):
    """Through HAProxy's TCP balancing, connection after connection
    alternates between the instances: each sees the client's own address
    (PROXY v2), resumes the TLS session the other made, and sends the
    request to the server the other's cookie names."""
    ctx = tls_ctx()
    r, sess, reused = tls_request(ctx, tier.port, "/t-first")
    assert r.status == 200 and not reused
    cookies = r.header_all("set-cookie")
    assert len(cookies) == 1, r.headers
    cookie = cookies[0].split(";")[0]
    first = H.wait_for(lambda: next((e for s in tier.instances for e in s.access_entries()
                                     if e["target"] == "/t-first"), None), 5, what="/t-first logged")
    for k in range(8):
        r, _, reused = tls_request(ctx, tier.port, "/t-%d" % k, session=sess, cookie=cookie)
        assert r.status == 200 and reused, (k, r.status, reused)
        assert r.header_all("set-cookie") == [], r.headers  # the cookie was honoured as it was

    def where(path):
        found = [(i, e) for i, s in enumerate(tier.instances) for e in s.access_entries()
                 if e["target"] == path]
        return found[0] if found else None
    served_by = set()
    for k in range(8):
        i, e = H.wait_for(lambda: where("/t-%d" % k), 5, what="the access line of /t-%d" % k)
        served_by.add(i)
        assert e["client"] == "127.0.0.9", e
        assert e["server"] == first["server"] and e["persistence"] == "hit", e
        assert "resumed=1" in e["tls_rest"], e
    assert served_by == {0, 1}


def start_load(tier, tmp_path, seconds):
    """wrk (HTTPS keep-alive) and h2load (HTTP/2 over TLS) through the
    balancer for SECONDS. h2load does not reconnect after a GOAWAY, so it
    runs in short rounds back to back. Returns a function that waits for
    both and returns (wrk's output, h2load's last output, h2load's sent
    requests, those of them that did not get a 200)."""
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            pytest.fail("%s missing: make test-deps installs it" % tool)
    url = "https://127.0.0.1:%d/" % tier.port
    wrk = subprocess.Popen(["wrk", "-t1", "-c16", "-d%ds" % seconds, url],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + seconds
    h2 = {"sent": [], "out": ""}

    def h2_rounds():
        k = 0
        while time.monotonic() < deadline:
            log = tmp_path / ("h2load-%d.tsv" % k)
            p = subprocess.run(["h2load", "-n", "400", "-c", "4", "-m", "4", "--log-file", str(log), url],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            h2["out"] = p.stdout.decode("utf-8", "replace")
            lines = [l.split("\t") for l in log.read_text().splitlines() if l.strip()]
            # start time 0: queued by h2load but never sent (its session had
            # seen a GOAWAY): asked of no one
            h2["sent"] += [l for l in lines if l[0] != "0"]
            k += 1
    t = threading.Thread(target=h2_rounds)
    t.start()

    def finish():
        try:
            out, _ = wrk.communicate(timeout=seconds + 30)
        finally:
            if wrk.poll() is None:
                wrk.kill()
                wrk.wait()
        t.join(seconds + 60)
        sent = h2["sent"]
        return out.decode("utf-8", "replace"), h2["out"], sent, [l for l in sent if l[1] != "200"]
    return finish


def wrk_requests(out):
    m = re.search(r"(\d+) requests in", out)
    return int(m.group(1)) if m else 0


def test_tier_rolling_operations_fail_no_request(tier, tmp_path):
    """Under wrk and h2load through HAProxy: a rolling reload of both
    instances, a rolling stop and start of both, then a rolling binary
    upgrade (SIGUSR2) of both. Each stopping instance is taken out by
    HAProxy (its /ready answers 503 for timeouts.drain_notice) while its
    listener still accepts; an upgraded one never stops accepting; no
    request fails anywhere."""
    finish = start_load(tier, tmp_path, 18)
    H.wait_for(lambda: all(served(s) > 50 for s in tier.instances), 10,
               what="traffic on both instances")
    for s in tier.instances:
        s.reload()
    for i in range(2):
        name, s = "i%d" % i, tier.instances[i]
        s.signal(signal.SIGTERM)
        tier.haproxy.wait_state(name, "DOWN", timeout=5)
        assert H.port_accepts(s.port, host=ADDRS[i]), \
            "%s stopped accepting before HAProxy took it out" % name
        assert s.proc.wait(timeout=15) == 0
        tier.instances[i] = tier.make(i)
        tier.haproxy.wait_state(name, "UP", timeout=5)
        H.wait_for(lambda: served(tier.instances[i]) > 20, 10,
                   what="traffic back on %s" % name)
    masters = [read_pid(c["pid_file"]) for c in tier.configs]
    for i in range(2):
        n = served(tier.instances[i])
        new = upgrade(tier.instances[i], tier.configs[i]["pid_file"], 1)
        assert new != masters[i] and not H.pid_alive(masters[i])
        H.wait_for(lambda: served(tier.instances[i]) > n + 20, 10,
                   what="traffic on the upgraded i%d" % i)
        assert tier.haproxy.state("i%d" % i) == "UP"
    wrk_out, h2_out, sent, failed = finish()
    # The upgrades were no stops: HAProxy never took an instance out for them.
    assert [tier.haproxy.state_changes("i%d" % i) for i in range(2)] == [["DOWN", "UP"]] * 2, \
        "\n".join(tier.haproxy.state_reasons())
    assert "Socket errors" not in wrk_out and "Non-2xx" not in wrk_out, wrk_out
    assert wrk_requests(wrk_out) > 1000, wrk_out
    assert len(sent) > 1000, h2_out
    assert failed == [], (failed[:10], h2_out)
    # The stop was ordered: not ready first, listeners closed after the notice.
    for i in range(2):
        err = H.read_text(tier.instances[i].error_log)
        assert "stopping: not ready; listeners close in 1500 ms" in err, err[-2000:]
