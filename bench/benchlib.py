"""Helpers shared by the bench/ scenarios (core.py, tls.py).

Processes: every process a scenario starts goes through start() and is
stopped by its PID with stop()/stop_all(), children included (found through
/proc, never by name). CPU: utime+stime of a process tree from /proc/PID/stat,
the machine's busy time from /proc/stat, and "others' CPU" (what processes we
did not start took) for noise detection. Memory: VmRSS of a process tree.
wrk: output parsing. Reports: the static nginx origin, machine facts, and
bench/results/latest/ (one <name>.md/.png/.src per scenario + report.md).
"""
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")


def env_int(name, default, lo=0, prog="bench"):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        sys.exit(f"{prog}: {name}={v!r} is not an integer")
    if n < lo:
        sys.exit(f"{prog}: {name} must be >= {lo}")
    return n


# ---------------------------------------------------------------- processes

STARTED = []                  # Popen objects we own; stopped by PID at exit


def start(cmd, logfile, cwd=None):
    f = open(logfile, "ab")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
    f.close()
    STARTED.append(p)
    return p


def descendants(pid):
    """PIDs of every live descendant of pid (children via /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        cur = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{cur}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{cur}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def stop(p, grace=10.0):
    """SIGTERM the process (it stops its own children), SIGKILL after grace;
    then make sure no child it had is left behind (by PID). Returns exit code."""
    if p.poll() is None:
        kids = descendants(p.pid)
        try:
            p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if p in STARTED:
        STARTED.remove(p)
    return p.returncode


def run_main(main, prog):
    """Run a scenario's main(): SIGTERM and Ctrl-C stop it cleanly, and
    every process it started is stopped by PID whatever happens."""
    def _term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, _term)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(f"{prog}: interrupted, stopping everything", file=sys.stderr)
        sys.exit(130)
    finally:
        stop_all()


def stop_all():
    for p in list(reversed(STARTED)):
        stop(p, grace=5.0)


def proc_ticks(pid):
    """utime+stime of one process (all its threads), in clock ticks; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])   # fields 14 and 15 of proc(5)


def tree_ticks(pid):
    """{pid: ticks} for pid and all of its descendants."""
    out = {}
    for q in [pid] + descendants(pid):
        t = proc_ticks(q)
        if t is not None:
            out[q] = t
    return out


def proc_rss_kb(pid):
    """VmRSS of one process in KiB (from /proc/PID/status); None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return 0


def tree_rss_kb(pid):
    """{pid: VmRSS KiB} for pid and all of its descendants."""
    out = {}
    for q in [pid] + descendants(pid):
        v = proc_rss_kb(q)
        if v is not None:
            out[q] = v
    return out


def system_busy_ticks():
    """Busy ticks of all CPUs together: user+nice+system+irq+softirq from
    /proc/stat's cpu line (guest time is inside user; steal is not ours)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6]


def children_cpu():
    """CPU seconds of our reaped children (wrk runs are reaped by subprocess.run)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def background_pct(seconds=1.0):
    """% of one CPU busy while we do nothing: other people's processes."""
    s0, t0 = system_busy_ticks(), time.monotonic()
    time.sleep(seconds)
    return (system_busy_ticks() - s0) / CLK_TCK / (time.monotonic() - t0) * 100


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, p, deadline=10.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if p.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def wait_children(p, deadline=5.0):
    """Wait until p has forked (sluice and nginx fork one worker after binding)."""
    end = time.monotonic() + deadline
    while not descendants(p.pid) and time.monotonic() < end:
        time.sleep(0.02)


# ---------------------------------------------------------------- pinning

def pinning(pin):
    """(proxy_pin, load_pin, text): taskset prefixes putting the proxy on the
    first CPU we may use and the load side (wrk, backend) on the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if pin and len(cpus) >= 2:
        proxy_cpus = str(cpus[0])
        load_cpus = ",".join(str(c) for c in cpus[1:])
        return (["taskset", "-c", proxy_cpus], ["taskset", "-c", load_cpus],
                f"proxy (all its processes) on CPU {proxy_cpus}; wrk and the backend "
                f"on CPU {load_cpus} (taskset -c)")
    return [], [], ("nothing pinned" + ("" if pin else " (PIN=0)")
                    + (f" (only {len(cpus)} CPU)" if len(cpus) < 2 else ""))


# ---------------------------------------------------------------- the static origin

BODY_SIZE = 128
# Same 128 bytes as demo_backend's default body (its 64-byte pattern twice,
# with '.' for the newline so it fits an nginx `return` string).
STATIC_BODY = ("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-." * 2)[:BODY_SIZE]


def conf_backend_nginx(d, port):
    return f"""# static origin: nginx answering every request with {BODY_SIZE} bytes
worker_processes 1;
daemon off;
master_process on;
pid {d}/backend-nginx.pid;
error_log {d}/backend-nginx.error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path {d}/tmp-backend/body;
    proxy_temp_path {d}/tmp-backend/proxy;
    fastcgi_temp_path {d}/tmp-backend/fastcgi;
    uwsgi_temp_path {d}/tmp-backend/uwsgi;
    scgi_temp_path {d}/tmp-backend/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=256;
        location / {{
            default_type text/plain;
            return 200 "{STATIC_BODY}";
        }}
    }}
}}
"""


def start_backend_nginx(d, load_pin, prog="bench"):
    """The static nginx origin, on a free port. Returns (Popen, port, command line)."""
    port = free_port()
    os.makedirs(os.path.join(d, "tmp-backend"), exist_ok=True)
    conf = write(os.path.join(d, "backend-nginx.conf"), conf_backend_nginx(d, port))
    cmd = load_pin + ["nginx", "-p", d, "-e", os.path.join(d, "backend-nginx.error.log"), "-c", conf]
    p = start(cmd, os.path.join(d, "backend-nginx.out"))
    if not wait_port(port, p):
        sys.exit(f"{prog}: nginx backend did not start, see {d}/backend-nginx.error.log")
    return p, port, " ".join(cmd)


# ---------------------------------------------------------------- wrk

UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def parse_wrk(out):
    r = {"requests": 0, "rps": 0.0, "p50": None, "p99": None, "sock_errors": 0,
         "sock_detail": "", "non2xx": 0}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", out)
    if m:
        r["requests"] = int(m.group(1))
        r["wrk_secs"] = float(m.group(2)) * {"ms": 0.001, "s": 1.0, "m": 60.0}.get(m.group(3), 1.0)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    for pct, val, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M):
        r["p" + pct] = float(val) * UNIT_MS[unit]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["sock_errors"] = sum(int(x) for x in m.groups())
        r["sock_detail"] = m.group(0)
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    return r


# ---------------------------------------------------------------- noise

class Quiet:
    """Runs a measurement when the machine is quiet, and again (up to
    attempts times, within budget seconds in all for waiting and re-running)
    when other processes interfered with it.

    measure_fn() must return a dict with at least other_pct (others' CPU in %
    of one CPU during the run) and, when wrk ran, wrk_secs; run() adds noise
    (list of reasons) and noisy."""

    def __init__(self, noise_pct, budget, attempts=3, log=print):
        self.noise_pct, self.budget, self.attempts, self.log = noise_pct, budget, attempts, log
        self.spent = 0.0

    def wait(self):
        t0 = time.monotonic()
        bg = background_pct(0.5)
        while bg >= self.noise_pct and self.spent + (time.monotonic() - t0) < self.budget:
            bg = background_pct(0.5)
        self.spent += max(0.0, time.monotonic() - t0 - 0.5)

    def reasons(self, r, duration):
        out = []
        if r["other_pct"] >= self.noise_pct:
            out.append(f"other processes used {r['other_pct']:.0f}% of a CPU")
        if duration and r.get("wrk_secs", duration) > duration * 1.1 + 0.5:
            out.append(f"the {duration} s wrk run took {r['wrk_secs']:.1f} s "
                       "(wrk was not scheduled for a while)")
        return out

    def run(self, measure_fn, what, duration, notes, describe=lambda r: ""):
        """what: 'round 2, sluice' (for notes); describe(r): the discarded
        run's figures, for the note that says it was discarded."""
        r = None
        for attempt in range(1, self.attempts + 1):
            self.wait()
            t1 = time.monotonic()
            prev = r
            r = measure_fn()
            r["noise"] = self.reasons(r, duration)
            r["noisy"] = bool(r["noise"])
            if prev is not None:
                notes.append(f"{what}: attempt {attempt - 1} discarded: {'; '.join(prev['noise'])}"
                             + (f" ({describe(prev)})" if describe(prev) else ""))
            if not r["noisy"] or attempt == self.attempts or self.spent >= self.budget:
                break
            self.spent += time.monotonic() - t1
            self.log(f"{what}: {'; '.join(r['noise'])}; re-running")
        if r["noisy"]:
            notes.append(f"{what}: noisy run kept ({'; '.join(r['noise'])}; {self.attempts} attempts "
                         f"or the {self.budget} s budget for waiting/re-running spent)")
        return r


# ---------------------------------------------------------------- files, text

def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def read_tail(path, start_at):
    try:
        with open(path, "rb") as f:
            f.seek(start_at)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def fsize(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def cmd_out(cmd, timeout=10):
    try:
        cp = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=timeout)
        return cp.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def fmt(x, nd=0):
    if x is None:
        return "—"
    return f"{x:,.{nd}f}"


def mmm(values):
    """(median, min, max) of the non-None values, or (None, None, None)."""
    v = [x for x in values if x is not None]
    return (statistics.median(v), min(v), max(v)) if v else (None, None, None)


def machine_facts(software):
    """[(name, value)] describing the machine; software: [(name, version)] to
    put after the OS line."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return ([("nproc", str(os.cpu_count())),
             ("CPU", model),
             ("virtualization", cmd_out(["systemd-detect-virt"]) or "?"),
             ("kernel", platform.release()),
             ("os", cmd_out(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]))]
            + list(software)
            + [("load average at start", " ".join(open("/proc/loadavg").read().split()[:3])),
               ("others' CPU at start", f"{background_pct(1.0):.0f}% of one CPU (1 s sample)")])


def git_describe():
    """'git abc1234' plus ', src/ modified' when src/ has uncommitted changes."""
    commit = cmd_out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = cmd_out(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "src"])
    return f"git {commit}{', src/ modified' if dirty else ''}"


# ---------------------------------------------------------------- results/latest

def refresh_latest(results, outdir, name, files=None):
    """Copy outdir/<name>.md (+ .png and any other files) into results/latest/,
    point latest/<name> at outdir/<name>/ (configs, raw output), note where it
    came from in latest/<name>.src, and rewrite latest/report.md, which links
    the newest report of every scenario found in latest/."""
    latest = os.path.join(results, "latest")
    if os.path.islink(latest) or os.path.isfile(latest):
        os.unlink(latest)
    os.makedirs(latest, exist_ok=True)
    for f in files or (f"{name}.md", f"{name}.png"):
        src = os.path.join(outdir, f)
        if os.path.exists(src):
            shutil.copy2(src, os.path.join(latest, f))
    ts = os.path.basename(outdir)
    write(os.path.join(latest, f"{name}.src"), ts + "\n")
    link = os.path.join(latest, name)
    if os.path.islink(link) or os.path.isfile(link):
        os.unlink(link)
    elif os.path.isdir(link):
        shutil.rmtree(link)
    if os.path.isdir(os.path.join(outdir, name)):
        os.symlink(os.path.join("..", ts, name), link)
    L = ["# sluice bench — latest results", ""]
    for md in sorted(x for x in os.listdir(latest) if x.endswith(".md") and x != "report.md"):
        scen = md[:-3]
        title = scen
        with open(os.path.join(latest, md)) as f:
            for line in f:
                if line.startswith("# "):
                    title = line[2:].strip()
                    break
        src = ""
        if os.path.exists(os.path.join(latest, scen + ".src")):
            s = open(os.path.join(latest, scen + ".src")).read().strip()
            src = f" — from [{s}](../{s}/{md})"
        L.append(f"## {scen}: {title}")
        L.append("")
        L.append(f"Full report: [{md}]({md}){src}")
        L.append("")
        for png in sorted(x for x in os.listdir(latest)
                          if x.endswith(".png") and (x == scen + ".png" or x.startswith(scen + "-"))):
            L.append(f"![{png[:-4]}]({png})")
            L.append("")
    write(os.path.join(latest, "report.md"), "\n".join(L))


def report_configs_and_machine(lines, confs, facts):
    """Append to a report's LINES every config file used (CONFS: name ->
    path, shown verbatim) and the machine facts table (FACTS: (key, value))."""
    for name, path in confs.items():
        lang = "yaml" if path.endswith(".yaml") else "nginx" if path.endswith(".conf") else ""
        lines += [f"`{os.path.basename(path)}` ({name}):", "", f"```{lang}",
                  open(path).read().rstrip(), "```", ""]
    lines += ["## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v.replace('|', '/')} |" for k, v in facts]
    lines.append("")
