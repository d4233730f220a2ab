"""`make install` and `make deb` (issue 9): the installed tree, and the Debian
package installed on this machine, run, reloaded, stopped and purged.

test_make_install needs nothing but make: it installs into a scratch DESTDIR
and checks the tree, that the installed config is valid once its absolute
paths are pointed into the scratch tree, and that a second install keeps an
edited config.

test_deb_install_run_purge builds the package from SLUICE_BIN (`make deb
INSTALL_BIN=...`), then `dpkg -i`, and runs the installed /usr/sbin/sluice as
the unit would (root, only the unit's CapabilityBoundingSet, NoNewPrivileges:
setpriv, since PID 1 here is not systemd) on a copy of the installed config
(free ports and a local origin; the installed logs, keys, `user: sluice` and
PID file directory). It checks the workers run as sluice with no
capabilities, serves HTTP and HTTPS, reloads (SIGHUP and POST /reload),
rotates the logs with the installed logrotate snippet, stops (SIGTERM, exit
0), then `dpkg -r`, `dpkg -P`, and checks that nothing is left. It
needs root and dpkg, and skips when sluice is already installed here (it
leaves such a machine alone). Whatever fails, the finally clause purges the
package, so the machine is left as it was found. It skips under ASan: an
ASan binary is not something to package (it needs libasan at run time and
the ASan suite adds nothing to what the normal build's run checks here).
Runs of the suite at the same time take turns through a lock file.

test_deb_service_under_systemd installs the package again and runs the
installed unit, unchanged, under Debian's real systemd booted in private
namespaces (sysdns.py): systemctl start, reload and stop.

test_logrotate runs conf/logrotate/sluice (its paths rewritten into a
scratch directory) with `logrotate -f` against a running SLUICE_BIN and
checks that new lines go to the new file.
"""

import fcntl
import glob
import grp
import gzip
import http.client
import http.server
import os
import pwd
import re
import shutil
import signal
import ssl
import subprocess
import threading
import time

import pytest

import harness

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LUA_SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "lua", "*.lua")))
DOCS = ["README.md"] + sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))


def make_env():
    """The environment for a sub-make: without the variables of the make
    running this suite (BUILD, SANITIZE... would otherwise be inherited)."""
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(k, None)
    return env


def run(cmd, timeout=60, check=True, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, **kw)
    out = r.stdout.decode(errors="replace")
    if check:
        assert r.returncode == 0, "%s -> %d\n%s" % (" ".join(cmd), r.returncode, out[-4000:])
    return r.returncode, out


def is_asan(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


class Origin:
    """A tiny HTTP/1.1 origin on a free port: 200 "origin ok" for every GET."""

    def __init__(self, port=0):
        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                body = b"origin ok\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def get(port, tls=False, timeout=5.0):
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)
    else:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", "/pkg-test")
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_ok(port, tls=False, timeout=10.0):
    """Poll until sluice answers 200 through to the origin."""
    last = []

    def ok():
        try:
            st, body = get(port, tls)
            last[:] = [st, body]
            return st == 200 and body == b"origin ok\n"
        except OSError as e:
            last[:] = [e]
            return False
    harness.wait_for(ok, timeout, what="200 from the origin through sluice on %d (last: %r)" % (port, last))


def rewrite_config(text, *, http_port, https_port, admin_port, origin_port):
    """The installed config on free ports (its logs, PID file, keys and user
    stay the installed ones)."""
    subs = [
        ("0.0.0.0:80\n", "127.0.0.1:%d\n" % http_port),
        ("0.0.0.0:443\n", "127.0.0.1:%d\n" % https_port),
        ("127.0.0.1:9901\n", "127.0.0.1:%d\n" % admin_port),
        ("127.0.0.1:8080\n", "127.0.0.1:%d\n" % origin_port),
    ]
    for a, b in subs:
        assert a in text, "installed config lacks %r" % a
        text = text.replace(a, b)
    return "workers: 2\n" + text


def unit_value(key):
    """KEY's value in conf/systemd/sluice.service."""
    text = open(os.path.join(REPO, "conf/systemd/sluice.service")).read()
    m = re.search(r"^%s=(.*)$" % re.escape(key), text, re.M)
    assert m, key
    return m.group(1).strip()


def unit_like_command(cmd):
    """CMD under the unit's CapabilityBoundingSet and NoNewPrivileges
    (setpriv), as systemd would start it."""
    caps = [c.lower().replace("cap_", "") for c in unit_value("CapabilityBoundingSet").split()]
    assert unit_value("NoNewPrivileges") == "yes"
    return ["setpriv", "--bounding-set", "-all," + ",".join("+" + c for c in caps),
            "--inh-caps=-all", "--no-new-privs"] + cmd


def test_make_install(tmp_path, sluice_bin):
    dest = str(tmp_path / "root")
    run(["make", "--no-print-directory", "-C", REPO, "install", "DESTDIR=" + dest, "PREFIX=/usr",
         "INSTALL_BIN=" + sluice_bin], env=make_env())
    files = sorted(os.path.relpath(os.path.join(dp, f), dest)
                   for dp, _, fs in os.walk(dest) for f in fs)
    expect = sorted(["usr/sbin/sluice", "etc/sluice/sluice.yaml", "etc/logrotate.d/sluice",
                     "lib/systemd/system/sluice.service", "lib/systemd/system/sluice.socket",
                     "usr/share/man/man8/sluice.8.gz"]
                    + ["usr/share/sluice/lua/" + s for s in LUA_SCRIPTS]
                    + ["usr/share/doc/sluice/" + s for s in DOCS])
    assert files == expect
    assert not [f for f in files if f.endswith(".key")], "a private key was installed"
    st = os.stat(os.path.join(dest, "usr/sbin/sluice"))
    assert st.st_mode & 0o777 == 0o755
    for f in files:
        if f != "usr/sbin/sluice":
            assert os.stat(os.path.join(dest, f)).st_mode & 0o777 == 0o644, f
    with open(os.path.join(dest, "usr/sbin/sluice"), "rb") as a, open(sluice_bin, "rb") as b:
        assert a.read() == b.read()
    for s in LUA_SCRIPTS:
        with open(os.path.join(dest, "usr/share/sluice/lua", s), "rb") as a, \
                open(os.path.join(REPO, "lua", s), "rb") as b:
            assert a.read() == b.read(), s

    man = gzip.open(os.path.join(dest, "usr/share/man/man8/sluice.8.gz")).read().decode()
    assert man.startswith(".TH SLUICE 8")
    for sec in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "SIGNALS", "FILES", "EXIT STATUS", "SEE ALSO"):
        assert ".SH " + sec in man, sec
    assert "@" not in re.sub(r"\S+@\S+\.\w+", "", man), "an unreplaced @PLACEHOLDER@"
    assert "/usr/share/sluice/lua" in man and "/usr/share/doc/sluice" in man

    conf = open(os.path.join(dest, "etc/sluice/sluice.yaml")).read()
    assert "@" not in conf
    assert "script: /usr/share/sluice/lua/waf.lua" in conf
    for k in ("ecdsa.pem", "ecdsa.key", "rsa.pem", "rsa.key"):
        assert "/etc/sluice/tls/" + k in conf
    unit = open(os.path.join(dest, "lib/systemd/system/sluice.service")).read()
    assert "ExecStart=/usr/sbin/sluice -c /etc/sluice/sluice.yaml" in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    assert "CapabilityBoundingSet=CAP_NET_BIND_SERVICE" in unit
    assert "Type=notify" in unit  # the master sends READY=1 (src/notify.c)
    assert ".B \\-d" in man

    # The installed config is valid: point its absolute paths into the tree.
    tls = str(tmp_path / "tls")
    run(["sh", os.path.join(REPO, "conf/make-demo-certs.sh"), tls])
    # (The sluice account exists once the package makes it; nobody stands in.)
    assert "\nuser: sluice\n" in conf
    checked = conf.replace("/usr/share/sluice/lua", os.path.join(dest, "usr/share/sluice/lua")) \
                  .replace("/etc/sluice/tls", tls).replace("\nuser: sluice\n", "\nuser: nobody\n")
    cpath = str(tmp_path / "check.yaml")
    with open(cpath, "w") as f:
        f.write(checked)
    rc, out = run([sluice_bin, "-t", "-c", cpath], check=False, cwd=str(tmp_path))
    assert rc == 0, out

    # A second install keeps an edited config; PREFIX moves the paths.
    with open(os.path.join(dest, "etc/sluice/sluice.yaml"), "a") as f:
        f.write("# edited\n")
    _, out = run(["make", "--no-print-directory", "-C", REPO, "install", "DESTDIR=" + dest,
                  "PREFIX=/usr/local", "INSTALL_BIN=" + sluice_bin], env=make_env())
    assert "keeping the existing" in out
    assert open(os.path.join(dest, "etc/sluice/sluice.yaml")).read().endswith("# edited\n")
    assert os.path.exists(os.path.join(dest, "usr/local/sbin/sluice"))
    assert os.path.exists(os.path.join(dest, "usr/local/share/sluice/lua/waf.lua"))
    unit = open(os.path.join(dest, "lib/systemd/system/sluice.service")).read()
    assert "ExecStart=/usr/local/sbin/sluice -c" in unit


def test_logrotate(tmp_path, sluice_bin):
    if shutil.which("logrotate") is None:
        pytest.skip("logrotate is not installed")
    d = str(tmp_path)
    origin = Origin()
    port = harness.free_port()
    cfg = harness.make_config(port, [harness.server(origin.port)], workers=2)
    cfg["pid_file"] = os.path.join(d, "sluice.pid")
    s = harness.Sluice(sluice_bin, tmp_path, cfg)
    try:
        s.start()
        wait_ok(port)
        harness.wait_for(lambda: os.path.exists(s.access_log) and os.path.getsize(s.access_log) > 0,
                         3.0, what="an access log line")
        snippet = open(os.path.join(REPO, "conf/logrotate/sluice")).read()
        assert "/var/log/sluice/*.log" in snippet and "/run/sluice/sluice.pid" in snippet
        snippet = snippet.replace("/var/log/sluice/*.log", os.path.join(d, "*.log")) \
                         .replace("/run/sluice/sluice.pid", cfg["pid_file"])
        snippet = re.sub(r"\n\s*su .*", "", snippet)
        snippet = re.sub(r"create 0640 \S+ \S+", "create 0640", snippet)
        conf = os.path.join(d, "logrotate.conf")
        with open(conf, "w") as f:
            f.write(snippet)
        old_ino = os.stat(s.access_log).st_ino
        run(["logrotate", "-f", "-s", os.path.join(d, "logrotate.state"), conf])
        assert os.path.exists(s.access_log + ".1"), os.listdir(d)
        assert os.stat(s.access_log + ".1").st_ino == old_ino
        rotated = open(s.access_log + ".1").read()
        assert "/pkg-test" in rotated
        # The new file gets the new lines (the reopen happens on SIGUSR1).
        assert os.path.exists(s.access_log) and os.stat(s.access_log).st_ino != old_ino

        def reopened():
            st, _ = get(port)
            assert st == 200
            return "/pkg-test" in open(s.access_log).read()
        harness.wait_for(reopened, 5.0, what="a request logged in the new access.log")
        assert open(s.access_log + ".1").read() == rotated
        assert s.stop() == 0
    finally:
        s.kill()
        origin.close()


# -- the Debian package --------------------------------------------------

LOCK = "/tmp/sluice-test-package.lock"


def pkg_state():
    r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "sluice"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return r.stdout.decode().strip() if r.returncode == 0 else ""


def dpkg(*args, timeout=120):
    """dpkg ARGS, retried while another dpkg/apt holds the lock."""
    deadline = time.monotonic() + timeout
    while True:
        rc, out = run(["dpkg"] + list(args), timeout=timeout, check=False,
                      env=dict(make_env(), DEBIAN_FRONTEND="noninteractive"))
        if rc != 0 and "lock" in out and time.monotonic() < deadline:
            time.sleep(0.5)
            continue
        assert rc == 0, "dpkg %s -> %d\n%s" % (" ".join(args), rc, out[-4000:])
        return out


def user_exists(name):
    return subprocess.run(["getent", "passwd", name], stdout=subprocess.DEVNULL).returncode == 0


def group_exists(name):
    return subprocess.run(["getent", "group", name], stdout=subprocess.DEVNULL).returncode == 0


def leftovers():
    out = [p for p in ("/usr/sbin/sluice", "/etc/sluice", "/var/log/sluice", "/usr/share/sluice",
                       "/usr/share/doc/sluice", "/usr/share/man/man8/sluice.8.gz",
                       "/lib/systemd/system/sluice.service", "/etc/logrotate.d/sluice")
           if os.path.lexists(p)]
    out += glob.glob("/etc/systemd/system/*/sluice.service") + glob.glob("/etc/systemd/system/sluice.service")
    out += glob.glob("/var/lib/systemd/deb-systemd-helper-*/*sluice*")
    out += glob.glob("/var/lib/systemd/deb-systemd-helper-*/*/sluice.service")
    if user_exists("sluice"):
        out.append("user sluice")
    if group_exists("sluice"):
        out.append("group sluice")
    if pkg_state():
        out.append("dpkg: sluice " + pkg_state())
    return out


@pytest.fixture
def package_lock():
    fd = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    deadline = time.monotonic() + 80
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                pytest.skip("another run of this test holds %s" % LOCK)
            time.sleep(0.2)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def deb_preconditions(sluice_bin):
    for tool in ("dpkg", "dpkg-deb", "dpkg-query"):
        if shutil.which(tool) is None:
            pytest.skip("%s is missing" % tool)
    if os.geteuid() != 0:
        pytest.skip("installing a package needs root")
    if is_asan(sluice_bin):
        pytest.skip("ASan build: not packaged (the normal build's run installs the package)")
    if pkg_state() or user_exists("sluice") or group_exists("sluice") or os.path.exists("/etc/sluice"):
        pytest.skip("sluice is already installed here (or its user or /etc/sluice exist): left alone")


@pytest.fixture(scope="module")
def deb(sluice_bin, tmp_path_factory):
    """The package, built once for this module's tests (`make deb`)."""
    deb_preconditions(sluice_bin)
    out_dir = str(tmp_path_factory.mktemp("deb"))
    _, out = run(["make", "--no-print-directory", "-C", REPO, "deb", "INSTALL_BIN=" + sluice_bin,
                  "DEB_OUT=" + out_dir], env=make_env(), timeout=120)
    debs = glob.glob(os.path.join(out_dir, "sluice_*.deb"))
    assert len(debs) == 1, out
    return debs[0]


def test_deb_install_run_purge(tmp_path, sluice_bin, package_lock, deb):
    deb_preconditions(sluice_bin)
    version = re.search(r'#define SLUICE_VERSION "(.*)"', open(os.path.join(REPO, "src/version.h")).read()).group(1)
    assert os.path.basename(deb) == "sluice_%s_%s.deb" % (
        version, subprocess.check_output(["dpkg", "--print-architecture"]).decode().strip())
    _, info = run(["dpkg-deb", "-f", deb, "Depends"])
    for lib in ("libuv1", "libcyaml1", "liblua5.4-0", "libc6"):
        assert lib in info, info
    _, contents = run(["dpkg-deb", "-c", deb])
    assert ".key" not in contents

    d = str(tmp_path / "run")
    os.mkdir(d)
    proc = None
    origin = None
    made_run_dir = False
    try:
        dpkg("-i", deb)
        assert pkg_state() == "ii"
        # Every installed file is where it belongs.
        listed = set(run(["dpkg", "-L", "sluice"])[1].split())
        for p in (["/usr/sbin/sluice", "/etc/sluice/sluice.yaml", "/etc/logrotate.d/sluice",
                   "/lib/systemd/system/sluice.service", "/usr/share/man/man8/sluice.8.gz",
                   "/usr/share/doc/sluice/copyright"]
                  + ["/usr/share/sluice/lua/" + s for s in LUA_SCRIPTS]
                  + ["/usr/share/doc/sluice/" + s for s in DOCS]):
            assert p in listed and os.path.isfile(p), p
        assert user_exists("sluice") and group_exists("sluice")
        sluice_uid = pwd.getpwnam("sluice").pw_uid
        sluice_gid = grp.getgrnam("sluice").gr_gid
        # Only the master (root) opens the logs; adm reads them.
        st = os.stat("/var/log/sluice")
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, grp.getgrnam("adm").gr_gid, 0o2750), st
        # The keys are root's alone.
        st = os.stat("/etc/sluice/tls")
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o700), st
        for k in ("ecdsa", "rsa"):
            assert os.path.isfile("/etc/sluice/tls/%s.pem" % k)
            kst = os.stat("/etc/sluice/tls/%s.key" % k)
            assert (kst.st_uid, kst.st_mode & 0o7777) == (0, 0o600), "key %o" % kst.st_mode
        conffiles = run(["dpkg-query", "-W", "-f=${Conffiles}", "sluice"])[1]
        assert "/etc/sluice/sluice.yaml" in conffiles and "/etc/logrotate.d/sluice" in conffiles

        # The installed binary accepts the installed config; the service
        # user cannot even read it through (the keys are root's).
        rc, out = run(["/usr/sbin/sluice", "-t", "-c", "/etc/sluice/sluice.yaml"], check=False, cwd=d)
        assert rc == 0, out
        if shutil.which("runuser"):
            rc, out = run(["runuser", "-u", "sluice", "--", "/usr/sbin/sluice", "-t"], check=False, cwd="/")
            assert rc == 1 and "cannot open /etc/sluice/tls/" in out and "Permission denied" in out, out
        rc, out = run(["/usr/sbin/sluice", "-V"], check=False)
        assert rc == 0 and ("sluice " + version) in out
        if shutil.which("systemd-analyze"):
            rc, out = run(["systemd-analyze", "verify", "/lib/systemd/system/sluice.service"], check=False)
            assert rc == 0, out

        # Run it as the unit would (no systemd here): root, with only the
        # unit's CapabilityBoundingSet and NoNewPrivileges, on a copy of the
        # installed config (free ports), with the installed logs, keys,
        # user, logrotate snippet and PID file directory (RuntimeDirectory).
        origin = Origin()
        http_port, https_port, admin_port = harness.free_port(), harness.free_port(), harness.free_port()
        text = rewrite_config(open("/etc/sluice/sluice.yaml").read(), http_port=http_port,
                              https_port=https_port, admin_port=admin_port, origin_port=origin.port)
        cfg = os.path.join(d, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(text)
        if not os.path.isdir("/run/sluice"):
            os.mkdir("/run/sluice", 0o755)
            made_run_dir = True
        err = open(os.path.join(d, "stderr"), "wb")
        proc = subprocess.Popen(unit_like_command(["/usr/sbin/sluice", "-c", cfg]), cwd=d,
                                stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)
        err.close()
        for p in (http_port, https_port, admin_port):
            harness.wait_port(p, 10.0, proc=proc)
        wait_ok(http_port)
        wait_ok(https_port, tls=True)
        assert open("/run/sluice/sluice.pid").read().strip() == str(proc.pid)

        def workers_are_sluice():
            # A worker switches before it serves, but its sibling may still
            # be setting up when the first one answers.
            harness.wait_for(lambda: all(harness.proc_status(w)["Uid"].split()[0] == str(sluice_uid)
                                         for w in harness.children_of(proc.pid)), 5.0,
                             what="both workers to switch to sluice")
            ws = harness.children_of(proc.pid)
            for w in ws:
                st = harness.proc_status(w)
                assert st["Uid"].split() == [str(sluice_uid)] * 4, st["Uid"]
                assert st["Gid"].split() == [str(sluice_gid)] * 4, st["Gid"]
                assert int(st["CapEff"], 16) == 0
            assert harness.proc_status(proc.pid)["Uid"].split() == ["0"] * 4
            return ws
        old = set(workers_are_sluice())
        assert len(old) == 2
        proc.send_signal(signal.SIGHUP)
        harness.wait_for(lambda: not (set(harness.children_of(proc.pid)) & old)
                         and len(harness.children_of(proc.pid)) == 2, 15.0, what="reload")
        wait_ok(http_port)
        wait_ok(https_port, tls=True)
        old = set(workers_are_sluice())

        # POST /reload: worker 0 (sluice) cannot signal the root master.
        c = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=5)
        c.request("POST", "/reload")
        assert c.getresponse().status == 202
        c.close()
        harness.wait_for(lambda: not (set(harness.children_of(proc.pid)) & old)
                         and len(harness.children_of(proc.pid)) == 2, 15.0, what="admin reload")
        wait_ok(https_port, tls=True)
        workers_are_sluice()

        # docs/operator-guide.md's rotation by hand (its block is run-by
        # this test): rename, SIGUSR1 to the PID file's master, compress.
        log = "/var/log/sluice/access.log"
        assert "/pkg-test" in open(log).read()
        from test_docs import run_by_block
        for cmd in run_by_block("docs/operator-guide.md", "test_deb_install_run_purge"):
            run(["sh", "-c", cmd])
        assert os.path.exists(log + ".1.gz")

        def logged_anew():
            wait_ok(http_port)
            return os.path.exists(log) and "/pkg-test" in open(log).read()
        harness.wait_for(logged_anew, 5.0, what="a request logged in the new access.log")

        # The installed logrotate snippet, for real: the master reopens the
        # logs and hands the new files to its workers (sluice, which may not
        # even enter /var/log/sluice).
        assert os.stat(log).st_uid == 0
        if shutil.which("logrotate"):
            run(["logrotate", "-f", "-s", os.path.join(d, "logrotate.state"), "/etc/logrotate.d/sluice"])
            assert os.path.exists(log + ".1")

            def reopened():
                wait_ok(http_port)
                return os.path.exists(log) and "/pkg-test" in open(log).read()
            harness.wait_for(reopened, 5.0, what="a request logged in the new access.log")
            st = os.stat(log)
            assert (st.st_uid, st.st_mode & 0o777) == (0, 0o640), st
        # A reload reopens the files (root's) and forks workers on them.
        old = set(workers_are_sluice())
        proc.send_signal(signal.SIGHUP)
        harness.wait_for(lambda: not (set(harness.children_of(proc.pid)) & old)
                         and len(harness.children_of(proc.pid)) == 2, 15.0, what="reload")
        wait_ok(http_port)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert not os.path.exists("/run/sluice/sluice.pid")
        errlog = "".join(open(f).read() for f in sorted(glob.glob("/var/log/sluice/error.log*"))
                         if not f.endswith(".gz"))
        assert "workers run as user sluice" in errlog, errlog
        warnings = [ln for ln in errlog.splitlines()
                    if ("[warn]" in ln or "[error]" in ln) and "admin: reload requested" not in ln]
        assert warnings == [] and "cannot" not in errlog, errlog
        assert open(os.path.join(d, "stderr")).read() == ""

        # Remove keeps the conffiles; purge removes everything.
        dpkg("-r", "sluice")
        assert not os.path.exists("/usr/sbin/sluice")
        assert os.path.exists("/etc/sluice/sluice.yaml")
        assert pkg_state() == "rc"
        dpkg("-P", "sluice")
        assert leftovers() == []
    finally:
        if proc is not None and proc.poll() is None:
            harness.kill_popen(proc, grace=2.0)
        if origin is not None:
            origin.close()
        if pkg_state():
            subprocess.run(["dpkg", "-P", "sluice"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if made_run_dir:
            shutil.rmtree("/run/sluice", ignore_errors=True)


def test_deb_service_under_systemd(tmp_path, sluice_bin, package_lock, deb):
    """The installed unit, unchanged, under Debian's real systemd (booted as
    PID 1 of private namespaces by sysdns.py; the host network, so its ports
    are reachable here). /etc/sluice/sluice.yaml is bind-mounted over with a
    copy on free ports. systemctl start (Type=notify: active only after
    READY=1), serve HTTP and HTTPS with workers as sluice, systemctl reload
    (ExecReload: -t, then SIGHUP; RELOADING=1 and READY=1), systemctl stop
    (exit 0), and nothing worse than info in the journal."""
    deb_preconditions(sluice_bin)
    import sysdns
    why = sysdns.unavailable_reason()
    if why:
        pytest.skip("systemd cannot boot here: " + why)
    origin = None
    try:
        dpkg("-i", deb)
        origin = Origin()
        http_port, https_port, admin_port = harness.free_port(), harness.free_port(), harness.free_port()
        cfg = str(tmp_path / "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(rewrite_config(open("/etc/sluice/sluice.yaml").read(), http_port=http_port,
                                   https_port=https_port, admin_port=admin_port,
                                   origin_port=origin.port))
        os.chmod(cfg, 0o644)
        unit = open("/lib/systemd/system/sluice.service").read()
        sluice_uid = pwd.getpwnam("sluice").pw_uid
        with sysdns.SystemdNS(unit_files={"sluice.service": unit},
                              extra_binds=[(cfg, "/etc/sluice/sluice.yaml", "ro")]) as sd:
            sd.systemctl("start", "sluice.service")
            st = sd.show("sluice.service")
            assert (st["ActiveState"], st["SubState"]) == ("active", "running"), sd.status("sluice.service")
            assert st["StatusText"] == "serving: 2 listeners, %d workers" % os.cpu_count(), st
            wait_ok(http_port)
            wait_ok(https_port, tls=True)
            master = sd.host_pid(int(st["MainPID"]))
            workers = harness.children_of(master)
            assert len(workers) == os.cpu_count()
            assert harness.proc_status(master)["Uid"].split() == ["0"] * 4
            for w in workers:
                assert harness.proc_status(w)["Uid"].split() == [str(sluice_uid)] * 4
                assert int(harness.proc_status(w)["CapEff"], 16) == 0

            sd.systemctl("reload", "sluice.service")
            st = sd.show("sluice.service")
            assert st["ActiveState"] == "active" and "reloaded, generation 1" in st["StatusText"], st
            assert sd.host_pid(int(st["MainPID"])) == master
            harness.wait_for(lambda: not set(harness.children_of(master)) & set(workers), 10.0,
                             what="the old workers to drain")
            wait_ok(https_port, tls=True)

            sd.systemctl("stop", "sluice.service")
            st = sd.show("sluice.service")
            assert (st["ActiveState"], st["Result"], st["ExecMainStatus"]) == ("inactive", "success", "0"), st
            journal = sd.journal("sluice.service", manager=True)
            assert "configuration /etc/sluice/sluice.yaml is ok" in journal, journal
            errlog = open("/var/log/sluice/error.log").read()
            assert "workers run as user sluice" in errlog and "reloaded: generation 1" in errlog
            bad = [ln for ln in errlog.splitlines() if "[warn]" in ln or "[error]" in ln]
            assert bad == [], errlog
        dpkg("-P", "sluice")
        assert leftovers() == []
    finally:
        if origin is not None:
            origin.close()
        if pkg_state():
            subprocess.run(["dpkg", "-P", "sluice"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_deb_maintainer_scripts_under_systemd(tmp_path, sluice_bin, package_lock, deb):
    """The package under a real systemd, as on a Debian host, driven by the
    docs' own commands (their blocks are marked run-by this test):
    docs/quickstart.md's "As a service" block (apt-get install of the .deb:
    postinst enables and starts the service on its installed config, ports
    80, 443 and 9901; sluice -t; systemctl reload; journalctl), then
    docs/operator-guide.md's LimitNOFILE drop-in; then a reinstall (upgrade:
    postinst restarts), dpkg -r (prerm stops) and dpkg -P (nothing left).
    dpkg and apt-get run inside the namespaces; a policy-rc.d that forbids
    starting services (container images ship one) is replaced, inside only."""
    deb_preconditions(sluice_bin)
    import sysdns
    from test_docs import run_by_block
    why = sysdns.unavailable_reason()
    if why:
        pytest.skip("systemd cannot boot here: " + why)
    busy = [p for p in (80, 443, 9901) if harness.port_accepts(p)]
    if busy:
        pytest.skip("the packaged config's ports are in use here: %s" % busy)
    me = "test_deb_maintainer_scripts_under_systemd"
    quickstart = run_by_block("docs/quickstart.md", me)
    dropin = run_by_block("docs/operator-guide.md", me)
    allow = str(tmp_path / "policy-rc.d")
    with open(allow, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(allow, 0o755)
    binds = [(allow, "/usr/sbin/policy-rc.d", "ro")] if os.path.exists("/usr/sbin/policy-rc.d") else []
    # The deb where the namespace can read it (its /tmp is private).
    deb_in = os.path.join("/run/sysdns", os.path.basename(deb))
    origin = None
    # own_unit_dirs: the unit file the package installs and the links
    # deb-systemd-helper makes stay in the namespace.
    with sysdns.SystemdNS(extra_binds=binds, own_unit_dirs=True) as sd:
        try:
            shutil.copy(deb, os.path.join(sd.stage, os.path.basename(deb)))
            if not harness.port_accepts(8080):
                origin = Origin(port=8080)

            def sh_in(cmd):
                r = sd.run("sh", "-c", cmd, check=False, timeout=180)
                assert r.returncode == 0, "`%s` -> %d\n%s%s" % (cmd, r.returncode, r.stdout, r.stderr)
                return r.stdout + r.stderr

            # quickstart.md, "As a service".
            assert quickstart[0] == "make deb", quickstart   # built by the deb fixture
            outs = {}
            for cmd in quickstart[1:]:
                cmd = cmd.split("  #")[0].strip()
                outs[cmd] = sh_in(cmd.replace("./build-deb/sluice_*.deb", deb_in))
            install = [c for c in outs if c.startswith("apt-get install")]
            assert install and "did not start" not in outs[install[0]], outs
            # systemctl reload returns once ExecReload ran; the unit stays
            # "reloading" until sluice's new workers serve (READY=1), which
            # a loaded machine can take seconds to reach
            sd.wait_state("sluice.service", "active", "running", timeout=30.0)
            st = sd.show("sluice.service")
            assert (st["ActiveState"], st["SubState"]) == ("active", "running"), sd.status("sluice.service")
            assert "reloaded, generation 1" in st["StatusText"], st   # systemctl reload ran
            assert sd.run("systemctl", "is-enabled", "sluice.service").stdout.strip() == "enabled"
            assert any("is ok" in o for c, o in outs.items() if c.startswith("sluice -t")), outs
            assert any("Reloaded" in o for c, o in outs.items() if c.startswith("journalctl")), outs
            wait_ok(443, tls=True) if origin else harness.wait_port(443, 5.0)

            # operator-guide.md: the LimitNOFILE drop-in, then a restart.
            for cmd in dropin:
                sh_in(cmd)
            sd.systemctl("restart", "sluice.service")
            st = sd.show("sluice.service", ("ActiveState", "LimitNOFILE", "MainPID"))
            assert (st["ActiveState"], st["LimitNOFILE"]) == ("active", "200000"), st
            first = st["MainPID"]

            sh_in("dpkg -i " + deb_in)                 # an upgrade: postinst restarts
            st = sd.show("sluice.service")
            assert st["ActiveState"] == "active" and st["MainPID"] != first, st
            wait_ok(80) if origin else harness.wait_port(80, 5.0)

            sh_in("dpkg -r sluice")                    # prerm stops it
            st = sd.show("sluice.service")
            assert st["ActiveState"] in ("inactive", "failed") and st["Result"] == "success", st
            assert not harness.port_accepts(80)
            sh_in("rm -rf /etc/systemd/system/sluice.service.d")   # the drop-in is the admin's
            sh_in("dpkg -P sluice")
            assert leftovers() == []
            inside = sd.run("sh", "-c", "ls -d /lib/systemd/system/sluice.service "
                            "/etc/systemd/system/*/sluice.service /etc/systemd/system/sluice.service "
                            "/var/lib/systemd/deb-systemd-helper-*/*sluice* 2>/dev/null", check=False)
            assert inside.stdout == "", inside.stdout
        finally:
            if origin is not None:
                origin.close()
            if pkg_state():
                sd.run("dpkg", "-P", "sluice", check=False, timeout=120)
    if pkg_state():
        subprocess.run(["dpkg", "-P", "sluice"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
