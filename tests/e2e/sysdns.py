"""Boot Debian's real systemd (/lib/systemd/systemd) as PID 1 of private
namespaces, to run a unit under the real service manager in a test.

    with SystemdNS(unit_files={"x.service": text}) as sd:
        sd.systemctl("start", "x.service")
        sd.show("x.service")        # {"ActiveState": "active", ...}
        sd.journal("x.service")     # the unit's stdout/stderr (journald)

How (works on a machine whose PID 1 is not systemd, cgroup v1 hybrid or
pure v2, as real root without CAP_SYS_RESOURCE):

  * a fresh cgroup2 directory sysdns-<pid>-<n> is made in the host's cgroup2
    hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified) and the launcher is
    moved into it; ``unshare --pid --fork --mount --uts --ipc --cgroup
    --propagation private --mount-proc --kill-child`` then makes it the root
    of a cgroup namespace, so systemd sees a delegated, pure cgroup2 tree;
  * no network namespace: units share the host's loopback, so a service's
    TCP ports are reachable from the test;
  * inside (before exec'ing systemd): tmpfs on /run, /tmp, /var/tmp,
    /var/lib/systemd and any ``tmpfs=`` paths; read-only binds of /sys and
    /proc/sys (systemd cannot change the host's sysctls); cgroup2 on
    /sys/fs/cgroup; a private /dev (null zero full random urandom tty, pts,
    shm; no console: PID 1 logs to the journal); container=sysdns;
  * units come only from a private directory (SYSTEMD_UNIT_PATH), generators
    are disabled (SYSTEMD_GENERATOR_PATH), and the boot target only starts
    journald (volatile, in the private /run). sysinit.target, basic.target,
    network*.target, ... are empty stubs, so DefaultDependencies=yes units
    start without pulling in anything of the host's boot;
  * teardown: SIGRTMIN+4 (clean poweroff: units are stopped, ExecStop runs),
    then SIGKILL of the namespace's PID 1 if that takes too long; the cgroup
    directories and the staging directory are removed. Nothing is killed
    except processes in the namespace this object made. If the test process
    is killed hard, the launcher's PR_SET_PDEATHSIG and unshare's
    --kill-child end the namespace; the next start() sweeps the empty cgroup
    and staging directory left behind.

Control goes through ``nsenter -t <pid> -m -p`` (systemctl, journalctl).
PIDs systemd reports (MainPID) are namespace PIDs; ``host_pid()`` maps them.
Python 3.11, standard library only.
"""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SYSTEMD = "/lib/systemd/systemd"
LIB_UNITS = "/lib/systemd/system"
STAGE_IN = "/run/sysdns"          # the staging directory, seen from inside
TARGET = "sysdns.target"

# Empty targets standing in for the boot's: units with DefaultDependencies=yes
# (Requires=sysinit.target, After=basic.target) and the usual After=/Wants=
# on network targets load and start without pulling in the host's boot.
STUB_TARGETS = ("sysinit", "basic", "sockets", "timers", "paths", "slices",
                "local-fs", "local-fs-pre", "remote-fs", "remote-fs-pre", "swap",
                "network", "network-pre", "network-online", "nss-lookup",
                "time-set", "time-sync", "multi-user", "graphical", "cryptsetup",
                "emergency", "rescue", "getty")
# Real units linked from /lib: journald and the shutdown path.
REAL_UNITS = ("systemd-journald.service", "systemd-journald.socket",
              "systemd-journald-dev-log.socket", "shutdown.target", "umount.target",
              "final.target", "poweroff.target", "systemd-poweroff.service",
              "exit.target", "systemd-exit.service", "halt.target",
              "systemd-halt.service")


# Run as the launcher: dies with the test process (PR_SET_PDEATHSIG, kept
# across exec), joins the fresh cgroup, then becomes unshare, whose
# --kill-child takes the namespace's PID 1 (and so every process in the
# namespace) down with it. A test process killed hard leaves nothing running.
_LAUNCHER = """
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != int(sys.argv[2]):
    sys.exit("sysdns launcher: cannot bind to the parent's life")
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
os.execvp(sys.argv[3], sys.argv[3:])
"""


class SystemdUnavailable(Exception):
    """systemd cannot be booted here (not root, no cgroup2, boot failed)."""


def _cgroup2_base():
    """Mount point of the host's cgroup2 hierarchy, or None."""
    for p in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        try:
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    pre, _, post = line.partition(" - ")
                    if pre.split()[4] == p and post.split()[0] == "cgroup2":
                        return p
        except OSError:
            return None
    return None


def _own_cgroup2_path():
    with open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return "/"


def _mount_points():
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4].replace("\\040", " ") for line in f]


def _rmdir_tree(path):
    """rmdir a cgroup directory tree bottom-up (cgroup dirs hold only files
    the kernel provides; rmdir is the only removal)."""
    for root, dirs, _ in os.walk(path, topdown=False):
        for d in dirs:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                pass
    os.rmdir(path)


def _cgroup_pids(path):
    pids = []
    for root, _, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(root, "cgroup.procs")) as f:
                    pids += [int(x) for x in f.read().split()]
            except OSError:
                pass
    return pids


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def sweep_stale():
    """Remove what a test process killed hard left behind (its namespace is
    already gone, see _LAUNCHER): the empty sysdns-<pid>-<suffix> cgroups of
    dead processes and their staging directories."""
    base = _cgroup2_base()
    if not base:
        return
    parent = base + _own_cgroup2_path().rstrip("/")
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for n in names:
        parts = n.split("-", 2)
        if len(parts) != 3 or parts[0] != "sysdns" or not parts[1].isdigit():
            continue
        p = os.path.join(parent, n)
        if _pid_alive(int(parts[1])) or _cgroup_pids(p):
            continue
        try:
            _rmdir_tree(p)
        except OSError:
            continue
        stage = os.path.join(tempfile.gettempdir(), "sysdns-" + parts[2])
        if os.path.isdir(os.path.join(stage, "units")):
            shutil.rmtree(stage, ignore_errors=True)


def unavailable_reason():
    """Why SystemdNS cannot work here (a string), or None if it may."""
    if os.geteuid() != 0:
        return "needs root"
    for b in (SYSTEMD, shutil.which("unshare"), shutil.which("nsenter"),
              shutil.which("systemctl")):
        if not b or not os.access(b, os.X_OK):
            return "missing binary: %s" % b
    if not _cgroup2_base():
        return "no cgroup2 hierarchy mounted at /sys/fs/cgroup or /sys/fs/cgroup/unified"
    return None


class SystemdNS:
    """Real systemd as PID 1 of new pid, mount, uts, ipc and cgroup namespaces
    (the network namespace is the host's).

    unit_files:   {name: text} written to the private unit directory (drop-ins
                  as "x.service.d/y.conf"); more can be added later with
                  write_unit() + daemon_reload().
    files:        {relative path: text} written executable (0755) into the
                  staging directory, seen inside as /run/sysdns/<path>
                  (STAGE_IN); world-readable, so User= services can run them.
    extra_binds:  paths or (src, dst[, "ro"]) tuples bind-mounted inside after
                  the private /tmp is mounted (so a test's tmp_path under /tmp
                  stays visible: pass it here).
    tmpfs:        more paths to cover with an empty tmpfs (e.g. /var/log/x for a
                  unit's LogsDirectory=, so nothing is written to the host).
    wants:        more units the boot target starts.
    own_unit_dirs: instead of a private unit path, the private unit directory
                  is mounted over /lib/systemd/system and a tmpfs over
                  /etc/systemd/system (and /usr/local/lib/systemd/system):
                  what a package installed inside puts there, and what
                  deb-systemd-helper enables, stay inside, and systemd sees
                  them where it would on a host (`is-enabled` says enabled).
    boot_timeout: seconds to wait for "systemctl is-system-running".
    stop_timeout: seconds a clean poweroff may take before SIGKILL.

    The namespace dies with the thread that started it (PR_SET_PDEATHSIG):
    start it from the test's main thread.
    """

    def __init__(self, unit_files=None, files=None, extra_binds=(), tmpfs=(), wants=(),
                 boot_timeout=20.0, stop_timeout=10.0,
                 journald=True, log_level="info", own_unit_dirs=False):
        self.unit_files = dict(unit_files or {})
        self.files = dict(files or {})
        self.extra_binds = [self._norm_bind(b) for b in extra_binds]
        self.tmpfs = list(tmpfs)
        self.wants = list(wants)
        self.boot_timeout = boot_timeout
        self.stop_timeout = stop_timeout
        self.journald = journald
        self.log_level = log_level
        self.own_unit_dirs = own_unit_dirs
        self.stage = None
        self.cgroup = None
        self.proc = None       # the launcher, then unshare
        self.pid = None        # host PID of the namespace's PID 1 (systemd)
        self._unshare_pid = None

    @staticmethod
    def _norm_bind(b):
        if isinstance(b, str):
            return (b, b, "rw")
        b = tuple(b)
        return (b[0], b[1], b[2] if len(b) > 2 else "rw")

    # ---- setup ---------------------------------------------------------------

    @property
    def unit_dir(self):
        """The private unit directory, as a host path."""
        return os.path.join(self.stage, "units")

    def manager_log(self):
        """PID 1's own messages (it logs to the namespace's journald)."""
        return self.journal(None, output="short", extra=("_PID=1",))

    def write_unit(self, name, text):
        p = os.path.join(self.unit_dir, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)

    def write_file(self, rel, text, mode=0o755):
        """Write stage/<rel>; returns its path inside the namespace."""
        p = os.path.join(self.stage, rel)
        os.makedirs(os.path.dirname(p), mode=0o755, exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)
        return os.path.join(STAGE_IN, rel)

    def _write_stage(self):
        os.chmod(self.stage, 0o755)
        os.makedirs(self.unit_dir)
        os.makedirs(os.path.join(self.stage, "empty"))
        for t in STUB_TARGETS:
            self.write_unit(t + ".target",
                            "[Unit]\nDescription=%s (sysdns stub)\nDefaultDependencies=no\n" % t)
        for u in REAL_UNITS:
            if os.path.exists(os.path.join(LIB_UNITS, u)):
                if self.own_unit_dirs:   # the host's /lib/systemd/system is hidden
                    shutil.copy(os.path.join(LIB_UNITS, u), os.path.join(self.unit_dir, u))
                else:
                    os.symlink(os.path.join(LIB_UNITS, u), os.path.join(self.unit_dir, u))
        # The host's hard RLIMIT_NOFILE may be below journald's LimitNOFILE.
        self.write_unit("systemd-journald.service.d/sysdns.conf",
                        "[Service]\nLimitNOFILE=4096\n")
        wants = list(self.wants)
        if self.journald:
            wants = ["systemd-journald.socket", "systemd-journald-dev-log.socket",
                     "systemd-journald.service"] + wants
        self.write_unit(TARGET, "[Unit]\nDescription=sysdns boot target\n"
                        "Requires=sysinit.target\nAfter=sysinit.target\nAllowIsolate=yes\n"
                        + "".join("Wants=%s\n" % w for w in wants))
        for name, text in self.unit_files.items():
            self.write_unit(name, text)
        for rel, text in self.files.items():
            self.write_file(rel, text)
        q = shlex.quote
        lines = [
            "set -e",
            "mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run",
            "mkdir -p %s /run/.sysdns-hold" % STAGE_IN,
            "mount --bind %s %s" % (q(self.stage), STAGE_IN),
        ]
        for i, (src, _, _) in enumerate(self.extra_binds):
            if os.path.isdir(src):
                lines.append("mkdir /run/.sysdns-hold/%d" % i)
            else:
                lines.append("touch /run/.sysdns-hold/%d" % i)
            lines.append("mount --bind %s /run/.sysdns-hold/%d" % (q(src), i))
        # Missing mount points are made without touching the host: inside a
        # private tmpfs, or in an overlay (tmpfs upper) of their nearest
        # existing ancestor, mounted before everything else.
        private = ["/run", "/tmp", "/var/tmp", "/var/lib/systemd"] + \
            [os.path.normpath(p) for p in self.tmpfs]
        overlays = []

        def make_point(path, is_dir):
            path = os.path.normpath(path)
            if not any(path.startswith(d + "/") for d in private) \
                    and not os.path.lexists(path):
                anc = os.path.dirname(path)
                while not os.path.isdir(anc):
                    anc = os.path.dirname(anc)
                if anc not in overlays:
                    if anc == "/" or any(m.startswith(anc + "/") for m in _mount_points()):
                        raise ValueError("%s does not exist and %s has mounts below it: "
                                         "choose a path under /run, /tmp or a plain "
                                         "directory" % (path, anc))
                    overlays.append(anc)
            if is_dir:
                return ["mkdir -p %s" % q(path)]
            return ["mkdir -p %s" % q(os.path.dirname(path)),
                    "[ -e %s ] || touch %s" % (q(path), q(path))]

        later = []
        for p in self.tmpfs:
            later += make_point(p, True)
            later.append("mount -t tmpfs -o mode=755 tmpfs %s" % q(p))
        for i, (src, dst, mode) in enumerate(self.extra_binds):
            later += make_point(dst, os.path.isdir(src))
            later.append("mount --move /run/.sysdns-hold/%d %s" % (i, q(dst)))
            if mode == "ro":
                later.append("mount -o remount,bind,ro %s" % q(dst))
        for n, anc in enumerate(sorted(overlays, key=len)):
            lines += ["mkdir -p /run/.sysdns-ovl/%d/u /run/.sysdns-ovl/%d/w" % (n, n),
                      "mount -t overlay overlay -o lowerdir=%s,upperdir=/run/.sysdns-ovl/%d/u,"
                      "workdir=/run/.sysdns-ovl/%d/w %s" % (q(anc), n, n, q(anc))]
        lines += [
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp",
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp",
            "mount -t tmpfs -o mode=755 tmpfs /var/lib/systemd",
        ] + later
        lines += [
            "rmdir /run/.sysdns-hold/* 2>/dev/null || true; rm -f /run/.sysdns-hold/*; "
            "rmdir /run/.sysdns-hold",
            # /sys and /proc/sys read-only: no sysctl or sysfs write reaches the host
            "mount --bind /sys /sys",
            "mount -o remount,bind,ro,nosuid,nodev,noexec /sys",
            "mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup",
            "mount --bind /proc/sys /proc/sys",
            "mount -o remount,bind,ro /proc/sys",
            # private /dev
            "D=/run/.sysdns-dev; mkdir $D; mount -t tmpfs -o mode=755,nosuid tmpfs $D",
            "for n in null zero full random urandom tty; do touch $D/$n; "
            "mount --bind /dev/$n $D/$n; done",
            "mkdir $D/shm $D/pts",
            "ln -s /proc/self/fd $D/fd; ln -s /proc/self/fd/0 $D/stdin; "
            "ln -s /proc/self/fd/1 $D/stdout; ln -s /proc/self/fd/2 $D/stderr",
            "mount --move $D /dev; rmdir $D",
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm",
            "mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts /dev/pts",
            "ln -s pts/ptmx /dev/ptmx",
            # journald keeps everything in the private /run, unthrottled
            "mkdir -p /run/systemd/journald.conf.d",
            "printf '[Journal]\\nStorage=volatile\\nRuntimeMaxUse=64M\\nRateLimitBurst=0\\nForwardToSyslog=no\\n"
            "ForwardToKMsg=no\\nForwardToConsole=no\\nForwardToWall=no\\n'"
            " > /run/systemd/journald.conf.d/sysdns.conf",
            "cd /",
        ]
        if self.own_unit_dirs:
            lines += ["mount --bind %s/units %s" % (STAGE_IN, LIB_UNITS),
                      "mount -t tmpfs -o mode=755 tmpfs /etc/systemd/system"]
            if os.path.isdir("/usr/local/lib/systemd/system"):
                lines.append("mount -t tmpfs -o mode=755 tmpfs /usr/local/lib/systemd/system")
            unit_path = ""
        else:
            unit_path = "SYSTEMD_UNIT_PATH=%s/units " % STAGE_IN
        lines += [
            "exec env -i container=sysdns PATH=/usr/sbin:/usr/bin:/sbin:/bin "
            "%sSYSTEMD_GENERATOR_PATH=%s/empty "
            "SYSTEMD_ENVIRONMENT_GENERATOR_PATH=%s/empty %s --unit=%s "
            "--log-target=journal --log-level=%s --log-color=no --show-status=no"
            % (unit_path, STAGE_IN, STAGE_IN, SYSTEMD, TARGET, q(self.log_level)),
        ]
        with open(os.path.join(self.stage, "init.sh"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self):
        why = unavailable_reason()
        if why:
            raise SystemdUnavailable(why)
        sweep_stale()
        self.stage = tempfile.mkdtemp(prefix="sysdns-")
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self):
        self._write_stage()
        base = _cgroup2_base()
        parent = base + _own_cgroup2_path().rstrip("/")
        self.cgroup = os.path.join(parent, "sysdns-%d-%s" % (os.getpid(),
                                   os.path.basename(self.stage)[len("sysdns-"):]))
        try:
            os.mkdir(self.cgroup)
        except OSError as e:
            self.cgroup = None
            raise SystemdUnavailable("cannot create a cgroup2 directory under %s: %s"
                                     % (parent, e))
        init = os.path.join(self.stage, "init.sh")
        argv = ["unshare", "--pid", "--fork", "--kill-child=SIGKILL", "--mount", "--uts",
                "--ipc", "--cgroup", "--propagation", "private", "--mount-proc",
                "/bin/sh", init]
        self._out = open(os.path.join(self.stage, "launcher.log"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, os.path.join(self.cgroup, "cgroup.procs"),
             str(os.getpid())] + argv,
            stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT, cwd="/",
            start_new_session=True)
        deadline = time.monotonic() + self.boot_timeout
        # launcher (execs unshare) -> PID 1 (sh init.sh, then systemd)
        self._unshare_pid = self.proc.pid
        while self.pid is None:
            if self.proc.poll() is not None:
                raise SystemdUnavailable("namespace setup failed (exit status %s): %s"
                                         % (self.proc.returncode, self._failure()))
            if time.monotonic() > deadline:
                raise SystemdUnavailable("namespace did not come up: %s" % self._failure())
            c = self._children(self.proc.pid)
            if c and self._comm(c[0]) == "systemd":
                self.pid = c[0]
                break
            time.sleep(0.02)
        state = ""
        while True:
            if self.proc.poll() is not None:
                raise SystemdUnavailable("systemd exited during boot: %s" % self._failure())
            if os.path.exists("/proc/%d/root/run/systemd/private" % self.pid):
                r = self.run("systemctl", "is-system-running", check=False, timeout=5)
                state = r.stdout.strip()
                if state in ("running", "degraded"):
                    break
            if time.monotonic() > deadline:
                raise SystemdUnavailable("systemd did not finish booting in %.0fs "
                                         "(state %r): %s" % (self.boot_timeout, state,
                                                             self._failure()))
            time.sleep(0.05)
        self.boot_state = state

    def _failure(self):
        try:
            with open(os.path.join(self.stage, "launcher.log"), errors="replace") as f:
                out = f.read()
        except OSError:
            out = ""
        return "launcher output: %r" % out.strip()[-2000:]

    @staticmethod
    def _children(pid):
        try:
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    @staticmethod
    def _comm(pid):
        try:
            with open("/proc/%d/comm" % pid) as f:
                return f.read().strip()
        except OSError:
            return ""

    # ---- control -------------------------------------------------------------

    def run(self, *argv, check=True, timeout=30, input=None):
        """Run a command inside the namespaces (mount + pid) as root."""
        env = dict(os.environ, SYSTEMD_PAGER="cat", SYSTEMD_COLORS="0", PAGER="cat",
                   SYSTEMD_LOG_COLOR="0")
        r = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "--"] + list(argv),
                           input=input, capture_output=True, text=True, timeout=timeout,
                           cwd="/", env=env)
        if check and r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, list(argv), r.stdout, r.stderr)
        return r

    def systemctl(self, *args, check=True, timeout=30):
        return self.run("systemctl", "--no-pager", "--no-ask-password", *args,
                        check=check, timeout=timeout)

    def daemon_reload(self):
        self.systemctl("daemon-reload")

    def show(self, unit, props=("ActiveState", "SubState", "MainPID", "StatusText",
                                "Result", "ExecMainStatus", "NRestarts")):
        r = self.systemctl("show", "-p", ",".join(props), unit)
        out = {}
        for line in r.stdout.splitlines():
            k, _, v = line.partition("=")
            out[k] = v
        return out

    def state(self, unit):
        s = self.show(unit, ("ActiveState", "SubState"))
        return s.get("ActiveState"), s.get("SubState")

    def wait_state(self, unit, active, sub=None, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            a, s = self.state(unit)
            if a == active and (sub is None or s == sub):
                return a, s
            if time.monotonic() > deadline:
                raise AssertionError("%s: %s/%s, wanted %s/%s\n%s" % (
                    unit, a, s, active, sub, self.status(unit)))
            time.sleep(0.05)

    def status(self, unit):
        r = self.systemctl("status", "-l", "--lines=50", unit, check=False)
        return r.stdout + r.stderr

    def journal(self, unit=None, output="cat", extra=(), manager=False):
        """The namespace's journal. With unit=: what the unit's own processes
        logged (their stdout/stderr: _SYSTEMD_UNIT=), plus systemd's messages
        about the unit if manager=True (journalctl -u). Default format:
        message text only."""
        argv = ["journalctl", "--no-pager", "-q", "-o", output]
        if unit:
            argv += ["-u", unit] if manager else ["_SYSTEMD_UNIT=" + unit]
        r = self.run(*argv, *extra, check=False)
        return r.stdout

    def host_pid(self, nspid):
        """Host PID of the process that is `nspid` inside the namespace."""
        nspid = int(nspid)
        if nspid == 1:
            return self.pid
        mine = os.readlink("/proc/%d/ns/pid" % self.pid)
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                if os.readlink("/proc/%s/ns/pid" % d) != mine:
                    continue
                with open("/proc/%s/status" % d) as f:
                    for line in f:
                        if line.startswith("NSpid:"):
                            ids = line.split()[1:]
                            if len(ids) >= 2 and int(ids[-1]) == nspid:
                                return int(d)
            except OSError:
                continue
        return None

    def ns_pids(self):
        """Host PIDs of every process in the namespace."""
        out = []
        if self.pid is None:
            return out
        try:
            mine = os.readlink("/proc/%d/ns/pid" % self.pid)
        except OSError:
            return out
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if os.readlink("/proc/%s/ns/pid" % d) == mine:
                        out.append(int(d))
                except OSError:
                    pass
        return out

    # ---- teardown ------------------------------------------------------------

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None and self.pid is not None:
                try:    # clean poweroff: units are stopped
                    os.kill(self.pid, signal.SIGRTMIN + 4)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.poll() is None:
                # PID 1 of a pid namespace: SIGKILL ends every process in it
                for p in (self.pid, self._unshare_pid):
                    if p is not None:
                        try:
                            os.kill(p, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
            self._out.close()
            self.proc = None
        if self.cgroup:
            deadline = time.monotonic() + 5
            while True:
                try:
                    _rmdir_tree(self.cgroup)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            self.cgroup = None
        if self.stage:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = None
        self.pid = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False
