"""Running as a service: the sd_notify messages systemd sees across start,
reload, failed reload and stop; -d (background with a PID file); `-V`;
the startup summary line per listener."""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest

import harness as H


def recv_msg(sock, timeout=10.0):
    sock.settimeout(timeout * H.SLOW)
    return sock.recv(4096).decode()


def assert_quiet(sock, wait=0.3):
    """No further datagram (absence check: a short fixed wait)."""
    sock.settimeout(wait)
    with pytest.raises(socket.timeout):
        sock.recv(4096)


@pytest.fixture
def notify_sock(tmp_path, monkeypatch):
    """A datagram socket standing in for systemd's; NOTIFY_SOCKET names it
    in the environment sluice is started with."""
    path = str(tmp_path / "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    yield s
    s.close()


RELOADING = re.compile(r"\ARELOADING=1\nMONOTONIC_USEC=\d+\nSTATUS=reloading\Z")


def test_notify_sequence_start_reload_failed_reload_stop(sluice, recorder, notify_sock):
    rb = recorder()
    cfg = H.make_config(H.free_port(), [H.server(rb.port)], workers=2)
    s = sluice(cfg, start=False)
    s.start()
    assert recv_msg(notify_sock) == "READY=1\nMAINPID=%d\nSTATUS=serving: 1 listener, 2 workers" % s.pid
    # READY=1 means every worker's loop is up: each has reported in.
    assert len(s.worker_pids()) == 2
    assert H.http_request(s.port, "GET", "/a").status == 200

    old = set(s.worker_pids())
    s.signal(signal.SIGHUP)
    assert RELOADING.match(recv_msg(notify_sock))
    assert recv_msg(notify_sock) == \
        "READY=1\nSTATUS=serving: 1 listener, 2 workers (reloaded, generation 1)"
    new = [p for p in s.worker_pids() if p not in old]
    assert len(new) == 2, "READY=1 after a reload before the new generation was up"
    assert H.http_request(s.port, "GET", "/b").status == 200

    s.write_config("workers: [\n")
    s.signal(signal.SIGHUP)
    assert RELOADING.match(recv_msg(notify_sock))
    m = recv_msg(notify_sock)
    assert m.startswith("READY=1\nSTATUS=reload failed (")
    assert m.endswith("); still serving the previous configuration")
    assert H.http_request(s.port, "GET", "/c").status == 200

    assert s.stop() == 0
    assert recv_msg(notify_sock) == "STOPPING=1\nSTATUS=stopping: draining workers"
    assert_quiet(notify_sock)


def test_notify_abstract_socket(sluice, recorder, monkeypatch):
    name = "sluice-test-%s" % uuid.uuid4().hex
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        rb = recorder()
        s = sluice(H.make_config(H.free_port(), [H.server(rb.port)]), start=False)
        s.start()
        assert recv_msg(sock).startswith("READY=1\nMAINPID=%d\n" % s.pid)
    finally:
        sock.close()


def test_no_notify_socket_starts_normally(sluice, recorder, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    rb = recorder()
    s = sluice(H.make_config(H.free_port(), [H.server(rb.port)]))
    assert H.http_request(s.port, "GET", "/").status == 200


# ---------------------------------------------------------------- -V

def test_version_lists_build_facts(sluice_bin):
    r = subprocess.run([sluice_bin, "-V"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    facts = dict(line.split(" ", 1) for line in lines)
    assert re.fullmatch(r"\d+\.\d+\.\d+", facts["sluice"])
    assert lines[0].startswith("sluice ")
    for key in ("tls", "lua", "libuv", "llhttp", "libcyaml", "pcre2", "hyperscan",
                "jemalloc", "compiler", "build"):
        assert facts.get(key), "-V lacks %r:\n%s" % (key, r.stdout)
    assert facts["lua"].startswith("Lua 5.")
    assert re.match(r"\d+\.\d+\.\d+", facts["llhttp"])
    assert re.match(r"\d+\.\d+\.\d+", facts["libuv"])
    assert facts["jemalloc"] in ("yes", "no")
    assert re.fullmatch(r"AWS-LC \d+\.\d+\.\d+|OpenSSL 3\..*", facts["tls"]), facts["tls"]


# ---------------------------------------------------------------- summary line

SUMMARY = re.compile(r"\[info\] master: listening on (\S+) \(listener (\S+) -> backend (\S+)\), "
                     r"(\d+) workers, (tls|plain), PROXY in (off|from \d+ networks?)$", re.M)


def test_startup_summary_per_listener_and_after_reload(sluice, recorder):
    rb = recorder()
    p1, p2 = H.free_port(), H.free_port()
    cfg = H.make_config(p1, [H.server(rb.port)], workers=2,
                        listener={"accept_proxy_from": ["127.0.0.0/8"]})
    cfg["listeners"].append({"name": "plain2", "address": "127.0.0.1:%d" % p2, "backend": "app"})
    s = sluice(cfg)
    H.wait_for(lambda: len(SUMMARY.findall(H.read_text(s.error_log))) == 2, 5)
    got = SUMMARY.findall(H.read_text(s.error_log))
    assert got == [("127.0.0.1:%d" % p1, "http", "app", "2", "plain", "from 1 network"),
                   ("127.0.0.1:%d" % p2, "plain2", "app", "2", "plain", "off")]
    s.reload()
    H.wait_for(lambda: len(SUMMARY.findall(H.read_text(s.error_log))) == 4, 5)
    assert SUMMARY.findall(H.read_text(s.error_log))[2:] == got


# ---------------------------------------------------------------- -d

def daemon_config(tmp_path, port, backend_port, **kw):
    cfg = H.make_config(port, [H.server(backend_port)], workers=2,
                        error_log=str(tmp_path / "d-error.log"),
                        access_log=str(tmp_path / "d-access.log"), **kw)
    cfg["pid_file"] = str(tmp_path / "sluice.pid")
    path = tmp_path / "d.yaml"
    path.write_text(H.with_user(H.to_yaml(cfg) + "\n"))
    return cfg, str(path)


def procs_with_arg(arg):
    """PIDs whose command line contains ARG (our config path: unique)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if arg.encode() in argv and H.pid_alive(int(name)):
            out.append(int(name))
    return out


def kill_leftovers(cfg_path):
    for pid in procs_with_arg(cfg_path):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_d(sluice_bin, cfg_path, cwd):
    return subprocess.run([sluice_bin, "-d", "-c", cfg_path], capture_output=True, text=True,
                          timeout=30 * H.SLOW, cwd=cwd)


def test_daemon_pid_file_reload_stop(sluice_bin, recorder, tmp_path):
    rb = recorder()
    cfg, path = daemon_config(tmp_path, H.free_port(), rb.port)
    pid_file = cfg["pid_file"]
    try:
        r = run_d(sluice_bin, path, str(tmp_path))
        assert r.returncode == 0, r.stderr
        # Serving already when -d returns: no waiting here.
        pid = int(open(pid_file).read())
        assert H.pid_alive(pid)
        assert len(H.children_of(pid)) == 2
        assert H.http_request(cfg_port(cfg), "GET", "/x").status == 200
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
        fields = st[st.rfind(")") + 2:].split()
        # Its own session (not ours), of which it is not the leader: it can
        # never acquire a controlling terminal.
        assert int(fields[3]) not in (os.getsid(0), pid)
        assert os.readlink("/proc/%d/fd/0" % pid) == "/dev/null"
        assert os.readlink("/proc/%d/fd/2" % pid) == "/dev/null"

        old = set(H.children_of(pid))
        os.kill(pid, signal.SIGHUP)
        H.wait_for(lambda: not (set(H.children_of(pid)) & old) and len(H.children_of(pid)) == 2,
                   10 * H.SLOW, what="reload")
        assert H.http_request(cfg_port(cfg), "GET", "/y").status == 200

        os.kill(pid, signal.SIGTERM)
        H.wait_for(lambda: not H.pid_alive(pid), 15 * H.SLOW, what="master exit")
        assert not os.path.exists(pid_file)
        assert procs_with_arg(path) == []
    finally:
        kill_leftovers(path)


def cfg_port(cfg):
    return int(cfg["listeners"][0]["address"].rsplit(":", 1)[1])


def test_daemon_bad_config_exits_1_with_error(sluice_bin, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("workers: [\n")
    try:
        r = run_d(sluice_bin, str(path), str(tmp_path))
        assert r.returncode == 1
        assert "is invalid" in r.stderr
        assert procs_with_arg(str(path)) == []
    finally:
        kill_leftovers(str(path))


def test_daemon_listen_failure_after_fork_exits_1_with_error(sluice_bin, recorder, tmp_path):
    """The error comes from the forked master (the port is taken), and
    still reaches the starting terminal."""
    rb = recorder()
    taken = socket.socket()
    taken.bind((H.HOST, 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    cfg, path = daemon_config(tmp_path, port, rb.port)
    try:
        r = run_d(sluice_bin, path, str(tmp_path))
        assert r.returncode == 1
        assert "cannot listen on 127.0.0.1:%d" % port in r.stderr
        H.wait_for(lambda: procs_with_arg(path) == [], 5, what="no process left")
        assert not os.path.exists(cfg["pid_file"])
    finally:
        taken.close()
        kill_leftovers(path)


# ---------------------------------------------------------------- syslog

# syslog(3) always writes to /dev/log. In a private mount namespace, /dev is
# replaced by a directory holding the devices sluice needs and, as "log",
# the test's datagram socket.
PRIVATE_DEV = ('set -e; d="$1"; shift; '
               'for n in null zero random urandom; do : > "$d/$n"; mount --bind "/dev/$n" "$d/$n"; done; '
               'mount --bind "$d" /dev; exec "$@"')


def private_mounts_available():
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10)
    return r.returncode == 0


def syslog_until(sock, pattern, timeout=5.0):
    """Datagrams until one matches PATTERN; returns the match."""
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout * H.SLOW
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            m = rx.search(sock.recv(8192).decode())
        except socket.timeout:
            break
        if m:
            return m
    raise AssertionError("no syslog message matching %r" % pattern)


def test_syslog_error_and_access_lines(sluice, recorder, tmp_path):
    if not private_mounts_available():
        pytest.skip("needs root and unshare -m for a private /dev/log")
    dev = tmp_path / "dev"
    dev.mkdir()
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(dev / "log"))
    try:
        rb = recorder()
        port = H.free_port()
        cfg = H.make_config(port, [H.server(rb.port)], workers=2, error_log="syslog",
                            access_log="syslog")
        cfg["syslog_facility"] = "local3"
        s = sluice(cfg, start=False)
        s.command = lambda: ["unshare", "-m", "sh", "-c", PRIVATE_DEV, "sh", str(dev), s.binary]
        s.start()
        # local3 = 19: <19*8+6> info, <19*8+3> error; LOG_PID stamps each
        # process's own pid.
        m = syslog_until(log, r"^<158>.* sluice\[(\d+)\]: \[info\] master: listening on "
                         r"127\.0\.0\.1:%d \(listener http -> backend app\)" % port)
        assert int(m.group(1)) == s.pid
        assert H.http_request(port, "GET", "/via-syslog").status == 200
        m = syslog_until(log, r"^<158>.* sluice\[(\d+)\]: .*GET /via-syslog")
        assert int(m.group(1)) in s.worker_pids()
        s.write_config("workers: [\n")
        s.signal(signal.SIGHUP)
        m = syslog_until(log, r"^<155>.* sluice\[(\d+)\]: \[error\] master: reload rejected")
        assert int(m.group(1)) == s.pid
    finally:
        log.close()


# ---------------------------------------------------------------- containers

def test_master_as_pid_1_of_a_container(sluice_bin, demo, tmp_path):
    """In a container the master is PID 1, so its workers' parent is 1: a
    worker must not take that for its master having died (it used to drain
    at once, and the master replaced it, over and over)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    d = demo()
    port = H.free_port()
    log = tmp_path / "pid1-error.log"
    cfg = H.make_config(port, [H.server(d.port)], workers=2, error_log=str(log), access_log="off")
    path = tmp_path / "pid1.yaml"
    path.write_text(H.with_user(H.to_yaml(cfg) + "\n"))
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", sluice_bin,
                          "-c", str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        H.wait_port(port, 10.0, proc=p)
        master = H.wait_for(lambda: H.children_of(p.pid), 5.0, what="the master")[0]
        assert H.proc_status(master)["NSpid"].split()[-1] == "1"
        workers = H.wait_for(lambda: len(H.children_of(master)) == 2 and H.children_of(master), 5.0,
                             what="2 workers")
        for i in range(6):
            assert H.http_request(port, "GET", "/c%d" % i).status == 200
        time.sleep(0.5)
        assert sorted(H.children_of(master)) == sorted(workers)
        assert "draining" not in H.read_text(str(log))
        os.kill(master, signal.SIGTERM)
        assert p.wait(timeout=15) == 0
        assert "master: stopped" in H.read_text(str(log))
    finally:
        H.kill_popen(p)


CRASH_SHIM = r"""
#include <signal.h>
#include <sys/types.h>
int initgroups(const char *user, gid_t group)
{
	(void)user; (void)group;
	raise(SIGKILL);
	return -1;
}
"""


@pytest.mark.parametrize("daemon", [False, True], ids=["foreground", "daemon"])
def test_workers_crashing_before_serving_fail_the_start(sluice_bin, demo, tmp_path, daemon):
    """Workers killed by a signal before they are ready (an LD_PRELOAD shim
    kills them as they switch users) are restarted, up to the crash burst
    limit; at start they have never served, so the start fails then, with
    status 1, instead of -d waiting forever."""
    if os.geteuid() != 0:
        pytest.skip("switching users needs root")
    shim = str(tmp_path / "crash.so")
    src = tmp_path / "crash.c"
    src.write_text(CRASH_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", shim, str(src)], check=True, timeout=60)
    d = demo()
    port = H.free_port()
    log = tmp_path / "crash-error.log"
    cfg = H.make_config(port, [H.server(d.port)], workers=2, error_log=str(log), access_log="off")
    cfg["user"] = "nobody"
    cfg["pid_file"] = str(tmp_path / "crash.pid")
    path = tmp_path / "crash.yaml"
    path.write_text(H.to_yaml(cfg) + "\n")
    env = dict(os.environ, LD_PRELOAD=shim)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    t0 = time.monotonic()
    r = subprocess.run([sluice_bin, "-c", str(path)] + (["-d"] if daemon else []), capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert time.monotonic() - t0 < 20
    text = H.read_text(str(log))
    assert re.search(r"worker \d \(pid \d+\) killed by signal 9; starting a new one", text), text
    assert "workers crash too often before serving; not starting" in text
    assert "[error] master: start failed" in text
    assert not os.path.exists(cfg["pid_file"])
    assert not H.port_accepts(port)
