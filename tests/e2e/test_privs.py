"""Privilege drop (issue 9): a root master binds the ports and reads the
private keys, then each worker gives up root for `user:` before it serves;
a root master refuses to start root workers unless `user: root` says so.

Every test here runs sluice as root (they skip otherwise), with its files in
pytest's tmp_path, which only root may enter: the workers never open a file
by path (their log files come from the master on SIGUSR1).
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
    # A worker forked a moment ago may still be setting up as root (it
    # switches before it reports ready, i.e. before it serves).
    def switched():
        ws = s.worker_pids()
        return len(ws) == s.config["workers"] and all(ids(w)[0] == [uid] * 4 for w in ws)
    H.wait_for(switched, 5.0, what="the workers to switch to uid %d" % uid)
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


def test_workers_run_as_user(sluice, demo):
    d = demo()
    s = sluice(config(d, admin=H.admin_config()))
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


def test_group_key_sets_the_workers_group(sluice, demo):
    d = demo()
    cfg = config(d)
    cfg["group"] = "daemon"
    s = sluice(cfg)
    daemon = grp.getgrnam("daemon").gr_gid
    assert_workers_are(s, NOBODY.pw_uid, daemon)
    assert H.http_request(s.port).status == 200


def test_logs_reopen_after_rotation(sluice, demo):
    """On SIGUSR1 the master reopens (creating) the log files and hands the
    descriptors to its workers, which could not open them: the files are
    root's, in a directory only root may enter."""
    d = demo()
    s = sluice(config(d))
    assert os.stat(os.path.dirname(s.access_log)).st_mode & 0o077 == 0
    assert H.http_request(s.port, "GET", "/before-rotation").status == 200
    H.wait_for(lambda: "/before-rotation" in H.read_text(s.access_log), 3.0, what="the first line")
    assert os.stat(s.access_log).st_uid == 0
    os.rename(s.access_log, s.access_log + ".1")
    os.rename(s.error_log, s.error_log + ".1")
    s.signal(signal.SIGUSR1)
    H.wait_for(lambda: os.path.exists(s.access_log), 3.0, what="the master to create the new log")

    def logged():
        assert H.http_request(s.port, "GET", "/after-rotation").status == 200
        return "/after-rotation" in H.read_text(s.access_log)
    H.wait_for(logged, 5.0, what="a worker to write to the new access log")
    assert os.stat(s.access_log).st_uid == 0
    assert "/after-rotation" not in H.read_text(s.access_log + ".1")
    assert "cannot open log" not in H.read_text(s.stderr_path)
    # Every worker writes to the new files (each got them, not only one).
    # Each takes them on its own loop turn: the one that served the request
    # above may have been first.
    def fd_targets(w):
        out = set()
        for f in os.listdir("/proc/%d/fd" % w):
            try:
                out.add(os.readlink("/proc/%d/fd/%s" % (w, f)))
            except FileNotFoundError:
                pass  # closed between the listing and the read: the switch under way
        return out

    def open_logs():
        return {w: fd_targets(w) for w in s.worker_pids()}

    def all_switched():
        return all(s.access_log in fds and s.error_log in fds and
                   s.access_log + ".1" not in fds and s.error_log + ".1" not in fds
                   for fds in open_logs().values())
    try:
        H.wait_for(all_switched, 5.0, what="every worker on the new log files")
    except TimeoutError:
        raise AssertionError(open_logs())


def test_root_only_key_is_loaded_before_the_drop(sluice, demo, tmp_path):
    tls = str(tmp_path / "tls")
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
    s = sluice(cfg)
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


def test_root_master_without_user_refuses(sluice_bin, tmp_path, demo):
    wd = str(tmp_path)
    d = demo()
    port = H.free_port()
    path = write(os.path.join(wd, "root.yaml"), plain_config(port, d.port, wd))
    # -t checks the file, not who starts it.
    r = subprocess.run([sluice_bin, "-t", "-c", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sluice_bin, "-c", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    assert r.stderr == ("sluice: %s: refusing to run workers as root: set `user:` to an unprivileged "
                        "account (e.g. user: sluice), or `user: root` to insist\n" % path)
    assert not H.port_accepts(port)
    # `user: root` is the explicit opt-in.
    write(path, plain_config(port, d.port, wd) + "user: root\nworkers: 1\n")
    p = subprocess.Popen([sluice_bin, "-c", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        H.wait_port(port, 10.0, proc=p)
        H.wait_for(lambda: len(H.children_of(p.pid)) == 1, 5.0, what="the worker")
        assert ids(H.children_of(p.pid)[0])[0] == [0] * 4
        H.wait_for(lambda: "workers run as root (user: root)" in H.read_text(
            os.path.join(wd, "error.log")), 3.0, what="the summary line")
        assert H.http_request(port).status == 200
    finally:
        H.kill_popen(p)


def test_reload_to_root_workers_is_rejected(sluice, demo):
    d = demo()
    s = sluice(config(d))
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
    ("user: root\ngroup: daemon\n", 2, "group", "applies only with a user other than root"),
    ("user: \"\"\n", 1, "user", ""),
])
def test_bad_user_or_group_names_file_line_and_key(sluice_bin, tmp_path, text, line, key, msg):
    wd = str(tmp_path)
    path = write(os.path.join(wd, "bad.yaml"), text + plain_config(H.free_port(), 9, wd))
    r = subprocess.run([sluice_bin, "-t", "-c", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    m = re.search(r"^%s:(\d+):\d+: %s: (.*)$" % (re.escape(path), key), r.stderr, re.M)
    assert m, r.stderr
    assert int(m.group(1)) == line and msg in m.group(2), r.stderr


def bounded_caps_command(binary, drop):
    """BINARY run by root without the capabilities DROP (setpriv): how a
    hardened unit that forgot CAP_SETUID would start it."""
    return ["setpriv", "--bounding-set", ",".join("-" + c for c in drop), "--inh-caps=-all", binary]


NOCAP = "cannot switch workers to user nobody: the master lacks CAP_SETUID or CAP_SETGID"


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_master_without_setuid_capability_refuses_to_start(sluice_bin, tmp_path, demo, daemon):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    wd = str(tmp_path)
    d = demo()
    port = H.free_port()
    path = write(os.path.join(wd, "nocap.yaml"), plain_config(port, d.port, wd) + "user: nobody\n")
    cmd = bounded_caps_command(sluice_bin, ["setuid", "setgid"]) + ["-c", path] + (["-d"] if daemon else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert (r.returncode, r.stderr) == (1, "sluice: %s: %s (a service manager's "
                                           "CapabilityBoundingSet?)\n" % (path, NOCAP))
    assert not H.port_accepts(port)
    # sluice -t says so too (the file itself is fine).
    r = subprocess.run(bounded_caps_command(sluice_bin, ["setuid", "setgid"]) + ["-t", "-c", path],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and NOCAP in r.stderr and "warning" in r.stderr, r.stderr


def test_reload_that_could_not_switch_keeps_the_old_workers(sluice, demo):
    """Root workers (user: root) under a master without CAP_SETUID; a reload
    to user: nobody is rejected, and the old workers keep serving (they used
    to be stopped while the new ones failed to switch, over and over)."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing")
    d = demo()
    cfg = config(d)
    cfg["user"] = "root"
    s = sluice(cfg, start=False)
    s.command = lambda: bounded_caps_command(s.binary, ["setuid", "setgid"])
    s.start()
    old = set(s.worker_pids())
    cfg = dict(cfg, user="nobody")
    off = s.log_offsets()[0]
    s.write_config(cfg)
    s.signal(signal.SIGHUP)
    s.wait_error_log(r"reload rejected: .*" + re.escape(NOCAP), start=off)
    time.sleep(0.3)
    assert set(s.worker_pids()) == old
    assert H.http_request(s.port).status == 200


SHIM = r"""
#include <errno.h>
#include <sys/types.h>
int initgroups(const char *user, gid_t group)
{
	(void)user; (void)group;
	errno = EPERM;
	return -1;
}
"""


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_workers_that_cannot_switch_fail_the_start(sluice_bin, tmp_path, demo, daemon):
    """The workers' own check: initgroups failing in them (an NSS failure,
    simulated with an LD_PRELOAD shim) ends the start with status 1 instead
    of a worker serving as root or a restart loop; -d returns, too."""
    wd = str(tmp_path)
    shim = os.path.join(wd, "shim.so")
    src = write(os.path.join(wd, "shim.c"), SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", shim, src], check=True, timeout=60)
    d = demo()
    port = H.free_port()
    pidf = os.path.join(wd, "sluice.pid")
    path = write(os.path.join(wd, "shim.yaml"), plain_config(port, d.port, wd)
                 + "user: nobody\nworkers: 2\npid_file: %s\n" % pidf)
    env = dict(os.environ, LD_PRELOAD=shim)
    # Under ASan the shim would come before the ASan runtime.
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    t0 = time.monotonic()
    r = subprocess.run([sluice_bin, "-c", path] + (["-d"] if daemon else []), capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL, env=env)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert time.monotonic() - t0 < 10
    log = H.read_text(os.path.join(wd, "error.log"))
    assert re.search(r"\[error\] worker \d: cannot switch to user nobody: initgroups\(nobody\): "
                     r"Operation not permitted", log), log
    assert re.search(r"worker \d \(pid \d+\) exited with status 2 before serving; not starting", log), log
    assert "[error] master: start failed: workers could not set up" in log
    if daemon:
        assert "sluice: the master exited before serving; see %s/error.log" % wd in r.stderr
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
        H.wait_log(os.path.join(public_dir, "error.log"),
                   r"\[warn\] master: user: daemon ignored: the master is not root \(uid %d\), "
                   r"and neither are its workers" % NOBODY.pw_uid)
    finally:
        H.kill_popen(p)


def shimmed_sluice(sluice, demo, tmp_path, name, source, env=()):
    """A sluice (not started) whose processes run with the LD_PRELOAD shim
    built from SOURCE, as root, and ENV; returns it and its config."""
    shim = str(tmp_path / (name + ".so"))
    src = write(str(tmp_path / (name + ".c")), source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", shim, src], check=True, timeout=60)
    cfg = config(demo())
    cfg["user"] = "root"
    s = sluice(cfg, start=False)
    base = s.command
    s.command = lambda: ["env", "LD_PRELOAD=" + shim] + list(env) + [
        "ASAN_OPTIONS=%s:verify_asan_link_order=0" % os.environ.get("ASAN_OPTIONS", "")] + base()
    return s, cfg


SLOW_SHIM = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
static void pause_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}
/* The switch fails: at once in the worker that creates the marker file
 * first, 400 ms later in the others. */
int initgroups(const char *user, gid_t group)
{
	(void)user; (void)group;
	int fd = open(getenv("SHIM_FIRST_MARK"), O_CREAT | O_EXCL | O_WRONLY, 0600);
	if (fd >= 0)
		close(fd);
	else
		pause_ms(400);
	errno = EPERM;
	return -1;
}
/* A worker sets its parent-death signal twice, the second time after the
 * switch, as its last step before it reports ready: that one is slowed,
 * so the first generation is still starting when the reload comes. */
int prctl(int option, ...)
{
	static int deathsig_calls;
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
	unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_PDEATHSIG && ++deathsig_calls == 2)
		pause_ms(atol(getenv("SHIM_SLOW_READY_MS")));
	return (int)syscall(SYS_prctl, option, a2, a3, a4, a5);
}
"""


def test_reload_that_fails_while_the_instance_starts_does_not_stop_it(sluice, demo, tmp_path):
    """A reload whose workers cannot switch users, sent while the first
    generation is still starting (its workers slowed before they report
    ready), with one of the failing workers ending well after the other:
    the reload fails, the late one is a straggler of that failed reload and
    not a worker that failed the start, and the instance starts and serves."""
    s, cfg = shimmed_sluice(sluice, demo, tmp_path, "slowshim", SLOW_SHIM,
                            ["SHIM_SLOW_READY_MS=1500", "SHIM_FIRST_MARK=" + str(tmp_path / "first-failed")])
    s.start()
    off = s.log_offsets()[0]
    s.write_config(dict(cfg, user="nobody"))
    s.signal(signal.SIGHUP)
    s.wait_error_log(r"reload failed: a worker of generation \d+ could not set up", start=off, timeout=10)
    # Both failing workers have been reaped (the late one too), and the
    # first generation has become ready and serves.
    H.wait_for(lambda: len(s.worker_pids()) == 2, 10.0, what="the failed generation's workers to be gone")
    def serves():
        try:
            return H.http_request(s.port, "GET", "/started").status == 200
        except OSError:
            return False
    H.wait_for(serves, 10.0, what="the first generation to serve")
    assert s.alive(), H.read_text(s.error_log)
    log = H.read_text(s.error_log)[off:]
    assert "not starting" not in log, log
    assert log.count("cannot switch to user nobody: initgroups(nobody): Operation not permitted") == 2, log


def test_reload_whose_workers_cannot_set_up_keeps_the_previous_generation(sluice, demo, tmp_path):
    """The new generation's workers fail to switch (initgroups fails in
    them, the LD_PRELOAD shim): the previous workers were never stopped, so
    they serve on, with the previous configuration; a later reload works."""
    s, cfg = shimmed_sluice(sluice, demo, tmp_path, "shim", SHIM)
    s.start()
    old = set(s.worker_pids())
    off = s.log_offsets()[0]
    s.write_config(dict(cfg, user="nobody"))
    s.signal(signal.SIGHUP)
    s.wait_error_log(r"reload failed: a worker of generation 1 could not set up \(see above\); the "
                     r"previous configuration keeps serving as generation 2", start=off, timeout=10)
    log = H.read_text(s.error_log)[off:]
    assert "cannot switch to user nobody: initgroups(nobody): Operation not permitted" in log
    assert "reloaded:" not in log
    H.wait_for(lambda: len(s.worker_pids()) == 2, 5.0, what="the failed generation to be gone")
    assert set(s.worker_pids()) == old
    for w in old:
        assert ids(w)[0] == [0] * 4
    for i in range(4):
        assert H.http_request(s.port, "GET", "/still-%d" % i).status == 200
    # The previous configuration is the running one: a reload to it works.
    off = s.log_offsets()[0]
    s.reload(cfg)
    s.wait_error_log(r"reloaded: generation 3, 2 workers", start=off)
    assert H.http_request(s.port).status == 200
