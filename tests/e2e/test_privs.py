"""Privilege drop (issue 9): a root master binds the ports and reads the
private keys, then each worker gives up root for `user:` before it serves;
a root master refuses to start root workers unless `user: root` says so.

Every test here runs sluice as root (they skip otherwise) with its files in
a directory every user may enter (conftest's public_dir), because workers
that gave up root reopen their logs there by path on SIGUSR1.
"""

import os
import pwd
import grp
import re
import shutil
import signal
import subprocess
import time

import pytest

import harness as H

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs a root master")

NOBODY = pwd.getpwnam("nobody")


def ids(pid):
    """(real, effective, saved, fs uids), the same for gids, the
    supplementary groups and the effective capabilities of PID."""
    st = H.proc_status(pid)
    return ([int(x) for x in st["Uid"].split()], [int(x) for x in st["Gid"].split()],
            sorted(int(x) for x in st["Groups"].split()), int(st["CapEff"], 16))


def config(demo, **kw):
    cfg = H.make_config(H.free_port(), [H.server(demo.port)], workers=2, **kw)
    cfg["user"] = "nobody"
    return cfg


def assert_workers_are(s, uid, gid, groups=None):
    pids = s.worker_pids()
    assert len(pids) == s.config["workers"]
    for w in pids:
        u, g, sup, cap = ids(w)
        assert u == [uid] * 4, (w, u)
        assert g == [gid] * 4, (w, g)
        if groups is not None:
            assert sup == sorted(groups), (w, sup)
        assert cap == 0, "worker %d kept capabilities %x" % (w, cap)
    u, _, _, _ = ids(s.proc.pid)
    assert u == [0] * 4, "the master must stay root (it rereads keys on reload)"


def test_workers_run_as_user(public_sluice, demo):
    d = demo()
    s = public_sluice(config(d, admin=H.admin_config()))
    assert_workers_are(s, NOBODY.pw_uid, NOBODY.pw_gid, [NOBODY.pw_gid])
    assert H.http_request(s.port, "GET", "/as-nobody").status == 200
    s.wait_error_log(r"workers run as user nobody \(uid %d, gid %d\)" % (NOBODY.pw_uid, NOBODY.pw_gid))

    # SIGHUP: the new generation switches too and serves.
    s.reload()
    assert_workers_are(s, NOBODY.pw_uid, NOBODY.pw_gid)
    assert H.http_request(s.port, "GET", "/after-hup").status == 200

    # POST /reload comes from worker 0, which may not signal a root master
    # (EPERM): the request reaches it through shared memory instead.
    old = set(s.worker_pids())
    r = s.admin_post("/reload")
    assert r.status == 202
    H.wait_for(lambda: not (set(s.worker_pids()) & old) and len(s.worker_pids()) == 2, 10.0,
               what="the admin reload to replace the workers")
    assert_workers_are(s, NOBODY.pw_uid, NOBODY.pw_gid)
    assert H.http_request(s.port, "GET", "/after-admin-reload").status == 200
    assert s.stop() == 0


def test_group_key_sets_the_workers_group(public_sluice, demo):
    d = demo()
    cfg = config(d)
    cfg["group"] = "daemon"
    s = public_sluice(cfg)
    daemon = grp.getgrnam("daemon").gr_gid
    assert_workers_are(s, NOBODY.pw_uid, daemon)
    assert H.http_request(s.port).status == 200


def test_logs_reopen_after_rotation(public_sluice, demo):
    """The master reopens (creating) the log files and gives them to the
    workers' user; the workers, no longer root, then reopen them by path."""
    d = demo()
    s = public_sluice(config(d))
    assert H.http_request(s.port, "GET", "/before-rotation").status == 200
    H.wait_for(lambda: "/before-rotation" in H.read_text(s.access_log), 3.0, what="the first line")
    assert os.stat(s.access_log).st_uid == NOBODY.pw_uid
    os.rename(s.access_log, s.access_log + ".1")
    os.rename(s.error_log, s.error_log + ".1")
    s.signal(signal.SIGUSR1)
    H.wait_for(lambda: os.path.exists(s.access_log), 3.0, what="the master to create the new log")

    def logged():
        assert H.http_request(s.port, "GET", "/after-rotation").status == 200
        return "/after-rotation" in H.read_text(s.access_log)
    H.wait_for(logged, 5.0, what="a worker to write to the new access log")
    assert os.stat(s.access_log).st_uid == NOBODY.pw_uid
    assert "/after-rotation" not in H.read_text(s.access_log + ".1")
    assert "cannot open log" not in H.read_text(s.stderr_path)


def test_root_only_key_is_loaded_before_the_drop(public_sluice, demo, public_dir):
    tls = os.path.join(public_dir, "tls")
    subprocess.run(["sh", os.path.join(REPO, "conf/make-demo-certs.sh"), tls], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    os.chmod(tls, 0o700)
    for k in ("ecdsa.key", "rsa.key"):
        os.chmod(os.path.join(tls, k), 0o600)
        assert os.stat(os.path.join(tls, k)).st_uid == 0
    d = demo()
    cfg = config(d, listener={"tls": {"certificates": [
        {"cert": os.path.join(tls, "ecdsa.pem"), "key": os.path.join(tls, "ecdsa.key")},
        {"cert": os.path.join(tls, "rsa.pem"), "key": os.path.join(tls, "rsa.key")}]}})
    s = public_sluice(cfg)
    assert_workers_are(s, NOBODY.pw_uid, NOBODY.pw_gid)

    def https_ok():
        r = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}",
                            "https://127.0.0.1:%d/tls" % s.port], capture_output=True, text=True,
                           timeout=10)
        return r.stdout == "200"
    assert https_ok()
    # The workers could not read the key themselves...
    r = subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                        "cat", os.path.join(tls, "ecdsa.key")], capture_output=True, timeout=10)
    assert r.returncode != 0
    # ...and a reload (the master rereads every key) still serves TLS.
    s.reload()
    assert https_ok()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def plain_config(port, bport, d):
    return ("listeners:\n  - address: 127.0.0.1:%d\n    backend: app\n"
            "backends:\n  - name: app\n    servers:\n      - address: 127.0.0.1:%d\n"
            "error_log: %s/error.log\n" % (port, bport, d))


def test_root_master_without_user_refuses(sluice_bin, public_dir, demo):
    d = demo()
    port = H.free_port()
    path = write(os.path.join(public_dir, "root.yaml"), plain_config(port, d.port, public_dir))
    # -t checks the file, not who starts it.
    r = subprocess.run([sluice_bin, "-t", "-c", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sluice_bin, "-c", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    assert r.stderr == ("sluice: %s: refusing to run workers as root: set `user:` to an unprivileged "
                        "account (e.g. user: sluice), or `user: root` to insist\n" % path)
    assert not H.port_accepts(port)
    # `user: root` is the explicit opt-in.
    write(path, plain_config(port, d.port, public_dir) + "user: root\nworkers: 1\n")
    p = subprocess.Popen([sluice_bin, "-c", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        H.wait_port(port, 10.0, proc=p)
        H.wait_for(lambda: len(H.children_of(p.pid)) == 1, 5.0, what="the worker")
        assert ids(H.children_of(p.pid)[0])[0] == [0] * 4
        H.wait_for(lambda: "workers run as root (user: root)" in H.read_text(
            os.path.join(public_dir, "error.log")), 3.0, what="the summary line")
        assert H.http_request(port).status == 200
    finally:
        H.kill_popen(p)


def test_reload_to_root_workers_is_rejected(public_sluice, demo):
    d = demo()
    s = public_sluice(config(d))
    old = set(s.worker_pids())
    # Written directly: the harness's write_config would add `user: root`.
    text = H.to_yaml({k: v for k, v in s.config.items() if k != "user"}) + "\n"
    assert "user" not in text
    write(s.config_path, text)
    off = s.log_offsets()[0]
    s.signal(signal.SIGHUP)
    s.wait_error_log(r"reload rejected: .*refusing to run workers as root", start=off)
    s.wait_error_log(r"reload rejected: keeping the running configuration", start=off)
    time.sleep(0.3)
    assert set(s.worker_pids()) == old
    assert_workers_are(s, NOBODY.pw_uid, NOBODY.pw_gid)
    assert H.http_request(s.port).status == 200


@pytest.mark.parametrize("text,line,key,msg", [
    ("user: no-such-account-x\n", 1, "user", 'no such user "no-such-account-x"'),
    ("user: nobody\ngroup: no-such-group-x\n", 2, "group", 'no such group "no-such-group-x"'),
    ("group: daemon\n", 1, "group", "needs `user:`"),
    ("user: \"\"\n", 1, "user", ""),
])
def test_bad_user_or_group_names_file_line_and_key(sluice_bin, public_dir, text, line, key, msg):
    path = write(os.path.join(public_dir, "bad.yaml"), text + plain_config(H.free_port(), 9, public_dir))
    r = subprocess.run([sluice_bin, "-t", "-c", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    m = re.search(r"^%s:(\d+):\d+: %s: (.*)$" % (re.escape(path), key), r.stderr, re.M)
    assert m, r.stderr
    assert int(m.group(1)) == line and msg in m.group(2), r.stderr


def bounded_caps_command(binary, drop):
    """BINARY run by root without the capabilities DROP (setpriv): how a
    hardened unit that forgot CAP_SETUID would start it."""
    return ["setpriv", "--bounding-set", ",".join("-" + c for c in drop), "--inh-caps=-all", binary]


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_workers_that_cannot_switch_fail_the_start(sluice_bin, public_dir, demo, daemon):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    d = demo()
    port = H.free_port()
    pidf = os.path.join(public_dir, "sluice.pid")
    path = write(os.path.join(public_dir, "nocap.yaml"), plain_config(port, d.port, public_dir)
                 + "user: nobody\nworkers: 2\npid_file: %s\n" % pidf)
    cmd = bounded_caps_command(sluice_bin, ["setuid", "setgid"]) + ["-c", path] + (["-d"] if daemon else [])
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert time.monotonic() - t0 < 10
    log = H.read_text(os.path.join(public_dir, "error.log"))
    assert re.search(r"\[error\] worker \d: cannot switch to user nobody: (initgroups|setgid|setuid)\(.*"
                     r"Operation not permitted", log), log
    assert re.search(r"worker \d \(pid \d+\) exited with status 2 before serving; not starting", log), log
    assert "[error] master: start failed: workers could not set up" in log
    if daemon:
        assert "sluice: the master exited before serving; see %s/error.log" % public_dir in r.stderr
    assert not os.path.exists(pidf)
    assert not H.port_accepts(port)


def test_non_root_master_ignores_user(sluice_bin, public_dir, demo):
    """Started as nobody, the workers stay nobody: `user:` cannot apply,
    and the error log says so."""
    d = demo()
    port = H.free_port()
    os.chown(public_dir, NOBODY.pw_uid, NOBODY.pw_gid)
    path = write(os.path.join(public_dir, "nonroot.yaml"),
                 plain_config(port, d.port, public_dir) + "user: daemon\nworkers: 1\n")
    p = subprocess.Popen(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
                          sluice_bin, "-c", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        H.wait_port(port, 10.0, proc=p)
        H.wait_for(lambda: len(H.children_of(p.pid)) == 1, 5.0, what="the worker")
        assert ids(H.children_of(p.pid)[0])[0] == [NOBODY.pw_uid] * 4
        assert H.http_request(port).status == 200
        log = H.read_text(os.path.join(public_dir, "error.log"))
        assert re.search(r"\[warn\] master: user: daemon ignored: the master is not root \(uid %d\), "
                         r"and neither are its workers" % NOBODY.pw_uid, log), log
    finally:
        H.kill_popen(p)
