#!/usr/bin/env python3
"""Offload benchmark: a traffic manager in front of a thread-per-request app server.

The published experiment (Zeus Traffic Manager in front of WebLogic): users
without keepalive request a JSP page; simulated users 30 -> 1000 and on "to
destruction". The app server alone became unstable past ~500 users; through
the traffic manager (many client connections funnelled into a few reused
keepalive connections, requests queued in front of the server) the
transaction rate doubled and the errors went away. With SSL and no session
reuse the app server alone managed 54-65 TPS at 100% CPU; with the proxy
decrypting, over 15x.

Here: Apache Tomcat 10 (Debian tomcat10, our own CATALINA_BASE, a small
thread pool: maxThreads=THREADS, maxConnections=MAXCONN, acceptCount=ACCEPT)
serves a JSP page that burns a fixed amount of CPU (JSP_ITER rounds of
SHA-256). bench/userload (a C epoll client) runs N closed-loop users, each
making one request per new connection (Connection: close), no think time.
Targets, alternating (order rotated by round and level):

  direct   userload -> Tomcat (plain: its HTTP connector; SSL: its HTTPS
           connector, JSSE, RSA-2048 certificate)
  sluice   one worker; server max_connections = THREADS (the rest queue,
           queue_timeout 30s), keepalive pool to Tomcat
  haproxy  nbthread 1; server maxconn THREADS + backend queue (timeout queue
           30s), http-reuse always, option abortonclose
  nginx    one worker; upstream keepalive THREADS. OSS nginx has no request
           queue (`queue` is NGINX Plus only): every request is forwarded at
           once, on a new backend connection when the pool is busy.

Sets of runs (SETS):
  plain    HTTP, Tomcat                         -> offload.png
  ssl      TLS 1.2 (TLS_VERSION) full handshake on every connection, no
           session reuse, RSA-2048: direct = Tomcat HTTPS; the proxies
           terminate TLS and speak plain HTTP to Tomcat  -> offload-ssl.png
  demo     HTTP, $BUILD/demo_backend (thread per connection, THREADS
           threads, backlog ACCEPT, DEMO_CPU_MS ms of CPU per request)
                                                -> offload-demo.png
  cluster  HTTP, TWO Tomcats (jvmRoute t1 and t2, the same thread settings,
           both on the app server's CPU) behind each proxy, with session
           persistence; the page makes a session per user and names its
           server in an X-Route header; userload --session keeps each user's
           cookies. No direct target (there is no single server).
             sluice   persistence jvm_route (SLUICE_PERSIST=cookie: its own
                      SLUICE_SERVER cookie), max_connections THREADS per
                      server, the rest queue (a session's request waits in its
                      server's own queue)
             haproxy  stick table on the JSESSIONID cookie (stick on
                      req.cook(JSESSIONID) + stick store-response
                      res.cook(JSESSIONID)), maxconn THREADS per server
             nginx    hash $cookie_jsessionid consistent: OSS nginx has no
                      sticky sessions; the hash maps an id to a server
                      whichever server made the session, so a user keeps
                      only a session whose id happens to hash to its own
                      server (a new session on every miss until then)
           Not in the default SETS: two more JVMs to start and warm up, about
           1.5 minutes in all, for a question of its own (does each request
           stay on its session's server?).
                                                -> offload-cluster.png

Per run: TPS average (completed 200 responses / measured seconds), TPS peak
(best 1-s window, sliding over 100-ms buckets), error rate (refused, reset,
timed out after TIMEOUT ms, TLS failures, non-200, truncated: / all ended
requests), mean and p99 time (connect to last byte, completed requests),
users served (users that completed at least one request), the CPU % of the
proxy's process tree, of the app server(s) and of the client. cluster set
also: stayed share (completed requests that carried a JSESSIONID and were
answered by the server named in it / those that carried one, %; target
100% while both servers are up), new sessions, responses per server.

Usage: sh bench/offload.sh  (or `make bench-offload`). Environment knobs:
  QUICK=1          short runs, fewer levels (plain 1000, ssl 300, no demo)
  DURATION=S       measured seconds per run (2; QUICK 1; fractions ok)
  WARMUP=S         unmeasured seconds at the start of each run (1.2; QUICK 0.3)
  ROUNDS=N         rounds per level; each runs every target once (3)
  LEVELS=a,b       users for the plain set (30,300,600,1000,5000; QUICK 1000)
  SSL_LEVELS=a,b   users for the ssl set (30,300,1000; QUICK 300)
  DEMO_LEVELS=a,b  users for the demo set (1000; QUICK none)
  CLUSTER_LEVELS=a,b  users for the cluster set (30,300; QUICK 300)
  SETS=a,b         subset/order of plain,ssl,demo,cluster (plain,ssl,demo)
  SLUICE_PERSIST=t sluice's persistence type in the cluster set: jvm_route
                   (default) or cookie
  TARGETS=a,b      subset/order of direct,sluice,haproxy,nginx
  THREADS=N        Tomcat maxThreads / demo_backend threads / proxies' backend
                   connection limit (16)
  MAXCONN=N        Tomcat maxConnections (THREADS: thread-per-connection, the
                   WebLogic shape; Tomcat NIO's own default is 8192)
  ACCEPT=N         Tomcat acceptCount / demo_backend backlog (10)
  JSP_ITER=N       SHA-256 rounds per JSP request (16000, ~1.4 ms on this machine)
  DEMO_CPU_MS=N    demo_backend --cpu-ms (1)
  TIMEOUT=MS       userload per-request timeout, connect to last byte; also
                   the proxies' queue timeout (2500)
  SOURCES=N        127.x source addresses userload spreads users over (256)
  TLS_VERSION=v    1.2 or 1.3 for the ssl set (1.2)
  APP_WARMUP=S     unmeasured load on Tomcat's HTTP connector after it starts
                   (JIT), half as long on HTTPS (6; QUICK 2)
  SETTLE_MAX=S     after a run, wait up to S s for the app server to go idle (3)
  PIN=0            do not pin with taskset
  BUILD=dir        where sluice, demo_backend and userload are (build)
  RESULTS=dir      results root (bench/results); BENCH_TS=name: the
                   results directory name (default: UTC timestamp)

Output: RESULTS/<ts>/offload.md, offload.png, offload-ssl.png,
offload-demo.png, offload-cluster.png, offload/ (CATALINA_BASEs, configs,
certificates, raw userload JSON, logs); RESULTS/latest/ gets a copy and
report.md links it.
Every process started here is stopped by its PID on exit.
"""
import functools
import json
import os
import resource
import select
import shutil
import subprocess
import sys
import time

import benchlib
from benchlib import (BUILD, CLK_TCK, PIN, QUICK, RESULTS, ROOT, cmd_out, exit_status, fmt, free_port, fsize,
                      git_describe, launch_proxy, log_lines_above_info, machine_facts, mmm, nginx_main,
                      nginx_temp_paths, nginx_upstream, proxy_errlog, read_tail, refresh_latest, report_end,
                      results_dirs, run_main, show_report, start_demo_backend, stop, system_busy_ticks,
                      tree_ticks, wait_port, write)
import tlslib

PROG = "bench/offload.py"
env_int = functools.partial(benchlib.env_int, prog=PROG)
env_float = functools.partial(benchlib.env_float, prog=PROG)


def env_levels(name, default):
    v = os.environ.get(name)
    if v is None:
        return default
    try:
        out = [int(x) for x in v.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"{PROG}: {name}={v!r}: expected comma-separated user counts")
    if any(x < 1 for x in out):
        sys.exit(f"{PROG}: {name}: user counts must be >= 1")
    return out


DURATION = env_float("DURATION", 1.0 if QUICK else 2.0, 0.2)
WARMUP = env_float("WARMUP", 0.3 if QUICK else 1.2, 0.0)
ROUNDS = env_int("ROUNDS", 3, 1)
LEVELS = {
    "plain": env_levels("LEVELS", [1000] if QUICK else [30, 300, 600, 1000, 5000]),
    "ssl": env_levels("SSL_LEVELS", [300] if QUICK else [30, 300, 1000]),
    "demo": env_levels("DEMO_LEVELS", [] if QUICK else [1000]),
    "cluster": env_levels("CLUSTER_LEVELS", [300] if QUICK else [30, 300]),
}
ALL_SETS = ["plain", "ssl", "demo", "cluster"]
DEFAULT_SETS = ["plain", "ssl", "demo"]      # cluster: on request (SETS)
SETS = [s for s in os.environ.get("SETS", ",".join(DEFAULT_SETS)).split(",") if s]
ALL_TARGETS = ["direct", "sluice", "haproxy", "nginx"]
TARGETS = [t for t in os.environ.get("TARGETS", ",".join(ALL_TARGETS)).split(",") if t]
THREADS = env_int("THREADS", 16, 1)
MAXCONN = env_int("MAXCONN", THREADS, 1)
ACCEPT = env_int("ACCEPT", 10, 1)
JSP_ITER = env_int("JSP_ITER", 16000, 1)
DEMO_CPU_MS = env_int("DEMO_CPU_MS", 1, 0)
TIMEOUT = env_int("TIMEOUT", 2500, 1)
# The proxies' queue timeouts: what the clients tolerate. A longer one only
# keeps requests whose client has given up in the queue.
QUEUE_TIMEOUT = f"{TIMEOUT}ms"
SOURCES = env_int("SOURCES", 256, 0)
TLS_VERSION = os.environ.get("TLS_VERSION", "1.2")
APP_WARMUP = env_float("APP_WARMUP", 2.0 if QUICK else 6.0, 0.0)
SETTLE_MAX = env_float("SETTLE_MAX", 3.0, 0.0)
SLUICE_PERSIST = os.environ.get("SLUICE_PERSIST", "jvm_route")
CLUSTER_ROUTES = ("t1", "t2")  # the cluster set's Tomcats: jvmRoute = server name
STALL_MS = 250                # userload's event loop paused longer than this: flagged
CATALINA_HOME = os.environ.get("CATALINA_HOME", "/usr/share/tomcat10")
TEMPLATES = os.path.join(ROOT, "bench", "offload")

for s in SETS:
    if s not in ALL_SETS:
        sys.exit(f"{PROG}: unknown set {s!r} in SETS (known: {','.join(ALL_SETS)})")
for t in TARGETS:
    if t not in ALL_TARGETS:
        sys.exit(f"{PROG}: unknown target {t!r} in TARGETS (known: {','.join(ALL_TARGETS)})")
if TLS_VERSION not in tlslib.VERSIONS:
    sys.exit(f"{PROG}: TLS_VERSION must be 1.2 or 1.3")
if SLUICE_PERSIST not in ("jvm_route", "cookie"):
    sys.exit(f"{PROG}: SLUICE_PERSIST must be jvm_route or cookie")
SETS = [s for s in SETS if LEVELS[s]]
PROXIES = [t for t in TARGETS if t != "direct"]

SET_TITLE = {
    "plain": "Plain HTTP, Tomcat (JSP page)",
    "ssl": f"SSL: TLS {TLS_VERSION}, RSA-2048, full handshake on every connection, Tomcat (JSP page)",
    "demo": "Plain HTTP, demo_backend (thread per connection)",
    "cluster": "Plain HTTP, a two-Tomcat cluster (JSP page with a session) with session persistence",
}
SET_CHART = {"plain": "offload.png", "ssl": "offload-ssl.png", "demo": "offload-demo.png",
             "cluster": "offload-cluster.png"}
TOMCAT_SETS = ("plain", "ssl", "cluster")


def set_targets(set_name):
    """The targets a set runs: all of TARGETS but direct in the cluster set
    (two servers, none to go to directly)."""
    return [t for t in TARGETS if not (set_name == "cluster" and t == "direct")]
COLORS = {"sluice": "#2b7bba", "haproxy": "#e07b39", "nginx": "#3a9e4f", "direct": "#777777"}


def log(msg):
    print(f"[offload] {msg}", flush=True)


# ---------------------------------------------------------------- pinning

def pins():
    """(app_pin, front_pin, text): the app server alone on the first CPU we
    may use (the constrained app server); proxy and client on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if PIN and len(cpus) >= 2:
        a, f = str(cpus[0]), ",".join(str(c) for c in cpus[1:])
        return (["taskset", "-c", a], ["taskset", "-c", f],
                f"app server (Tomcat's JVM, or demo_backend) on CPU {a}; the proxy (all its "
                f"processes) and the load client (userload) on CPU {f} (taskset -c)")
    return [], [], ("nothing pinned" + ("" if PIN else " (PIN=0)")
                    + (f" (only {len(cpus)} CPU)" if len(cpus) < 2 else ""))


APP_PIN, FRONT_PIN, PIN_TEXT = pins()


# ---------------------------------------------------------------- app servers

def start_tomcat(d, certs, name, connectors, route=None):
    """Start Tomcat 10 from the Debian package with our own CATALINA_BASE in
    d/NAME: generated server.xml, the JSP page as ROOT/index.jsp. One
    connector per entry of CONNECTORS: "direct" (HTTP), "direct-tls" (HTTPS),
    "<proxy>-<set>" (HTTP; a set's proxies never meet connections left by
    another set's). ROUTE (the cluster set): the Engine's jvmRoute, and the
    page makes a session per user and names the route in X-Route. Does not
    wait for it (wait_tomcat). Returns (Popen, {connector: port}, command
    line, env text)."""
    base = os.path.join(d, name)
    if os.path.exists(base):
        shutil.rmtree(base)
    for sub in ("conf", "logs", "temp", "work", "webapps/ROOT"):
        os.makedirs(os.path.join(base, sub), exist_ok=True)
    for f in ("web.xml", "catalina.properties", "context.xml", "logging.properties"):
        shutil.copy(os.path.join("/etc/tomcat10", f), os.path.join(base, "conf", f))
    # Faster start: the one JSP page needs no TLD or annotation scan of the jars.
    with open(os.path.join(base, "conf", "catalina.properties"), "a") as f:
        f.write("\n# bench/offload: no jar scanning (one JSP page, no TLDs)\n"
                "tomcat.util.scan.StandardJarScanFilter.jarsToSkip=*.jar\n")
    ports = {}
    conns = []
    for cname in connectors:
        ports[cname] = free_port()
        tmpl = "connector-https.xml" if cname == "direct-tls" else "connector-http.xml"
        if cname.startswith("direct"):
            what = "direct clients, " + ("HTTPS" if cname == "direct-tls" else "HTTP")
        else:
            what = f"{cname.split('-')[0]}'s backend connections in the {cname.split('-')[1]} set"
        conns.append(open(os.path.join(TEMPLATES, tmpl)).read()
                     .replace("@NAME@", what).replace("@PORT@", str(ports[cname])))
    xml = open(os.path.join(TEMPLATES, "server.xml")).read().replace("@CONNECTORS@", "".join(conns).rstrip("\n"))
    for k, v in (("@THREADS@", THREADS), ("@MAXCONN@", MAXCONN), ("@ACCEPT@", ACCEPT),
                 ("@CERT@", os.path.join(certs, "rsa.crt")), ("@KEY@", os.path.join(certs, "rsa.key")),
                 ("@TLS_PROTOCOLS@", tlslib.VERSIONS[TLS_VERSION]),
                 ("@JVMROUTE@", f' jvmRoute="{route}"' if route else "")):
        xml = xml.replace(k, str(v))
    write(os.path.join(base, "conf", "server.xml"), xml)
    jsp = (open(os.path.join(TEMPLATES, "index.jsp")).read().replace("@ITER@", str(JSP_ITER))
           .replace("@SESSION@", "true" if route else "false"))
    write(os.path.join(base, "webapps", "ROOT", "index.jsp"), jsp)
    java_opts = "-Xms256m -Xmx256m -Djava.security.egd=file:/dev/./urandom"
    env = dict(os.environ, CATALINA_HOME=CATALINA_HOME, CATALINA_BASE=base,
               CATALINA_TMPDIR=os.path.join(base, "temp"), JAVA_OPTS=java_opts)
    env.pop("CATALINA_OPTS", None)
    env.pop("CATALINA_PID", None)
    cmd = APP_PIN + [os.path.join(CATALINA_HOME, "bin", "catalina.sh"), "run"]
    # catalina.sh execs java: the PID we get is the JVM's.
    logf = open(os.path.join(d, f"{name}.out"), "ab")
    from benchlib import STARTED
    p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env, cwd=base)
    logf.close()
    STARTED.append(p)
    envtxt = (f"CATALINA_HOME={CATALINA_HOME} CATALINA_BASE={base} "
              f"CATALINA_TMPDIR={base}/temp JAVA_OPTS='{java_opts}'")
    return p, ports, " ".join(cmd), envtxt


def wait_tomcat(p, ports, d, name, expect, route=None):
    """Wait until every connector of Tomcat NAME listens and answers GET /
    with 200 and EXPECT in the body (the first request compiles the JSP);
    with ROUTE, also with that X-Route header. Exits the script if not."""
    for i, port in enumerate(ports.values()):
        if not wait_port(port, p, 60 if i == 0 else 10):
            sys.exit(f"{PROG}: Tomcat did not start, see {d}/{name}.out and {d}/{name}/logs/")
    for cname, port in ports.items():
        tls = cname == "direct-tls"
        e = None
        for _ in range(40):
            e = check(port, tls, expect, route)
            if not e:
                break
            time.sleep(0.5)
        if e:
            sys.exit(f"{PROG}: {name} connector for {cname} check failed: {e}")


def stop_tomcat(p, d, name, notes, loglines):
    """Stop Tomcat NAME by its PID; note if it had exited, keep its SEVERE
    and exception lines."""
    if p.poll() is not None:
        notes.append(f"{name} exited during the benchmark (status {p.returncode})")
    stop(p, grace=15)
    for ln in read_tail(os.path.join(d, f"{name}.out"), 0).splitlines():
        if ("SEVERE" in ln or "Exception" in ln) and len(loglines) < 200:
            loglines.append(f"{name}, {name}.out: {ln.strip()[:300]}")


def start_demo(d, name):
    """demo_backend for one target (thread per connection: a proxy's idle pool
    holds threads, so every target gets its own instance). Returns (Popen,
    port, command line)."""
    cmd = APP_PIN + [os.path.join(BUILD, "demo_backend"), "--listen", "127.0.0.1:0",
                     "--threads", str(THREADS), "--backlog", str(ACCEPT),
                     "--cpu-ms", str(DEMO_CPU_MS), "--size", "1024",
                     "--keepalive-ms", "60000", "--quiet"]
    return start_demo_backend(cmd, os.path.join(d, f"demo_backend-{name}.log"), prog=PROG)


# ---------------------------------------------------------------- proxies

# A proxy's servers: [(name, port)], one ("app1") or, in the cluster set, one
# per Tomcat (named after its jvmRoute); two or more get session persistence.

def sluice_servers(servers):
    """sluice's backend lines from `persistence:` on: each server at most
    THREADS connections; a cluster: persistence SLUICE_PERSIST (jvm_route:
    route = the server's name, its Tomcat's jvmRoute)."""
    cluster = len(servers) > 1
    route = cluster and SLUICE_PERSIST == "jvm_route"
    out = f"    persistence:\n      type: {SLUICE_PERSIST}\n" if cluster else ""
    out += "    servers:\n"
    for name, bport in servers:
        out += (f"      - name: {name}\n        address: 127.0.0.1:{bport}\n"
                + (f"        route: {name}\n" if route else "")
                + f"        max_connections: {THREADS}\n")
    return out


def conf_sluice(d, port, servers, tls, certs, name="sluice"):
    tls_txt = tlslib.sluice_tls(certs, "rsa", TLS_VERSION, True) if tls else ""
    what = ("the app server" if len(servers) == 1 else
            f"each of {len(servers)} app servers, session persistence {SLUICE_PERSIST}")
    return f"""# sluice, one worker; {THREADS} connections at most to {what}, the rest queue
workers: 1
error_log: {d}/{name}.error.log
user: nobody
access_log: off
timeouts:
  drain: 0
listeners:
  - name: fe
    address: 127.0.0.1:{port}
    backlog: 4096
    backend: app
{tls_txt}backends:
  - name: app
    queue_timeout: {QUEUE_TIMEOUT}
    queue_max: 10000
    idle_timeout: 50s
    connect_timeout: 3s
    response_timeout: 30s
{sluice_servers(servers)}"""


def haproxy_servers(servers):
    """HAProxy's backend lines: each server maxconn THREADS; a cluster:
    round robin for new users and a stick table on the JSESSIONID cookie
    (learned from the responses, matched on the requests)."""
    out = ""
    if len(servers) > 1:
        out = ("    balance roundrobin\n"
               "    stick-table type string len 64 size 1m expire 30m\n"
               "    stick on req.cook(JSESSIONID)\n"
               "    stick store-response res.cook(JSESSIONID)\n")
    return out + "".join(f"    server {name} 127.0.0.1:{bport} maxconn {THREADS}\n" for name, bport in servers)


def conf_haproxy(d, port, servers, tls, certs):
    bind_ssl = tlslib.haproxy_bind_ssl(certs, "rsa", TLS_VERSION, True) if tls else ""
    g_ssl = tlslib.haproxy_global_ssl(True) if tls else ""
    what = ("the app server" if len(servers) == 1 else
            f"each of {len(servers)} app servers, a stick table on JSESSIONID")
    return f"""# HAProxy, one thread; {THREADS} connections at most to {what}, the rest queue
global
    nbthread 1
    maxconn 8000
    pidfile {d}/haproxy.pid
{g_ssl}
defaults
    mode http
    option http-keep-alive
    option abortonclose
    http-reuse always
    timeout connect 3s
    timeout client 30s
    timeout server 30s
    timeout queue {QUEUE_TIMEOUT}
    timeout http-keep-alive 10s

frontend fe
    bind 127.0.0.1:{port} backlog 4096{bind_ssl}
    default_backend be

backend be
{haproxy_servers(servers)}"""


def nginx_servers(servers):
    """nginx's upstream: one server (benchlib's, a keepalive pool of
    THREADS), or a cluster hashed on the JSESSIONID cookie (consistent
    hashing, OSS nginx's only cookie affinity), a pool of THREADS per server."""
    if len(servers) == 1:
        return nginx_upstream(servers[0][1], THREADS, "50s")
    lines = "".join(f"        server 127.0.0.1:{bport};   # {name}\n" for name, bport in servers)
    return f"""    upstream be {{
        hash $cookie_jsessionid consistent;
{lines}        keepalive {THREADS * len(servers)};
        keepalive_requests 1000000;
        keepalive_timeout 50s;
    }}
"""


def conf_nginx(d, port, servers, tls, certs):
    ssl_txt = tlslib.nginx_ssl(certs, "rsa", TLS_VERSION, True) if tls else ""
    what = "" if len(servers) == 1 else f" per server, {len(servers)} app servers hashed on $cookie_jsessionid"
    return (f"# nginx, one worker, upstream keepalive {THREADS}{what}; OSS nginx has no request queue\n"
            + nginx_main(d, "nginx", rlimit=20000, conns=16384) + "    access_log off;\n"
            + nginx_temp_paths(d, "tmp-nginx") + nginx_servers(servers) + f"""    server {{
        listen 127.0.0.1:{port} backlog=4096{" ssl" if tls else ""};
{ssl_txt}        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 3s;
            proxy_read_timeout 30s;
        }}
    }}
}}
""")


CONF = {"sluice": (conf_sluice, "yaml"), "haproxy": (conf_haproxy, "cfg"), "nginx": (conf_nginx, "conf")}


def start_proxy(name, d, servers, tls, certs, tag):
    """servers: [(name, port)] of the app server(s). Returns (Popen or None,
    port, command line, config path)."""
    port = free_port()
    os.makedirs(os.path.join(d, "configs"), exist_ok=True)
    make, ext = CONF[name]
    conf = write(os.path.join(d, "configs", f"{name}-{tag}.{ext}"), make(d, port, servers, tls, certs))
    p, cmd = launch_proxy(name, d, port, conf, FRONT_PIN, os.path.join(BUILD, "sluice"))
    return p, port, cmd, conf


def check(port, tls, expect, route=None):
    """One GET / on a new connection: None if 200 and the body contains
    `expect` (and with ROUTE, X-Route is ROUTE), else what went wrong."""
    try:
        r = tlslib.get(port, TLS_VERSION if tls else "none", "/", timeout=10)
    except Exception as e:  # noqa: BLE001 — any failure is the answer
        return f"GET / failed: {e!r}"
    if r["status"] != b"200" or expect not in r["body"]:
        return f"GET / -> {r['head'][:80]!r}, {len(r['body'])} body bytes"
    if route and r["headers"].get("x-route") != route:
        return f"GET / -> X-Route {r['headers'].get('x-route')!r}, expected {route!r}"
    return None


# ---------------------------------------------------------------- one run

USERLOAD = os.path.join(BUILD, "userload")


def userload_cmd(port, users, tls, warmup, duration, session=False):
    return (FRONT_PIN + [USERLOAD, "--port", str(port), "--users", str(users),
                         "--warmup", f"{warmup:g}", "--duration", f"{duration:g}",
                         "--timeout", str(TIMEOUT), "--sources", str(SOURCES)]
            + (["--tls", "--tls-max", TLS_VERSION] if tls else [])
            + (["--session"] if session else []))


def run_userload(cmd, on_phase=None):
    """Run userload; on_phase(name) at 'phase measure' / 'phase end'.
    Returns (result dict or None, stdout text, stderr text, client CPU ticks
    during the measured phase)."""
    errf = open(os.path.join(RAW_TMP[0], "userload.stderr"), "w+b")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL)
    from benchlib import STARTED
    STARTED.append(p)
    lines, c0, c1, pending = [], None, None, b""
    deadline = time.monotonic() + WARMUP_MAX + 60
    fd = p.stdout.fileno()
    try:
        eof = False
        while not eof and time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 1.0)
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                eof = True
            pending += chunk
            while b"\n" in pending:
                raw_line, pending = pending.split(b"\n", 1)
                line = raw_line.decode("utf-8", "replace") + "\n"
                lines.append(line)
                if line.startswith("phase "):
                    ph = line.split()[1]
                    if ph == "measure":
                        c0 = sum(tree_ticks(p.pid).values())
                    elif ph == "end":
                        c1 = sum(tree_ticks(p.pid).values())
                    if on_phase:
                        on_phase(ph)
        if pending:
            lines.append(pending.decode("utf-8", "replace"))
    finally:
        stop(p, grace=2.0)
        p.stdout.close()
    errf.seek(0)
    err = errf.read().decode("utf-8", "replace")
    errf.close()
    out = "".join(lines)
    res = None
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                res = json.loads(line)
            except ValueError:
                pass
            break
    ticks = (c1 - c0) if c0 is not None and c1 is not None else None
    return res, out, err, ticks


WARMUP_MAX = 0.0              # longest warmup+duration asked of userload (for its deadline)


def app_ticks(apps):
    """CPU ticks so far of the app server processes APPS (Popens), all threads."""
    return sum(sum(tree_ticks(a.pid).values()) for a in apps)


def settle(apps):
    """Wait (up to SETTLE_MAX s) until the app servers use < 20% of a CPU:
    requests a proxy still had queued, or a backlog still being drained,
    must not spill into the next run. Returns seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < SETTLE_MAX:
        a = app_ticks(apps)
        time.sleep(0.1)
        if app_ticks(apps) - a <= 0.02 * CLK_TCK:
            break
    return time.monotonic() - t0


def session_figures(res):
    """The cluster set's figures from a userload --session result: session
    requests, stayed, lost (answered by another server), new sessions, the
    stayed share in % (None without session requests), responses per server."""
    n, stayed = res.get("session_requests", 0), res.get("session_stayed", 0)
    return {"session_requests": n, "session_stayed": stayed, "session_lost": n - stayed,
            "session_new": res.get("session_new", 0), "routes": res.get("routes", {}),
            "stayed_pct": 100.0 * stayed / n if n else None}


def measure(set_name, label, users, rnd, d, port, proxy, apps, tls):
    """One userload run against port; proxy: Popen or None (direct); apps:
    the app server Popens (CPU, settling)."""
    raw = os.path.join(d, "raw", f"{set_name}-u{users}-r{rnd + 1}-{label}.json")
    session = set_name == "cluster"
    cmd = userload_cmd(port, users, tls, WARMUP, DURATION, session)
    snap = {}

    def on_phase(ph):
        snap[ph] = (sum(tree_ticks(proxy.pid).values()) if proxy else 0,
                    app_ticks(apps), system_busy_ticks(), time.monotonic())

    res, out, err, cticks = run_userload(cmd, on_phase)
    write(raw, " ".join(cmd) + "\n" + out + (("\n# stderr:\n" + err) if err else ""))
    r = {"set": set_name, "label": label, "users": users, "round": rnd + 1,
         "raw": os.path.relpath(raw, d), "problems": []}
    if res is None:
        r["problems"].append(f"userload produced no result ({err.strip()[-200:] or 'no output'})")
        r.update(ok=0, tps_avg=None, tps_peak=None, error_pct=None, mean_ms=None, p99_ms=None,
                 served_pct=None, proxy_cpu=None, app_cpu=None, client_cpu=None, other_pct=None,
                 errors=0, err={}, resumed=0)
        return r
    r.update(ok=res["ok"], errors=res["errors"], err=res["err"], status=res["status"],
             tps_avg=res["tps_avg"], tps_peak=res["tps_peak"], error_pct=res["error_pct"],
             mean_ms=res["mean_ms"] if res["mean_ms"] >= 0 else None,
             p99_ms=res["p99_ms"] if res["p99_ms"] >= 0 else None,
             served_pct=100.0 * res["users_served"] / users, resumed=res["resumed"],
             handshakes=res["handshakes"])
    if session:
        r.update(session_figures(res))
        if res["ok"] and not r["session_requests"]:
            r["problems"].append("no completed request carried a session cookie")
        if res.get("jar_full"):
            r["problems"].append(f"{res['jar_full']} cookies did not fit userload's jar")
    if "measure" in snap and "end" in snap:
        (p0, a0, s0, t0), (p1, a1, s1, t1) = snap["measure"], snap["end"]
        wall = max(t1 - t0, 1e-3)
        r["proxy_cpu"] = (p1 - p0) / CLK_TCK / wall * 100 if proxy else None
        r["app_cpu"] = (a1 - a0) / CLK_TCK / wall * 100
        r["client_cpu"] = cticks / CLK_TCK / wall * 100 if cticks is not None else None
        # Everything else that kept the CPUs busy: other people's processes
        # and kernel work charged to nobody (loopback softirq), % of one CPU.
        r["other_pct"] = ((s1 - s0) - (p1 - p0) - (a1 - a0) - (cticks or 0)) / CLK_TCK / wall * 100
    else:
        r.update(proxy_cpu=None, app_cpu=None, client_cpu=None, other_pct=None)
        r["problems"].append("userload did not report its phases")
    if proxy is not None and proxy.poll() is not None:
        r["problems"].append(f"proxy exited during the run (status {proxy.returncode})")
    if res["ok"] == 0:
        r["problems"].append("no request completed")
    if res["resumed"]:
        r["problems"].append(f"{res['resumed']} TLS sessions were resumed (must be 0)")
    r["max_gap_ms"] = res.get("max_gap_ms")
    r["stalled"] = (r["max_gap_ms"] or 0) > STALL_MS
    if r["stalled"]:
        r["problems"].append(f"userload was not scheduled for {r['max_gap_ms']:.0f} ms in the window "
                             "(busy machine): this run's figures are unreliable")
    r["settle"] = settle(apps)
    if r["settle"] >= SETTLE_MAX > 0:
        r["problems"].append(f"the app server was still busy {SETTLE_MAX:g} s after the run")
    return r


# ---------------------------------------------------------------- summaries

KEYS = ("tps_avg", "tps_peak", "error_pct", "mean_ms", "p99_ms", "served_pct", "proxy_cpu",
        "app_cpu", "client_cpu", "stayed_pct")
SESSION_SUMS = ("session_requests", "session_stayed", "session_lost", "session_new")


def session_sums(rs):
    """The cluster set's counts summed over runs RS: SESSION_SUMS, and
    responses per server (routes)."""
    out = {k: sum(r.get(k) or 0 for r in rs) for k in SESSION_SUMS}
    routes = {}
    for r in rs:
        for name, n in (r.get("routes") or {}).items():
            routes[name] = routes.get(name, 0) + n
    out["routes"] = routes
    return out


def summarize(runs):
    """{(set, users, label): {key: (median, min, max)}, n, errors by kind,
    the cluster set's session counts}."""
    out = {}
    for r in runs:
        out.setdefault((r["set"], r["users"], r["label"]), []).append(r)
    summ = {}
    for k, allrs in out.items():
        # Runs in which userload itself was not scheduled for a while are left
        # out of the medians when the level has other runs of that target.
        rs = [r for r in allrs if not r.get("stalled")] or allrs
        s = {key: mmm([r.get(key) for r in rs]) for key in KEYS}
        s["n"], s["total"] = len(rs), len(allrs)
        kinds = {}
        for r in rs:
            for kk, v in (r.get("err") or {}).items():
                kinds[kk] = kinds.get(kk, 0) + v
        s["err_kinds"] = {kk: v for kk, v in kinds.items() if v}
        s["session"] = session_sums(rs)
        summ[k] = s
    return summ


def err_text(kinds):
    return ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items(), key=lambda x: -x[1])) or "—"


def ratio(a, b, nd=2):
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.{nd}f}"


def chart(path, set_name, summ, labels):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = LEVELS[set_name]
    panels = [("tps_avg", "TPS average (median of rounds; bars: min–max)"),
              ("error_pct", "error rate % (median)"),
              ("mean_ms", "mean time ms, completed requests (median)")]
    if set_name == "cluster":
        panels.append(("stayed_pct", "stayed on the session's server, % (median)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.4))
    for lab in labels:
        rows = [(u, summ[(set_name, u, lab)]) for u in levels
                if (set_name, u, lab) in summ and summ[(set_name, u, lab)]["tps_avg"][0] is not None]
        if not rows:
            continue
        xs = [u for u, _ in rows]
        style = dict(color=COLORS.get(lab), marker="o", label=lab if lab != "direct" else "direct (no proxy)",
                     linestyle="--" if lab == "direct" else "-")
        for ax, (key, _) in zip(axes, panels):
            ys = [s[key][0] if s[key][0] is not None else float("nan") for _, s in rows]
            if key == "tps_avg":
                ax.errorbar(xs, ys, yerr=[[s[key][0] - s[key][1] for _, s in rows],
                                          [s[key][2] - s[key][0] for _, s in rows]], capsize=4, **style)
            else:
                ax.plot(xs, ys, **style)
    for ax, (key, title) in zip(axes, panels):
        ax.set_xscale("log")
        ax.set_xticks(levels)
        ax.set_xticklabels([str(u) for u in levels], fontsize=8)
        ax.set_xlabel("simulated users (connections, no keepalive)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if key == "stayed_pct":
            ax.set_ylim(0, 105)
        else:
            ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"offload — {SET_TITLE[set_name]}; {ROUNDS} rounds × {DURATION:g} s", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- report

def set_tables(L, set_name, summ, labels):
    """The per-set tables: every (users, target) row; the reference-shaped
    table; gains (when the set has a direct target) and ratios."""
    levels = LEVELS[set_name]
    direct = "direct" in labels
    L.append("| users | target | TPS peak | TPS avg | TPS avg min–max | errors % | mean ms | p99 ms | "
             "users served % | proxy CPU % | app CPU % | client CPU % | "
             + ("gain vs direct | " if direct else "") + "errors by kind (all rounds) |")
    L.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if direct else "") + "---|")
    for u in levels:
        d = summ.get((set_name, u, "direct"))
        for lab in labels:
            s = summ.get((set_name, u, lab))
            if not s:
                continue
            gain = "—" if lab == "direct" or not d else ratio(s["tps_avg"][0], d["tps_avg"][0])
            name = "direct (no proxy)" if lab == "direct" else f"**{lab}**"
            if s["n"] < s["total"]:
                name += f" ({s['n']}/{s['total']} runs)"
            L.append(f"| {u:,} | {name} | {fmt(s['tps_peak'][0])} | {fmt(s['tps_avg'][0])} | "
                     f"{fmt(s['tps_avg'][1])}–{fmt(s['tps_avg'][2])} | {fmt(s['error_pct'][0], 2)} | "
                     f"{fmt(s['mean_ms'][0])} | {fmt(s['p99_ms'][0])} | {fmt(s['served_pct'][0])} | "
                     f"{fmt(s['proxy_cpu'][0])} | {fmt(s['app_cpu'][0])} | {fmt(s['client_cpu'][0])} | "
                     + (f"{gain} | " if direct else "") + f"{err_text(s['err_kinds'])} |")
    L.append("")
    # The reference's shape: one row per users level, TPS avg / errors / mean time per target.
    cluster = set_name == "cluster"
    L.append("Reference shape (TPS average / error rate / mean time"
             + (" / stayed on the session's server" if cluster else "") + ", medians):")
    L.append("")
    L.append("| users | " + " | ".join(("direct" if x == "direct" else x) for x in labels) + " |")
    L.append("|---:|" + "---|" * len(labels))
    for u in levels:
        cells = []
        for lab in labels:
            s = summ.get((set_name, u, lab))
            cells.append("—" if not s else f"{fmt(s['tps_avg'][0])} TPS / {fmt(s['error_pct'][0], 2)}% / "
                         f"{fmt(s['mean_ms'][0])} ms"
                         + (f" / {fmt(s['stayed_pct'][0], 2)}% stayed" if cluster else ""))
        L.append(f"| {u:,} | " + " | ".join(cells) + " |")
    L.append("")
    proxies = [x for x in labels if x != "direct"]
    peers = [p for p in proxies if p != "sluice"] if "sluice" in proxies else []
    if proxies and (direct or peers):
        L.append(("Gain (via-proxy TPS avg / direct TPS avg, medians) and sluice / peer TPS:" if direct
                  else "sluice / peer TPS (TPS avg, medians):"))
        L.append("")
        head = ["users"] + ([f"{p} gain" for p in proxies] if direct else []) + [f"sluice / {p}" for p in peers]
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "---:|" * len(head))
        for u in levels:
            d = summ.get((set_name, u, "direct"))
            cells = [f"{u:,}"]
            for p in proxies if direct else []:
                s = summ.get((set_name, u, p))
                cells.append(ratio(s["tps_avg"][0], d["tps_avg"][0]) if s and d else "—")
            a = summ.get((set_name, u, "sluice"))
            for p in peers:
                b = summ.get((set_name, u, p))
                cells.append(ratio(a["tps_avg"][0], b["tps_avg"][0], 3) if a and b else "—")
            L.append("| " + " | ".join(cells) + " |")
        L.append("")


def session_table(L, set_name, summ, labels):
    """The cluster set's persistence table: per users level and target, the
    stayed share (median of the rounds) and the counts summed over them."""
    L.append("Session persistence (both servers up the whole time): **stayed %** = completed requests "
             "that carried a JSESSIONID and were answered by the server its jvmRoute names (X-Route), "
             "in % of those that carried one (median of the rounds; target 100%); lost = answered by "
             "the other server, which makes a new session; new sessions = responses that set a new "
             "JSESSIONID (a user's first request, and every lost one); responses per server from "
             "X-Route. Counts are summed over the rounds.")
    L.append("")
    L.append("| users | target | stayed % | stayed % min–max | session requests | stayed | lost | "
             "new sessions | responses per server |")
    L.append("|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for u in LEVELS[set_name]:
        for lab in labels:
            s = summ.get((set_name, u, lab))
            if not s:
                continue
            ss = s["session"]
            split = ", ".join(f"{k} {v:,}" for k, v in sorted(ss["routes"].items())) or "—"
            L.append(f"| {u:,} | **{lab}** | {fmt(s['stayed_pct'][0], 2)} | "
                     f"{fmt(s['stayed_pct'][1], 2)}–{fmt(s['stayed_pct'][2], 2)} | "
                     f"{ss['session_requests']:,} | {ss['session_stayed']:,} | {ss['session_lost']:,} | "
                     f"{ss['session_new']:,} | {split} |")
    L.append("")


def write_report(outdir, d, runs, facts, commands, confs, app_cmds, notes, loglines, started_at,
                 elapsed, certs_cmds):
    summ = summarize(runs)
    labels = [x for x in TARGETS if any(k[2] == x for k in summ)]
    charts = {}
    for s in SETS:
        try:
            chart(os.path.join(outdir, SET_CHART[s]), s, summ, [x for x in labels if x in set_targets(s)])
            charts[s] = f"![offload {s}]({SET_CHART[s]})"
        except Exception as e:  # noqa: BLE001 — a missing chart must not lose the tables
            charts[s] = f"(chart not drawn: {e!r})"
    L = ["# Offload — a traffic manager in front of a thread-per-request app server", ""]
    L.append(f"Run {started_at} UTC, {elapsed:.0f} s in all. {'QUICK mode. ' if QUICK else ''}"
             f"{ROUNDS} rounds per users level × {DURATION:g} s measured (after {WARMUP:g} s "
             f"unmeasured, in the same connection-churning run), per-request timeout {TIMEOUT} ms. "
             f"Users = concurrent closed-loop connections, one request per connection "
             f"(`Connection: close`), no think time. App server: Tomcat 10 maxThreads={THREADS}, "
             f"maxConnections={MAXCONN}, acceptCount={ACCEPT}, JSP page = {JSP_ITER} SHA-256 rounds. "
             f"Pinning: {PIN_TEXT}.")
    L.append("")
    L.append("Reference (Zeus in front of WebLogic): WebLogic alone unstable past ~500 users (600 "
             "users: 511 TPS, 6.4% errors, 1170 ms); through the traffic manager 1029 TPS, 0.00% "
             "errors, 583 ms. SSL without session reuse: 54-65 TPS with 3.5-12.4% errors alone, "
             "923-970 TPS with the proxy decrypting (over 15x), the proxy at 20-25% CPU.")
    L.append("")
    for s in SETS:
        L.append(f"## {SET_TITLE[s]}")
        L.append("")
        set_tables(L, s, summ, [x for x in labels if x in set_targets(s)])
        if s == "cluster":
            session_table(L, s, summ, [x for x in labels if x in set_targets(s)])
        L.append(charts[s])
        L.append("")
    L.append("Medians and min–max are over the rounds, leaving out runs in which userload was "
             f"not scheduled for over {STALL_MS} ms (busy machine; listed under problems seen) "
             "when the same target has other runs at that level; '(2/3 runs)' after a target "
             "says how many were used.")
    L.append("")
    L.append("How to read: TPS peak = best 1-s window (sliding over 100-ms buckets) of completed "
             "200 responses, TPS avg = completed / measured seconds; both medians over the rounds. "
             "errors % = failed / (completed + failed) requests ended in the measured window. "
             "mean / p99 ms: time from connect to the last byte of completed requests only (a "
             "request that timed out is an error, not a time). users served % = users that "
             "completed at least one request in the window: a server that leaves connections in "
             "its SYN backlog starves those users while the rest run fast. gain = the target's "
             "TPS avg / direct TPS avg at the same users level. CPU % is of one core, over the "
             "measured window. Trust ratios from the same run over absolute numbers on a noisy "
             "shared machine.")
    L.append("")
    if notes:
        L.append("## Problems seen")
        L.append("")
        L += [f"- {n}" for n in notes]
        L.append("")
    L.append("## Proxy and app server log lines above info level")
    L.append("")
    L += [f"- {ln}" for ln in (loglines[:60] or ["none"])]
    if len(loglines) > 60:
        L.append(f"- … {len(loglines) - 60} more (see the logs in [offload/](offload/))")
    L.append("")
    L.append("## Every run (in the order they ran)")
    L.append("")
    L.append("| set | users | round | target | TPS peak | TPS avg | errors % | mean ms | p99 ms | "
             "served % | proxy CPU % | app CPU % | client CPU % | others' CPU % | settle s | raw |")
    L.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        L.append(f"| {r['set']} | {r['users']} | {r['round']} | {r['label']} | {fmt(r.get('tps_peak'))} | "
                 f"{fmt(r.get('tps_avg'))} | {fmt(r.get('error_pct'), 2)} | {fmt(r.get('mean_ms'))} | "
                 f"{fmt(r.get('p99_ms'))} | {fmt(r.get('served_pct'))} | {fmt(r.get('proxy_cpu'))} | "
                 f"{fmt(r.get('app_cpu'))} | {fmt(r.get('client_cpu'))} | {fmt(r.get('other_pct'))} | "
                 f"{fmt(r.get('settle'), 1)} | [{os.path.basename(r['raw'])}](offload/{r['raw']}) |")
    L.append("")
    L.append("## What was measured")
    L.append("")
    L.append(f"- App server: Apache Tomcat 10 from Debian's `tomcat10` (CATALINA_HOME={CATALINA_HOME}), "
             "our own CATALINA_BASE (server.xml generated from bench/offload/server.xml, the JSP page "
             "from bench/offload/index.jsp as webapps/ROOT/index.jsp), started once with "
             "`catalina.sh run` (which execs the JVM) and stopped by its PID. One NIO connector "
             "per target (direct HTTP, direct HTTPS with JSSE and the RSA-2048 PEM certificate, and "
             "one HTTP connector per proxy and set, so that one proxy's idle keepalive pool never "
             "holds the connection slots another target needs; only one target is loaded at a time), each "
             f"with its own maxThreads={THREADS} threads, maxConnections={MAXCONN} (connections "
             f"beyond it wait in the kernel's accept queue of acceptCount={ACCEPT}, and beyond "
             "that the kernel drops SYNs: clients retry after 1 s, 3 s, ... — the "
             "thread-per-connection server's collapse), keepAliveTimeout 60 s and "
             "maxKeepAliveRequests=-1 so the proxies' pooled connections stay open. Warmed up "
             f"(JSP compiled, JIT) with {APP_WARMUP:g} s of unmeasured load (30 users) on the "
             f"direct HTTP connector and {APP_WARMUP / 2:g} s on HTTPS before the first measurement.")
    L.append(f"- The JSP page costs a fixed amount of CPU: {JSP_ITER} rounds of SHA-256 over the "
             "previous digest (same output every time), ~760-byte HTML response, no session "
             "(except in the cluster set).")
    if "cluster" in SETS:
        L.append(cluster_text())
    L.append(f"- demo set: `{os.path.basename(BUILD)}/demo_backend` — one thread per connection, "
             f"{THREADS} threads, backlog {ACCEPT}, {DEMO_CPU_MS} ms of CPU per request, 1024-byte "
             "body; one instance per target (a proxy's idle pooled connections hold threads), all "
             "on the app server's CPU.")
    L.append(f"- Proxies: one worker/thread each, all on the same CPU as the client. sluice: "
             f"`max_connections: {THREADS}` on the server (requests beyond wait in the backend queue, "
             f"queue_timeout {QUEUE_TIMEOUT}; `queue_abort_on_close` on by default: a queued request whose "
             "client left is dropped), pooled keepalive connections. HAProxy: `server ... maxconn "
             f"{THREADS}` (the rest wait in the backend queue, `timeout queue {QUEUE_TIMEOUT}`), "
             "`http-reuse always`, `option abortonclose` (drop queued requests whose client left). "
             f"nginx: `keepalive {THREADS}` upstream pool; OSS nginx has no request queue (the "
             "`queue` directive is NGINX Plus only), so when the pool is busy it opens more "
             "connections to the app server, which end up in its accept queue like direct clients. "
             "Listen backlog 4096 on all three. SSL set: each proxy terminates TLS with the same "
             "RSA-2048 certificate, tickets and session caches off, and speaks plain HTTP to "
             "Tomcat's HTTP connector.")
    L.append(f"- Load: bench/userload.c (`{os.path.basename(BUILD)}/userload`), one epoll thread: "
             "each user opens a connection, (TLS: a full handshake — OpenSSL client with "
             "SSL_OP_NO_TICKET and no session cache, never offering a session; the run fails if "
             "one was resumed), sends one GET with `Connection: close`, reads the response, "
             "closes, repeats at once. Errors: refused, reset, timed out (connect/handshake or "
             f"response, {TIMEOUT} ms from the start of the request), TLS failures, non-200, "
             "truncated or empty responses. Users are spread over "
             f"{SOURCES} source addresses 127.0.x.y (IP_BIND_ADDRESS_NO_PORT) so the client does "
             "not run out of ephemeral ports; the server side closes first (TIME_WAIT on its side), "
             f"net.ipv4.tcp_tw_reuse={cmd_out(['sysctl', '-n', 'net.ipv4.tcp_tw_reuse'])} "
             "(not changed by the script), open-files limit raised to the hard limit "
             f"({resource.getrlimit(resource.RLIMIT_NOFILE)[1]}).")
    L.append("- Each set starts its proxies once and runs every users level; in each level every "
             "round runs each target once, the order rotating by one per round and per level. "
             f"After every run the script waits (up to {SETTLE_MAX:g} s) for the app server to go "
             "idle, so requests still queued or in its backlog do not spill into the next run.")
    L.append("- CPU %: utime+stime from /proc/PID/stat of the proxy's process tree, of the app "
             "server (the JVM, all threads) and of the client, between userload's 'phase measure' "
             "and 'phase end' lines; others' CPU % = the machine's busy time minus those, in % of "
             "one CPU (other people's processes plus loopback softirq work charged to nobody).")
    L.append("- Caveats: closed-loop users with no think time, so the mean time of completed "
             "requests ≈ users / TPS once the server is saturated (Little's law) — a long mean "
             "time at 2,000+ users through a proxy is the queue working, not a failure, until it "
             f"exceeds the {TIMEOUT} ms timeout. Short runs: requests started in the warm-up count "
             "when they end in the window. Loopback, one machine, two cores: absolute TPS are "
             "this machine's; compare ratios from the same run.")
    L.append("")
    L.append("## Commands (exact)")
    L.append("")
    L.append("```sh")
    L += certs_cmds
    for k, v in app_cmds.items():
        L.append(f"# {k}\n{v}")
    for k, v in commands.items():
        L.append(f"# {k}\n{v}")
    L.append("# load (per run; PORT = the target's port, USERS = the level; --tls for the ssl set)")
    L.append(" ".join(userload_cmd("PORT", "USERS", False, WARMUP, DURATION)))
    L.append(" ".join(userload_cmd("PORT", "USERS", True, WARMUP, DURATION)))
    if "cluster" in SETS:
        L.append("# cluster set")
        L.append(" ".join(userload_cmd("PORT", "USERS", False, WARMUP, DURATION, True)))
    L.append("```")
    L.append("")
    L.append("Ports are picked free at run time. Configs as used (also in [offload/](offload/)):")
    L.append("")
    report_end(L, outdir, "offload", confs, facts,
               "`make bench-offload` (or `QUICK=1 make bench-offload`); see docs/bench/offload.md.")
    return summ, labels


def cluster_text():
    """The report's description of the cluster set."""
    return ("- cluster set: two Tomcats of their own (CATALINA_BASE offload/tomcat-t1, offload/tomcat-t2), "
            "configured as above (HTTP connectors only, warmed up the same way, with session cookies), "
            "with `jvmRoute` t1 and t2 on their Engine and, per proxy, a connector of their own; both "
            "on the app server's CPU (so the pair has the capacity "
            "of one core, like the single Tomcat: this set measures persistence, not scaling). "
            "The page makes a session when the request has none (`request.getSession(true)`: "
            "`Set-Cookie: JSESSIONID=<id>.<jvmRoute>`) and answers with `X-Route: <jvmRoute>` (the "
            "session id's part after the '.'). userload `--session`: each user keeps one cookie per "
            "name from the Set-Cookie headers it gets and sends them all on its next requests "
            "(still a new connection each, `Connection: close`). sluice: `persistence: {type: "
            f"{SLUICE_PERSIST}}}`, servers t1 and t2 with `route` t1/t2, `max_connections: "
            f"{THREADS}` each (a session's request waits in its server's own queue). HAProxy: "
            "`balance roundrobin`, `stick-table type string len 64 size 1m expire 30m`, "
            "`stick on req.cook(JSESSIONID)`, `stick store-response res.cook(JSESSIONID)`, "
            f"`maxconn {THREADS}` per server. nginx: `hash $cookie_jsessionid consistent` (OSS nginx "
            "has no sticky sessions: the hash picks a server for an id whichever server made it, so "
            "a user's request lands on another server, which makes a new session, until the user "
            f"holds an id that hashes to its own server), `keepalive {THREADS * len(CLUSTER_ROUTES)}`. "
            "No direct target.")


# ---------------------------------------------------------------- main

def facts_list():
    tomcat_v = cmd_out(["sh", "-c", f"CATALINA_HOME={CATALINA_HOME} {CATALINA_HOME}/bin/version.sh "
                        "2>/dev/null | grep -i 'Server number'"]).replace("Server number:", "").strip()
    java_v = cmd_out(["java", "-version"]).splitlines()
    return machine_facts([
        ("sluice", f"{cmd_out([os.path.join(BUILD, 'sluice'), '-V']).splitlines()[0]} ({git_describe()})"),
        ("haproxy", cmd_out(["haproxy", "-v"]).splitlines()[0]),
        ("nginx", cmd_out(["nginx", "-v"]).replace("nginx version: ", "")),
        ("tomcat", f"Apache Tomcat {tomcat_v or '?'} (Debian tomcat10)"),
        ("java", java_v[0] if java_v else "?"),
        ("openssl (userload)", cmd_out(["openssl", "version"])),
    ])


def warm_app(port, tls, seconds, d, tag, session=False):
    """Unmeasured load on the app server (JIT); its figures are kept in raw/."""
    if seconds <= 0:
        return
    cmd = userload_cmd(port, 30, tls, 0, seconds, session)
    res, out, err, _ = run_userload(cmd)
    write(os.path.join(d, "raw", f"warmup-{tag}.json"), " ".join(cmd) + "\n" + out + err)
    if res:
        log(f"warm-up {tag}: {res['tps_avg']:.0f} TPS, {res['error_pct']:.2f}% errors")


def run_set(set_name, d, apps, bports, tls, certs, expect, runs, notes, loglines, commands, confs):
    """Every users level of one set. apps: {target: [Popens of the app
    servers it loads]}; bports: {proxy: [(server name, port)] of the app
    servers it talks to, direct: the port userload connects to}."""
    levels = LEVELS[set_name]
    proxies = {}
    for name in PROXIES:
        errlog = proxy_errlog(name, d)
        pos = fsize(errlog)
        p, port, cmd, conf = start_proxy(name, d, bports[name], tls, certs, set_name)
        commands[f"{name} ({set_name})"] = cmd
        confs[f"{name} ({set_name})"] = conf
        if p is None:
            notes.append(f"{set_name}: {name} did not start; log: {read_tail(errlog, pos).strip()[-400:]!r}")
            log(notes[-1])
            continue
        e = check(port, tls, expect)
        if e:
            notes.append(f"{set_name}: {name}: sanity check failed: {e}")
            log(notes[-1])
        proxies[name] = (p, port, errlog, pos)
    labels = [t for t in set_targets(set_name) if t == "direct" or t in proxies]
    for li, users in enumerate(levels if labels else []):
        for rnd in range(ROUNDS):
            k = (rnd + li) % len(labels)
            for label in labels[k:] + labels[:k]:
                if label == "direct":
                    proxy, port = None, bports["direct"]
                else:
                    proxy, port = proxies[label][0], proxies[label][1]
                    if proxy.poll() is not None:
                        continue
                r = measure(set_name, label, users, rnd, d, port, proxy, apps[label], tls)
                runs.append(r)
                for pr in r["problems"]:
                    notes.append(f"{set_name}, {users} users, round {rnd + 1}, {label}: {pr}")
                log(f"{set_name:5} u={users:<5} r{rnd + 1} {label:8} TPS {fmt(r.get('tps_avg')):>7} "
                    f"peak {fmt(r.get('tps_peak')):>7} err {fmt(r.get('error_pct'), 2):>6}% "
                    f"mean {fmt(r.get('mean_ms')):>6} ms p99 {fmt(r.get('p99_ms')):>6} "
                    f"served {fmt(r.get('served_pct')):>3}% cpu proxy {fmt(r.get('proxy_cpu'))} "
                    f"app {fmt(r.get('app_cpu'))} client {fmt(r.get('client_cpu'))}"
                    + (f"  PROBLEMS: {r['problems']}" if r["problems"] else ""))
    for name, (p, port, errlog, pos) in proxies.items():
        died = p.poll() is not None
        rc = stop(p)
        if died:
            notes.append(f"{set_name}: {name} exited during the set (status {rc})")
        for ln in [x.strip() for x in log_lines_above_info(read_tail(errlog, pos))][:10]:
            loglines.append(f"{set_name}, {name}, {os.path.basename(errlog)}: {ln}")


RAW_TMP = ["/tmp"]              # where userload's stderr goes while it runs


def run_cluster(d, certs, runs, notes, loglines, commands, confs, app_cmds):
    """The cluster set: two Tomcats (jvmRoute t1, t2; the page keeps a
    session per user), each with a direct connector (checks, warm-up) and
    one per proxy; every proxy balances over both with session persistence.
    Started together, warmed up one after the other, stopped at the end."""
    conns = ["direct"] + [f"{p}-cluster" for p in PROXIES]
    tomcats = {}
    for route in CLUSTER_ROUTES:
        name = f"tomcat-{route}"
        p, ports, cmd, envtxt = start_tomcat(d, certs, name, conns, route)
        tomcats[route] = (p, ports)
        app_cmds[f"Tomcat {route} (cluster set; CATALINA_BASE under offload/{name})"] = f"{envtxt} \\\n  {cmd}"
        confs[f"Tomcat {route} server.xml (cluster set)"] = os.path.join(d, name, "conf", "server.xml")
    confs["JSP page (cluster set)"] = os.path.join(d, f"tomcat-{CLUSTER_ROUTES[0]}", "webapps", "ROOT", "index.jsp")
    expect = b"digest after"
    for route, (p, ports) in tomcats.items():
        wait_tomcat(p, ports, d, f"tomcat-{route}", expect, route)
        log(f"Tomcat {route} up ({', '.join(f'{k} :{v}' for k, v in ports.items())})")
    for route, (p, ports) in tomcats.items():
        warm_app(ports["direct"], False, APP_WARMUP, d, f"tomcat-{route}", session=True)
    apps = [p for p, _ in tomcats.values()]
    settle(apps)
    bports = {x: [(route, ports[f"{x}-cluster"]) for route, (_, ports) in tomcats.items()] for x in PROXIES}
    run_set("cluster", d, {x: apps for x in PROXIES}, bports, False, certs, expect, runs, notes, loglines,
            commands, confs)
    for route, (p, _) in tomcats.items():
        stop_tomcat(p, d, f"tomcat-{route}", notes, loglines)


def main():
    global WARMUP_MAX
    for tool in ("haproxy", "nginx", "openssl", "java") + (("taskset",) if FRONT_PIN else ()):
        if not shutil.which(tool):
            sys.exit(f"{PROG}: {tool} not found (bench/offload.sh installs it)")
    need = ["sluice", "userload"] + (["demo_backend"] if "demo" in SETS else [])
    for b in need:
        if not os.access(os.path.join(BUILD, b), os.X_OK):
            sys.exit(f"{PROG}: {BUILD}/{b} missing (bench/offload.sh builds it)")
    if any(s in SETS for s in TOMCAT_SETS) and not os.access(
            os.path.join(CATALINA_HOME, "bin", "catalina.sh"), os.X_OK):
        sys.exit(f"{PROG}: {CATALINA_HOME}/bin/catalina.sh missing (Debian package tomcat10)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    top = max([u for s in SETS for u in LEVELS[s]] or [0])
    if hard < top + 100:
        sys.exit(f"{PROG}: open-files hard limit {hard} is below {top} users + 100")
    WARMUP_MAX = max(WARMUP + DURATION, APP_WARMUP)

    started, outdir, d = results_dirs("offload")
    RAW_TMP[0] = d
    t_start = time.monotonic()
    nruns = sum(len(LEVELS[s]) * len(set_targets(s)) for s in SETS) * ROUNDS
    log(f"results in {outdir}")
    log(f"{nruns} runs x ~{WARMUP + DURATION + 0.5:.1f} s + app server start; sets {','.join(SETS)}; {PIN_TEXT}")
    facts = facts_list()
    certs, certs_cmds = tlslib.make_certs(d)
    certs_cmds = ["# certificates (the RSA-2048 one is used)"] + certs_cmds

    runs, notes, loglines, commands, confs, app_cmds = [], [], [], {}, {}, {}
    tomcat_sets = [s for s in SETS if s in ("plain", "ssl")]
    if tomcat_sets:
        conns = ["direct", "direct-tls"] + [f"{p}-{x}" for x in tomcat_sets for p in PROXIES]
        tc, tports, cmd, envtxt = start_tomcat(d, certs, "tomcat", conns)
        app_cmds["Tomcat (started once; CATALINA_BASE under offload/tomcat)"] = f"{envtxt} \\\n  {cmd}"
        confs["Tomcat server.xml"] = os.path.join(d, "tomcat", "conf", "server.xml")
        confs["JSP page"] = os.path.join(d, "tomcat", "webapps", "ROOT", "index.jsp")
        expect = b"digest after"
        wait_tomcat(tc, tports, d, "tomcat", expect)
        log(f"Tomcat up ({', '.join(f'{k} :{v}' for k, v in tports.items())}) "
            f"after {time.monotonic() - t_start:.1f} s")
        warm_app(tports["direct"], False, APP_WARMUP, d, "tomcat-http")
        if "ssl" in tomcat_sets:
            warm_app(tports["direct-tls"], True, APP_WARMUP / 2, d, "tomcat-https")
        settle([tc])
        for s in tomcat_sets:
            bports = {p: [("app1", tports[f"{p}-{s}"])] for p in PROXIES}
            bports["direct"] = tports["direct-tls" if s == "ssl" else "direct"]
            run_set(s, d, {t: [tc] for t in ALL_TARGETS}, bports, s == "ssl", certs, expect, runs,
                    notes, loglines, commands, confs)
        stop_tomcat(tc, d, "tomcat", notes, loglines)
    if "demo" in SETS:
        demos, dports = {}, {}
        for name in TARGETS:
            demos[name], dports[name], cmd = start_demo(d, name)
            app_cmds[f"demo_backend for {name} (started once for the demo set)"] = cmd
            e = check(dports[name], False, b"0123")
            if e:
                sys.exit(f"{PROG}: demo_backend check failed: {e}")
        bports = {t: (dports[t] if t == "direct" else [("app1", dports[t])]) for t in TARGETS}
        run_set("demo", d, {t: [p] for t, p in demos.items()}, bports, False, certs, b"0123", runs,
                notes, loglines, commands, confs)
        for name, p in demos.items():
            if p.poll() is not None:
                notes.append(f"demo_backend for {name} exited during the set (status {p.returncode})")
            stop(p)
    if "cluster" in SETS:
        run_cluster(d, certs, runs, notes, loglines, commands, confs, app_cmds)

    elapsed = time.monotonic() - t_start
    summ, labels = write_report(outdir, d, runs, facts, commands, confs, app_cmds, notes, loglines,
                                started.strftime("%Y-%m-%d %H:%M:%S"), elapsed, certs_cmds)
    refresh_latest(RESULTS, outdir, "offload",
                   ["offload.md"] + [SET_CHART[s] for s in SETS])
    show_report(outdir, "offload", ["How to read:"], log)
    # A target that produced no figure in a set fails the run.
    missing = [f"{s}/{lab}" for s in SETS for lab in set_targets(s)
               if not any(r["set"] == s and r["label"] == lab and r.get("ok") for r in runs)]
    log(f"elapsed {time.monotonic() - t_start:.0f} s")
    return exit_status(missing, log)


if __name__ == "__main__":
    run_main(main, PROG)
