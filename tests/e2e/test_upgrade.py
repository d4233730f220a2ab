"""Binary upgrade with the ports kept open (SIGUSR2: the master execs the
binary at its path, hands over its listening sockets, and drains once the
new master serves), and systemd socket activation (LISTEN_FDS).

The binary runs from a copy in the test directory, so a test can replace
the file under a running master, as a package upgrade does."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import harness as H
from test_process_reload import Load


def copy_binary(src, dst):
    """Put SRC at DST the way a package manager does: a new file renamed
    over the old (the running binary's file cannot be written)."""
    tmp = dst + ".new"
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dst)


def write_script(path, text):
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg, keep_notify=False):
    """A sluice running from its own copy of the binary, with a pid file,
    once it serves: an upgrade is refused until then. READY=1 on a socket
    standing in for systemd's tells; the socket is closed after it, so
    later notifications fail at once instead of filling it (KEEP_NOTIFY:
    kept open as s.notify, for the test to read and close)."""
    exe = str(tmp_path / "sbin" / "sluice")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    copy_binary(sluice_bin, exe)
    cfg["pid_file"] = str(tmp_path / "sluice.pid")
    npath = str(tmp_path / "ready.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(npath)
    ns.settimeout(10 * H.SLOW)
    monkeypatch.setenv("NOTIFY_SOCKET", npath)
    try:
        s = sluice(cfg, start=False)
        s.binary = exe
        s.start()
        assert ns.recv(4096).decode().startswith("READY=1\n")
        if keep_notify:
            s.notify, ns = ns, None
    finally:
        if ns is not None:
            ns.close()
            os.unlink(npath)
    assert read_pid(cfg["pid_file"]) == s.pid
    return s, exe, cfg["pid_file"]


def upgrade(s, pid_file, workers, timeout=15):
    """SIGUSR2 to the master named by PID_FILE; waits until a new master
    serves with WORKERS workers, the old one has exited and the .oldbin file
    is gone. Returns the new master's pid."""
    old = read_pid(pid_file)
    assert old and H.pid_alive(old)
    off = len(H.read_text(s.error_log))
    os.kill(old, signal.SIGUSR2)

    def done():
        new = read_pid(pid_file)
        if not new or new == old or os.path.exists(pid_file + ".oldbin") or H.pid_alive(old):
            return None
        return new if len(H.children_of(new)) == workers else None
    new = H.wait_for(done, timeout, what="upgrade of master %d" % old)
    s.wait_error_log(r"upgrade: the new master \(pid %d\) serves; this master \(pid %d\) drains"
                     % (new, old), start=off)
    return new


def stop_master(pid, timeout=15):
    os.kill(pid, signal.SIGTERM)
    H.wait_for(lambda: not H.pid_alive(pid), timeout, what="master %d to stop" % pid)


# ---------------------------------------------------------------- SIGUSR2

def test_upgrade_under_load_20_times_zero_failures(sluice, sluice_bin, demo, tmp_path, monkeypatch):
    """20 upgrades in a row while clients send requests on new and on
    keepalive connections: no request fails, every upgrade makes a new
    master and ends the old one. The worker count alternates between 2 and
    3, so the new master adds sockets beside the inherited ones, or shares
    the inherited ones out (the SO_REUSEPORT group stays the same)."""
    a = demo(size=111, threads=32)
    port = H.free_port()

    def cfg(workers):
        return H.make_config(port, [H.server(a.port)], workers=workers, timeouts={"drain": "3s"})
    s, _, pid_file = upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg(2))
    masters = [s.pid]
    load = Load(port, sizes=(111,), keepalive=1, fresh=2).start()
    try:
        load.wait_more(30)
        for i in range(20):
            workers = 3 if i % 2 == 0 else 2
            c = cfg(workers)
            c["pid_file"] = pid_file
            s.write_config(c)
            masters.append(upgrade(s, pid_file, workers))
            load.wait_more(10)
    finally:
        load.finish()
    assert load.failures == [], load.failures[:10]
    assert len(set(masters)) == 21, masters
    assert not any(H.pid_alive(p) for p in masters[:-1])
    assert len(re.findall(r"upgrade: serving; the old master", H.read_text(s.error_log))) == 20
    # The last master still serves, and stops like any other.
    assert H.http_request(port, "GET", "/").status == 200
    workers = H.children_of(masters[-1])
    stop_master(masters[-1])
    assert not os.path.exists(pid_file)
    assert not any(H.pid_alive(w) for w in workers)
    assert not H.port_accepts(port)


def test_upgrade_to_failing_binary_keeps_serving(sluice, sluice_bin, demo, tmp_path, monkeypatch):
    """A new binary that exits at once is refused by the check the old
    master runs first (`<binary> -t -c <config>`), its output in the error
    log; so is a configuration that no longer loads. A binary that passes
    the check but exits at start fails the upgrade. Each time the old
    master serves on with its workers and its pid file; a later upgrade
    with both fixed works."""
    a = demo(size=50)
    port = H.free_port()
    cfg = H.make_config(port, [H.server(a.port)], workers=2)
    s, exe, pid_file = upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg)
    workers = sorted(s.worker_pids())

    def intact():
        assert read_pid(pid_file) == s.pid and not os.path.exists(pid_file + ".oldbin")
        assert sorted(s.worker_pids()) == workers

    write_script(exe, "#!/bin/sh\necho 'broken build' >&2\nexit 1\n")
    off = len(H.read_text(s.error_log))
    s.signal(signal.SIGUSR2)
    s.wait_error_log(r"\[error\] master: upgrade refused \(SIGUSR2\): %s -t -c %s exited with status 1; "
                     r"this master keeps serving$" % (re.escape(exe), re.escape(s.config_path)),
                     timeout=10, start=off)
    s.wait_error_log(r"\[error\] master: upgrade refused \(SIGUSR2\): %s -t: broken build$" % re.escape(exe),
                     start=off)
    assert "new master pid" not in H.read_text(s.error_log)[off:]
    intact()
    for i in range(5):
        assert H.http_request(port, "GET", "/a%d" % i).status == 200

    # Passes the check, fails at start: the failure after the launch.
    real = str(tmp_path / "sluice.real")
    copy_binary(sluice_bin, real)
    write_script(exe, "#!/bin/sh\ncase \" $* \" in *\" -t \"*) exec %s \"$@\";; esac\n"
                 "echo 'broken start' >&2\nexit 1\n" % real)
    off = len(H.read_text(s.error_log))
    s.signal(signal.SIGUSR2)
    s.wait_error_log(r"\[error\] master: upgrade failed: the new master \(pid \d+\) exited before serving "
                     r"\(its error is on the standard error it shares with this master\); "
                     r"this master \(pid %d\) keeps serving" % s.pid, timeout=10, start=off)
    assert "broken start" in H.read_text(s.stderr_path)
    intact()
    assert H.http_request(port, "GET", "/b").status == 200

    copy_binary(sluice_bin, exe)
    good = open(s.config_path).read()
    s.write_config("workers: [\n")
    off = len(H.read_text(s.error_log))
    s.signal(signal.SIGUSR2)
    s.wait_error_log(r"upgrade refused \(SIGUSR2\): %s -t: sluice: configuration %s is invalid$"
                     % (re.escape(exe), re.escape(s.config_path)), timeout=10, start=off)
    s.wait_error_log(r"upgrade refused \(SIGUSR2\): .* exited with status 1; this master keeps serving$",
                     start=off)
    intact()
    assert H.http_request(port, "GET", "/c").status == 200

    s.write_config(good)
    new = upgrade(s, pid_file, 2)
    assert new != s.pid
    assert H.http_request(port, "GET", "/d").status == 200
    stop_master(new)


def test_upgrade_pid_files_and_refusals(sluice, sluice_bin, demo, tmp_path, monkeypatch):
    """While the new master starts, the pid file is <pid_file>.oldbin (the
    old master's pid) and a second SIGUSR2 or a SIGHUP is refused with a log
    line; once it serves, the pid file names it and .oldbin is gone. The
    refused SIGHUP answers systemd as a failed reload does (RELOADING=1,
    then READY=1 with the reason): under Type=notify-reload, `systemctl
    reload` would otherwise wait for it until its timeout. A SIGUSR2
    during a reload is refused too (an upgrade needs a settled
    generation)."""
    a = demo(size=50)
    port = H.free_port()
    cfg = H.make_config(port, [H.server(a.port)], workers=1)
    s, exe, pid_file = upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg, keep_notify=True)
    real = str(tmp_path / "sluice.real")
    copy_binary(sluice_bin, real)
    gate = str(tmp_path / "gate")
    # A new binary that waits for the test before it starts (its check,
    # `-t`, runs at once).
    write_script(exe, "#!/bin/sh\ncase \" $* \" in *\" -t \"*) exec %s \"$@\";; esac\n"
                 "while [ ! -e %s ]; do sleep 0.02; done\nexec %s \"$@\"\n" % (real, gate, real))
    off = len(H.read_text(s.error_log))
    s.signal(signal.SIGUSR2)
    s.wait_error_log(r"upgrade: starting %s as the new master, handing over 1 listening socket$"
                     % re.escape(exe), start=off)
    s.wait_error_log(r"upgrade: new master pid \d+ starting$", start=off)
    H.wait_for(lambda: os.path.exists(pid_file + ".oldbin"), 5, what=".oldbin")
    assert read_pid(pid_file + ".oldbin") == s.pid and not os.path.exists(pid_file)
    s.signal(signal.SIGUSR2)
    s.wait_error_log(r"\[warn\] master: upgrade refused \(SIGUSR2\): an upgrade is in progress "
                     r"\(new master pid \d+\)", start=off)
    try:
        m = re.match(r"STATUS=upgrading: new master pid (\d+) starting$", s.notify.recv(4096).decode())
        assert m and H.pid_alive(int(m.group(1)))
        s.signal(signal.SIGHUP)
        assert s.notify.recv(4096).decode().startswith("RELOADING=1\nMONOTONIC_USEC=")
        assert s.notify.recv(4096).decode() == ("READY=1\nSTATUS=reload refused: a binary upgrade is in "
                                                "progress; still serving")
    finally:
        s.notify.close()
    s.wait_error_log(r"\[warn\] master: reload refused: a binary upgrade is in progress", start=off)
    assert H.http_request(port, "GET", "/").status == 200
    open(gate, "w").close()
    new = H.wait_for(lambda: read_pid(pid_file) not in (0, s.pid) and read_pid(pid_file), 10,
                     what="new pid file")
    H.wait_for(lambda: not s.alive() and not os.path.exists(pid_file + ".oldbin"), 10,
               what="old master gone")
    assert s.proc.returncode == 0
    assert H.http_request(port, "GET", "/").status == 200

    # A reload in progress: SIGHUP and SIGUSR2 arrive together (the master
    # is stopped while both are sent), and the master takes the lower
    # number first, so the upgrade is asked for a moment after the reload
    # forked its new generation. That generation loads a script whose main
    # chunk runs for a second, so it is not ready when the SIGUSR2 is
    # taken, however the scheduler runs the processes.
    copy_binary(sluice_bin, exe)
    slow = tmp_path / "slow-load.lua"
    slow.write_text("local t0 = sluice.now()\nwhile sluice.now() - t0 < 1.0 do end\n"
                    "function inspect(req) end\n")
    cfg["listeners"][0]["inspect"] = {"script": str(slow)}
    s.write_config(cfg)
    off = len(H.read_text(s.error_log))
    old_workers = set(H.children_of(new))
    os.kill(new, signal.SIGSTOP)
    try:
        # Stopped for sure (SIGSTOP takes effect when it next runs): else
        # it could take SIGHUP alone and settle the reload first.
        H.wait_for(lambda: H.proc_status(new)["State"].startswith("T"), 5, what="master stopped")
        os.kill(new, signal.SIGHUP)
        os.kill(new, signal.SIGUSR2)
    finally:
        os.kill(new, signal.SIGCONT)
    s.wait_error_log(r"upgrade refused \(SIGUSR2\): a reload is in progress", start=off)
    H.wait_for(lambda: set(H.children_of(new)) - old_workers and read_pid(pid_file) == new, 5,
               what="reload done")
    stop_master(new)


def test_upgrade_with_listeners_added_and_removed(sluice, sluice_bin, demo, tmp_path, monkeypatch):
    """The new configuration drops a listener and adds one: the new master
    closes the inherited socket it has no listener for (the old master
    closes its own after its queue is served), binds the new address, and
    serves on the kept one."""
    a = demo(size=21)
    keep, drop, add = H.free_port(), H.free_port(), H.free_port()

    def listener(name, port):
        return {"name": name, "address": "%s:%d" % (H.HOST, port), "backend": "app"}
    cfg = H.make_config(keep, [H.server(a.port)], workers=2)
    cfg["listeners"].append(listener("dropped", drop))
    s, _, pid_file = upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg)
    assert H.http_request(drop, "GET", "/").status == 200
    cfg2 = H.make_config(keep, [H.server(a.port)], workers=2)
    cfg2["listeners"].append(listener("added", add))
    cfg2["pid_file"] = pid_file
    s.write_config(cfg2)
    off = len(H.read_text(s.error_log))
    new = upgrade(s, pid_file, 2)
    s.wait_error_log(r"upgrade: inherited socket on 127\.0\.0\.1:%d is no longer configured; closing it$"
                     % drop, start=off)
    s.wait_error_log(r"listening on 127\.0\.0\.1:%d: 2 sockets inherited from the previous master "
                     r"\(binary upgrade\)$" % keep, start=off)
    for port in (keep, add):
        r = H.http_request(port, "GET", "/")
        assert r.status == 200 and len(r.body) == 21
    assert not H.port_accepts(drop)
    stop_master(new)


def procs_of(exe):
    """Live processes running the file at EXE (masters and workers alike)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/exe" % name) == exe and H.pid_alive(int(name)):
                out.append(int(name))
        except OSError:
            continue
    return out


def test_sigusr2_to_a_worker_is_ignored(sluice, demo):
    """`pkill -USR2 sluice` or `systemctl kill -s USR2` without
    --kill-whom=main also signals the workers: they ignore it (its default
    action would kill them) and serve on, with nothing in the log."""
    a = demo(size=12)
    s = sluice(H.make_config(H.free_port(), [H.server(a.port)], workers=1))
    [w] = s.worker_pids()
    off = len(H.read_text(s.error_log))
    os.kill(w, signal.SIGUSR2)
    # Delivered once no longer pending (SIGUSR2 is bit 11 of the masks).
    H.wait_for(lambda: not H.pid_alive(w) or not any(
        int(H.proc_status(w)[k], 16) & (1 << (signal.SIGUSR2 - 1)) for k in ("SigPnd", "ShdPnd")), 5,
        what="SIGUSR2 delivered")
    assert H.pid_alive(w) and s.worker_pids() == [w]
    r = H.http_request(s.port, "GET", "/")
    assert r.status == 200 and len(r.body) == 12
    assert s.worker_pids() == [w]
    log = H.read_text(s.error_log)[off:]
    assert "[error]" not in log and "[warn]" not in log, log


def test_upgrade_malformed_report_fails_and_stops_it(sluice, sluice_bin, demo, tmp_path, monkeypatch):
    """A new master that writes a malformed report on the report pipe
    named in $SLUICE_UPGRADE fails the upgrade at once: the old master
    logs it, stops the new one, renames the pid file back and serves on;
    later a SIGHUP reloads and a good upgrade works (nothing is left "in
    progress")."""
    a = demo(size=31)
    port = H.free_port()
    cfg = H.make_config(port, [H.server(a.port)], workers=1)
    s, exe, pid_file = upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg)
    real = str(tmp_path / "sluice.real")
    copy_binary(sluice_bin, real)
    # It passes the check (-t), then reports nonsense and waits. The
    # signal mask it inherits blocks SIGTERM (sluice unblocks what it
    # handles): so does this stand-in.
    write_script(exe, "#!%s\nimport os, signal, sys, time\n"
                 "if '-t' in sys.argv: os.execv(%r, [%r] + sys.argv[1:])\n"
                 "signal.pthread_sigmask(signal.SIG_SETMASK, [])\n"
                 "os.write(int(os.environ['SLUICE_UPGRADE'].split(';')[0]), b'not a report\\n')\n"
                 "while True: time.sleep(1)\n" % (sys.executable, real, real))
    off = len(H.read_text(s.error_log))
    s.signal(signal.SIGUSR2)
    m = s.wait_error_log(r"upgrade: new master pid (\d+) starting$", timeout=10, start=off)
    bad = int(m.group(1))
    s.wait_error_log(r"\[error\] master: upgrade: malformed report from the new master \(pid %d\); "
                     r"stopping it$" % bad,
                     timeout=10, start=off)
    s.wait_error_log(r"\[error\] master: upgrade failed: the new master \(pid %d\) sent a malformed report; "
                     r"stopped; this master \(pid %d\) keeps serving$" % (bad, s.pid), start=off)
    H.wait_for(lambda: not H.pid_alive(bad), 5, what="the new master to be stopped")
    assert read_pid(pid_file) == s.pid and not os.path.exists(pid_file + ".oldbin")
    assert H.http_request(port, "GET", "/").status == 200
    s.reload()
    assert "reload refused" not in H.read_text(s.error_log)[off:]
    copy_binary(sluice_bin, exe)
    new = upgrade(s, pid_file, 1)
    assert H.http_request(port, "GET", "/").status == 200
    stop_master(new)
    assert not os.path.exists(pid_file)


def test_upgrade_then_stop_at_once_leaves_nothing_running(sluice, sluice_bin, demo, tmp_path, monkeypatch):
    """SIGUSR2 followed at once by SIGTERM: the stop cancels the upgrade
    (the new master may not even be known yet); the old master tells the
    new one to stop and exits only once it is gone. No master or worker of
    either generation is left, and neither pid file."""
    a = demo(size=9)
    port = H.free_port()
    cfg = H.make_config(port, [H.server(a.port)], workers=2)
    s, exe, pid_file = upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg)
    assert len(procs_of(exe)) == 3
    off = len(H.read_text(s.error_log))
    s.signal(signal.SIGUSR2)
    s.signal(signal.SIGTERM)
    assert s.proc.wait(20 * H.SLOW) == 0
    H.wait_for(lambda: procs_of(exe) == [], 5, what="every process of both generations gone")
    log = H.read_text(s.error_log)[off:]
    assert re.search(r"\[warn\] master: upgrade: cancelled, this master stops; stopping the new master "
                     r"\(pid \d+\)", log), log
    assert "upgrade: the new master (pid %d) serves" not in log
    assert not os.path.exists(pid_file) and not os.path.exists(pid_file + ".oldbin")
    assert not H.port_accepts(port)


def test_upgrade_stop_while_new_master_starts_removes_pid_files(sluice, sluice_bin, demo, tmp_path,
                                                                monkeypatch):
    """A stop while the new master starts, after it wrote its pid file: the
    old master stops it, waits for it, and at exit removes <pid_file>.oldbin
    (its own pid) and the pid file (naming a new master that no longer
    runs); before, .oldbin stayed behind."""
    a = demo(size=9)
    port = H.free_port()
    cfg = H.make_config(port, [H.server(a.port)], workers=1)
    s, exe, pid_file = upgraded_sluice(sluice, sluice_bin, tmp_path, monkeypatch, cfg)
    real = str(tmp_path / "sluice.real")
    copy_binary(sluice_bin, real)
    started = str(tmp_path / "started")
    # A new master that writes its pid file and never serves. The signal
    # mask it inherits blocks SIGTERM (sluice unblocks what it handles).
    write_script(exe, "#!%s\nimport os, signal, sys, time\n"
                 "if '-t' in sys.argv: os.execv(%r, [%r] + sys.argv[1:])\n"
                 "signal.pthread_sigmask(signal.SIG_SETMASK, [])\n"
                 "open(%r, 'w').write('%%d\\n' %% os.getpid())\n"
                 "open(%r, 'w').close()\n"
                 "while True: time.sleep(1)\n" % (sys.executable, real, real, pid_file, started))
    off = len(H.read_text(s.error_log))
    s.signal(signal.SIGUSR2)
    m = s.wait_error_log(r"upgrade: new master pid (\d+) starting$", timeout=10, start=off)
    new = int(m.group(1))
    H.wait_for(lambda: os.path.exists(started), 10, what="the new master's pid file")
    assert read_pid(pid_file) == new and read_pid(pid_file + ".oldbin") == s.pid
    s.signal(signal.SIGTERM)
    assert s.proc.wait(15 * H.SLOW) == 0
    assert not H.pid_alive(new)
    s.wait_error_log(r"\[warn\] master: upgrade: cancelled, this master stops; stopping the new master "
                     r"\(pid %d\)$" % new, start=off)
    s.wait_error_log(r"\[info\] master: upgrade: the new master \(pid %d\) stopped$" % new, start=off)
    assert not os.path.exists(pid_file) and not os.path.exists(pid_file + ".oldbin")


def test_upgrade_check_error_is_logged_under_d(sluice_bin, demo, tmp_path):
    """With -d the master's standard error is /dev/null, and so would be the
    new master's: the check the old master runs first (`<binary> -t -c
    <config>`) puts the new configuration's error in the error log, and the
    upgrade is refused before anything starts."""
    from test_service import daemon_config, run_d, kill_leftovers
    a = demo(size=8)
    port = H.free_port()
    cfg, path = daemon_config(tmp_path, port, a.port)
    pid_file, error_log = cfg["pid_file"], cfg["error_log"]
    try:
        r = run_d(sluice_bin, path, str(tmp_path))
        assert r.returncode == 0, r.stderr
        pid = read_pid(pid_file)
        workers = H.children_of(pid)
        good = open(path).read()
        with open(path, "w") as f:
            f.write("bogus_key: 1\n" + good)
        off = len(H.read_text(error_log))
        os.kill(pid, signal.SIGUSR2)
        H.wait_log(error_log, r"\[error\] master: upgrade refused \(SIGUSR2\): %s -t: .*bogus_key"
                   % re.escape(os.path.realpath(sluice_bin)), timeout=10, start=off)
        H.wait_log(error_log, r"upgrade refused \(SIGUSR2\): .* -t: sluice: configuration %s is invalid$"
                   % re.escape(path), start=off)
        H.wait_log(error_log, r"upgrade refused \(SIGUSR2\): .* -t -c %s exited with status 1; this master "
                   r"keeps serving$" % re.escape(path), start=off)
        assert read_pid(pid_file) == pid and H.children_of(pid) == workers
        assert not os.path.exists(pid_file + ".oldbin")
        assert H.http_request(port, "GET", "/").status == 200
        with open(path, "w") as f:
            f.write(good)
        stop_master(pid)
        assert not os.path.exists(pid_file)
    finally:
        kill_leftovers(path)


# ---------------------------------------------------------------- LISTEN_FDS

def activated(binary, config_path, sock, cwd, stderr_path, notify=None):
    """Start BINARY as systemd would with socket activation: SOCK as
    descriptor 3, LISTEN_FDS=1 and LISTEN_PID naming the new process
    (NOTIFY: the path of a socket standing in for systemd's)."""
    fd = sock.fileno()

    def child():
        os.dup2(fd, 3)
        os.set_inheritable(3, True)
        os.environ["LISTEN_FDS"] = "1"
        os.environ["LISTEN_PID"] = str(os.getpid())
        if notify:
            os.environ["NOTIFY_SOCKET"] = notify
    err = open(stderr_path, "ab")
    try:
        return subprocess.Popen([binary, "-c", config_path], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, cwd=cwd, close_fds=False,
                                preexec_fn=child, start_new_session=True)
    finally:
        err.close()


def listening_socket(port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.bind((H.HOST, port))
    ls.listen(64)
    return ls


def test_listen_fds_socket_is_adopted_and_kept_for_the_next_start(sluice, sluice_bin, demo, tmp_path):
    """One inherited socket serves both workers; the log says it was
    inherited. Stopping leaves systemd's socket usable: a connection made
    while sluice is down waits in its queue and the next start serves it.
    An upgrade hands the socket on as systemd's too."""
    a = demo(size=77)
    port = H.free_port()
    cfg = H.make_config(port, [H.server(a.port)], workers=2)
    s = sluice(cfg, start=False)
    ls = listening_socket(port)
    npath = str(tmp_path / "notify.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(npath)
    ns.settimeout(10 * H.SLOW)
    procs = []
    try:
        p = activated(sluice_bin, s.config_path, ls, s.dir, s.stderr_path)
        procs.append(p)
        H.wait_for(lambda: len(H.children_of(p.pid)) == 2, 10, what="2 workers")
        s.wait_error_log(r"\[info\] master: listening on 127\.0\.0\.1:%d: 1 socket inherited from systemd "
                         r"\(LISTEN_FDS\), shared by every worker$" % port, timeout=5)
        workers = H.children_of(p.pid)
        H.wait_for(lambda: sorted(H.socket_pids(port, pids=workers)) == sorted(workers), 5,
                   what="both workers on the inherited socket")
        for i in range(6):
            r = H.http_request(port, "GET", "/x%d" % i)
            assert r.status == 200 and len(r.body) == 77
        p.send_signal(signal.SIGTERM)
        assert p.wait(15) == 0
        # Sluice is down; the socket is systemd's (ours here) and unfiltered.
        c = H.Client(port, timeout=10)
        c.send(H.build_request("GET", "/queued"))
        p = activated(sluice_bin, s.config_path, ls, s.dir, s.stderr_path, notify=npath)
        procs.append(p)
        r = c.read_response()
        c.close()
        assert r.status == 200 and len(r.body) == 77
        # An upgrade keeps it systemd's: after it, a stop still leaves it
        # open. The old master, the service's main process until then,
        # gives systemd the new one's pid.
        assert ns.recv(4096).decode().startswith("READY=1\nMAINPID=%d\n" % p.pid)
        off = len(H.read_text(s.error_log))
        p.send_signal(signal.SIGUSR2)
        m = s.wait_error_log(r"upgrade: the new master \(pid (\d+)\) serves", timeout=10, start=off)
        new = int(m.group(1))
        assert ns.recv(4096).decode() == "STATUS=upgrading: new master pid %d starting" % new
        assert ns.recv(4096).decode() == "MAINPID=%d\nSTATUS=upgraded: master pid %d serves" % (new, new)
        assert p.wait(15) == 0
        assert H.http_request(port, "GET", "/after").status == 200
        stop_master(new)
        assert H.port_accepts(port), "a stop closed or filtered systemd's socket"
    finally:
        for p in procs:
            H.kill_popen(p)
        ls.close()
        ns.close()


def test_listen_fds_socket_matching_no_listener_is_an_error(sluice, sluice_bin, demo, tmp_path):
    a = demo()
    cfg = H.make_config(H.free_port(), [H.server(a.port)])
    s = sluice(cfg, start=False)
    other = H.free_port()
    ls = listening_socket(other)
    try:
        p = activated(sluice_bin, s.config_path, ls, s.dir, s.stderr_path)
        assert p.wait(15) == 1
    finally:
        ls.close()
    s.wait_error_log(r"\[error\] master: LISTEN_FDS: inherited socket \(descriptor 3\) listens on "
                     r"127\.0\.0\.1:%d, which is no listener's address in %s; not starting"
                     % (other, re.escape(s.config_path)))
    assert not H.port_accepts(s.port)


def test_listen_fds_descriptor_not_a_listening_socket_is_an_error(sluice, sluice_bin, demo, tmp_path):
    a = demo()
    s = sluice(H.make_config(H.free_port(), [H.server(a.port)]), start=False)
    # A connected (not listening) TCP socket as descriptor 3.
    ls = listening_socket(H.free_port())
    c = socket.create_connection(ls.getsockname())
    try:
        p = activated(sluice_bin, s.config_path, c, s.dir, s.stderr_path)
        assert p.wait(15) == 1
    finally:
        c.close()
        ls.close()
    assert "sluice: LISTEN_FDS: descriptor 3 is not a listening TCP socket" in H.read_text(s.stderr_path)


# ---------------------------------------------------------------- under systemd

def test_upgrade_under_systemd_moves_mainpid(sluice_bin, demo, tmp_path):
    """The shipped unit (paths pointed at a copy of the binary and a test
    configuration) under Debian's real systemd (sysdns.py): the documented
    `systemctl kill -s USR2 --kill-whom=main` makes a new master, systemd
    follows it as MainPID with NotifyAccess=main (the old master sends
    MAINPID=), the service stays active throughout, and a stop afterwards
    is clean."""
    import pytest
    import sysdns
    why = sysdns.unavailable_reason()
    if why:
        pytest.skip("systemd cannot boot here: " + why)
    a = demo(size=33)
    port = H.free_port()
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    logs = tmp_path / "log"     # ReadWritePaths= of the unit
    logs.mkdir()
    copy_binary(sluice_bin, str(sbin / "sluice"))
    cfg = H.make_config(port, [H.server(a.port)], workers=2, access_log="off")
    cfg["error_log"] = "stderr"
    cfg["pid_file"] = "/run/sluice/sluice.pid"
    cfg["user"] = "root"
    cpath = str(tmp_path / "sluice.yaml")
    with open(cpath, "w") as f:
        f.write(H.to_yaml(cfg) + "\n")
    os.chmod(cpath, 0o644)
    unit = open(os.path.join(os.path.dirname(__file__), "..", "..", "conf/systemd/sluice.service")).read()
    assert "NotifyAccess=main" in unit
    unit = unit.replace("/usr/sbin/sluice", "/opt/sluice/sluice")
    with sysdns.SystemdNS(unit_files={"sluice.service": unit},
                          extra_binds=[(str(sbin), "/opt/sluice", "ro"),
                                       (cpath, "/etc/sluice/sluice.yaml", "ro"),
                                       (str(logs), "/var/log/sluice", "rw")]) as sd:
        r = sd.systemctl("start", "sluice.service", check=False)
        assert r.returncode == 0, sd.journal("sluice.service", manager=True)
        st = sd.show("sluice.service")
        assert (st["ActiveState"], st["SubState"]) == ("active", "running"), sd.status("sluice.service")
        old = int(st["MainPID"])
        assert H.http_request(port, "GET", "/").status == 200
        sd.systemctl("kill", "-s", "USR2", "--kill-whom=main", "sluice.service")

        def moved():
            s2 = sd.show("sluice.service")
            return s2 if int(s2["MainPID"]) not in (0, old) else None
        st = H.wait_for(moved, 15, what="MainPID to move to the new master")
        new = int(st["MainPID"])
        assert st["ActiveState"] == "active", st
        assert st["StatusText"] == "upgraded: master pid %d serves" % new, st
        def old_gone():
            hp = sd.host_pid(old)  # once: it is None as soon as the old master is gone
            return hp is None or not H.pid_alive(hp)
        H.wait_for(old_gone, 15,
                   what="the old master to exit")
        assert H.http_request(port, "GET", "/").status == 200
        st = sd.show("sluice.service")
        assert (st["ActiveState"], st["SubState"], int(st["MainPID"])) == ("active", "running", new), st
        sd.systemctl("stop", "sluice.service")
        st = sd.show("sluice.service")
        journal = sd.journal("sluice.service", manager=True)
        assert (st["ActiveState"], st["Result"]) == ("inactive", "success"), (st, journal)
        assert "upgrade: the new master (pid %d) serves" % new in journal, journal
        assert "[error]" not in journal and "[warn]" not in journal, journal
        assert "reception only permitted" not in journal, journal
        # The new master is systemd's child (started through a launcher
        # that exits), so systemd waits for it on the stop.
        assert "not our child" not in journal, journal
