"""Self-test of sysdns.SystemdNS: Debian's real systemd booted as PID 1 of
private namespaces runs a Type=notify service through start, reload and
stop; a service hardened like conf/systemd/sluice.service serves a loopback
TCP port the test reaches; nothing is left behind. Skips (with the reason)
when not root or when systemd cannot boot here."""

import os
import resource
import socket
import time

import pytest

import sysdns

NOTIFY_SH = r"""#!/bin/sh
# A tiny Type=notify service: READY=1 once up, a new generation on SIGHUP
# (ExecReload), a clean exit on SIGTERM.
gen=0
reload() {
    gen=$((gen + 1))
    echo "reload $gen" >&2
    systemd-notify --ready --status="generation $gen"
}
trap reload HUP
trap 'echo "stopping after generation $gen" >&2; exit 0' TERM
echo "starting" >&2
systemd-notify --ready --status="generation 0"
while :; do sleep 0.1 & wait $!; done
"""

NOTIFY_UNIT = """[Unit]
Description=sysdns self-test notify service

[Service]
Type=notify
# systemd-notify is a child of the main process, not the main process
NotifyAccess=all
ExecStart=/run/sysdns/bin/notify.sh
ExecReload=/bin/kill -HUP $MAINPID
# SIGTERM to the shell only (as sluice.service), not to its `sleep`
KillMode=mixed
TimeoutStartSec=10s
TimeoutStopSec=10s
"""

# A Type=notify service in Python (sd_notify by hand) that listens on a
# loopback port and reports what its sandbox looks like.
TCP_PY = r"""#!/usr/bin/python3
import os, resource, signal, socket, sys

def notify(msg):
    path = os.environ["NOTIFY_SOCKET"]
    if path.startswith("@"):
        path = "\0" + path[1:]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.connect(path)
    s.send(msg.encode())
    s.close()

def can_write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "ok"
    except OSError as e:
        return e.strerror

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(16)
status = {l.split(":")[0]: l.split(":", 1)[1].strip()
          for l in open("/proc/self/status") if ":" in l}
print("uid=%d" % os.getuid(), file=sys.stderr)
print("nofile=%d:%d" % resource.getrlimit(resource.RLIMIT_NOFILE), file=sys.stderr)
for k in ("CapBnd", "CapEff", "NoNewPrivs", "Seccomp"):
    print("%s=%s" % (k, status.get(k)), file=sys.stderr)
print("write /etc: %s" % can_write("/etc/sysdns-probe"), file=sys.stderr)
print("write /run/sluice: %s" % can_write("/run/sluice/probe"), file=sys.stderr)
print("write /proc/sys: %s" % can_write("/proc/sys/net/core/somaxconn"), file=sys.stderr)
print("dev has sda-like nodes: %s" % any(n.startswith(("sd", "vd", "nvme", "mem"))
                                         for n in os.listdir("/dev")), file=sys.stderr)
sys.stderr.flush()
gen = [0]
def hup(*_):
    gen[0] += 1
    notify("READY=1\nSTATUS=generation %d" % gen[0])
signal.signal(signal.SIGHUP, hup)
notify("READY=1\nSTATUS=listening")
while True:
    try:
        c, _ = ls.accept()
    except InterruptedError:
        continue
    c.sendall(b"generation %d\n" % gen[0])
    c.close()
"""

# The hardening of conf/systemd/sluice.service (User=nobody instead of the
# sluice account, which a test machine may not have).
HARDENED_UNIT = """[Unit]
Description=sysdns self-test hardened service
After=network-online.target
Wants=network-online.target

[Service]
Type=notify
NotifyAccess=main
User=nobody
Group=nogroup
ExecStart=/run/sysdns/bin/tcp.py {port}
ExecReload=/bin/kill -HUP $MAINPID
KillMode=mixed
TimeoutStopSec=10s
RuntimeDirectory=sluice
LimitNOFILE=1048576
AmbientCapabilities=CAP_NET_BIND_SERVICE
CapabilityBoundingSet=CAP_NET_BIND_SERVICE
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths=/var/log/sluice
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
SystemCallArchitectures=native
UMask=0027
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(pred, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.05)


def mounts_text():
    with open("/proc/self/mountinfo") as f:
        return f.read()


@pytest.fixture
def boot():
    """Factory: boot(**SystemdNS kwargs) -> a booted SystemdNS; each is torn
    down after the test and checked to have left nothing behind."""
    why = sysdns.unavailable_reason()
    if why:
        pytest.skip("systemd in namespaces unavailable: " + why)
    made = []

    def make(**kw):
        sd = sysdns.SystemdNS(**kw)
        try:
            sd.start()
        except sysdns.SystemdUnavailable as e:
            pytest.skip("systemd cannot boot in namespaces here: %s" % e)
        made.append((sd, sd.pid, sd.cgroup, sd.stage))
        return sd

    yield make
    for sd, pid, cgroup, stage in made:
        sd.close()
        assert not os.path.exists("/proc/%d" % pid), "namespace PID 1 still alive"
        assert not os.path.exists(cgroup), "cgroup left behind: " + cgroup
        assert not os.path.exists(stage), "staging dir left behind: " + stage
        assert stage not in mounts_text()


def test_notify_service_start_reload_stop(boot):
    sd = boot(unit_files={"notify.service": NOTIFY_UNIT},
              files={"bin/notify.sh": NOTIFY_SH})
    assert sd.boot_state in ("running", "degraded")
    assert sd.systemctl("is-system-running", check=False).stdout.strip() == "running"

    sd.systemctl("start", "notify.service")     # returns once READY=1 arrived
    st = sd.show("notify.service")
    assert (st["ActiveState"], st["SubState"]) == ("active", "running"), sd.status("notify.service")
    assert st["StatusText"] == "generation 0"
    main = int(st["MainPID"])
    assert main > 1
    host = sd.host_pid(main)
    assert host and host != main
    with open("/proc/%d/cmdline" % host, "rb") as f:
        assert b"notify.sh" in f.read()

    sd.systemctl("reload", "notify.service")
    wait_for(lambda: sd.show("notify.service")["StatusText"] == "generation 1",
             what="StatusText after reload")
    st = sd.show("notify.service")
    assert (st["ActiveState"], st["SubState"], st["MainPID"]) == ("active", "running", str(main))
    wait_for(lambda: "reload 1" in sd.journal("notify.service"), what="reload in the journal")

    sd.systemctl("stop", "notify.service")
    st = sd.show("notify.service")
    assert (st["ActiveState"], st["SubState"], st["MainPID"]) == ("inactive", "dead", "0")
    assert st["Result"] == "success"
    assert not os.path.exists("/proc/%d" % host)
    # the unit's stderr, and with manager=True what systemd said about it
    assert sd.journal("notify.service").splitlines() == \
        ["starting", "reload 1", "stopping after generation 1"]
    about = sd.journal("notify.service", manager=True)
    for line in ("Started notify.service", "Reloaded notify.service", "Stopped notify.service"):
        assert line in about
    assert "Stopped notify.service" in sd.manager_log()


def test_hardened_service_serves_loopback_tcp(boot):
    port = free_port()
    sd = boot(unit_files={"hard.service": HARDENED_UNIT.format(port=port)},
              files={"bin/tcp.py": TCP_PY},
              tmpfs=["/var/log/sluice"])     # ReadWritePaths= must exist
    sd.systemctl("start", "hard.service")
    st = sd.show("hard.service")
    assert (st["ActiveState"], st["SubState"]) == ("active", "running"), sd.status("hard.service")

    def fetch():
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            return c.makefile("rb").readline()
    assert fetch() == b"generation 0\n"      # from outside the namespaces
    sd.systemctl("reload", "hard.service")
    wait_for(lambda: sd.show("hard.service")["StatusText"] == "generation 1",
             what="StatusText after reload")
    assert fetch() == b"generation 1\n"

    log = dict(l.split("=", 1) for l in sd.journal("hard.service").splitlines()
               if "=" in l and not l.startswith("write"))
    text = sd.journal("hard.service")
    assert log["uid"] == "65534"
    assert int(log["CapBnd"], 16) == 1 << 10      # CAP_NET_BIND_SERVICE only
    assert log["NoNewPrivs"] == "1"
    assert log["Seccomp"] == "2"                   # filters are in place
    assert "write /etc: Read-only file system" in text          # ProtectSystem=strict
    assert "write /run/sluice: ok" in text                      # RuntimeDirectory=
    assert "write /proc/sys: Read-only file system" in text     # ProtectKernelTunables=
    assert "dev has sda-like nodes: False" in text              # PrivateDevices=
    # LimitNOFILE=1048576: systemd clamps to the hard limit it may set. Without
    # CAP_SYS_RESOURCE in the bounding set (as on some VMs) that is the
    # launcher's hard limit, and `systemctl show` still says 1048576.
    with open("/proc/self/status") as f:
        bnd = int([l for l in f if l.startswith("CapBnd:")][0].split()[1], 16)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with open("/proc/sys/fs/nr_open") as f:
        nr_open = int(f.read())
    want = min(1048576, nr_open) if bnd & (1 << 24) else min(1048576, hard)
    assert log["nofile"] == "%d:%d" % (want, want), log["nofile"]

    sd.systemctl("stop", "hard.service")
    assert sd.state("hard.service") == ("inactive", "dead")
    with pytest.raises(OSError):
        fetch()
