"""Every sluice configuration shown in the documentation passes `sluice -t`.

Checked: each ```yaml block of docs/*.md that is a complete configuration,
i.e. has both a top-level `listeners:` and a top-level `backends:` key (the
two a configuration cannot do without), and every conf/*.yaml file. Blocks
with neither are not configurations. Blocks with just one are fragments
(docs/config.md shows single sections that way) and are skipped, except in
the pages listed in COMPLETE_ONLY, where every yaml block must be complete.
docs/config.md's fragments are checked further down, made whole with a
minimal listener or backend (test_config_md_fragment_is_valid).

How a block is checked:
- It is written to a scratch file padded with blank lines, so that sluice's
  `FILE:LINE:COL` errors carry the line numbers of the .md file itself.
- `$SLUICE_BIN -t -c FILE` runs from a scratch directory where
  conf/make-demo-certs.sh has made conf/tls/{ecdsa,rsa}.{pem,key}, as
  `make run` does. The docs' relative conf/tls/... paths therefore resolve to
  real files, and `-t` loads them (certificates, keys, CA files).
- A file path the scratch directory does not have (an operator's
  /etc/sluice/..., or a stand-in such as conf/tls/client-ca.pem) is rewritten
  in place, by the key it belongs to:
    cert, key       -> the demo ECDSA pair (the RSA pair when the path
                       contains "rsa"), so a cert and its key still match;
    client_ca, ca   -> the demo ECDSA certificate, a self-signed CA;
    ticket_keys     -> a ticket key file made with tlsutil.ticket_keys_file.
  The rewrite changes only the value on its line, so positions stay right.
"""

import glob
import os
import re
import subprocess

import pytest

import tlsutil

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Pages whose yaml blocks must all be complete, valid configurations.
COMPLETE_ONLY = ("docs/client-identity.md", "docs/fronting-weblogic-tomcat.md")

FENCE_OPEN = re.compile(r"^(\s*)```yaml\s*$")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")
TOP_LISTENERS = re.compile(r"^listeners:[ \t]*(#.*)?$", re.M)
TOP_BACKENDS = re.compile(r"^backends:[ \t]*(#.*)?$", re.M)
# A file-path value: `cert: x`, `- key: "x"`, `{ca: x, ...}`. The look-behind
# keeps `client_ca` from matching as `ca` and `ticket_keys` as `key`.
PATH_VALUE = re.compile(
    r"(?<![\w.])(cert|key|client_ca|ca|ticket_keys)(\s*:\s*)([\"']?)([^\"'\s#,}]+)\3")


def yaml_blocks(path):
    """[(first content line, 1-based; text)] of the ```yaml blocks in PATH."""
    blocks = []
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent = len(m.group(1))
        start = i + 1
        j = start
        while j < len(lines) and not FENCE_CLOSE.match(lines[j]):
            j += 1
        body = [l[indent:] if l[:indent].strip() == "" else l for l in lines[start:j]]
        blocks.append((start + 1, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def is_complete(text):
    return bool(TOP_LISTENERS.search(text)) and bool(TOP_BACKENDS.search(text))


def doc_configs():
    out = []
    for md in sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        rel = os.path.relpath(md, REPO)
        for line, text in yaml_blocks(md):
            if is_complete(text):
                out.append(pytest.param(rel, line, text, id="%s:%d" % (rel, line)))
    return out


def conf_files():
    return [pytest.param(p, id=os.path.relpath(p, REPO))
            for p in sorted(glob.glob(os.path.join(REPO, "conf", "*.yaml")))]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A working directory with conf/tls/ demo certificates, plus the files
    rewritten paths point to."""
    d = tmp_path_factory.mktemp("docs")
    subprocess.run(["sh", os.path.join(REPO, "conf", "make-demo-certs.sh"), str(d / "conf" / "tls")],
                   check=True, capture_output=True, timeout=60)
    # Scripts in configs are relative to the working directory, as in `make run`.
    os.symlink(os.path.join(REPO, "lua"), str(d / "lua"))
    tls = d / "conf" / "tls"
    files = {
        "ecdsa.cert": str(tls / "ecdsa.pem"), "ecdsa.key": str(tls / "ecdsa.key"),
        "rsa.cert": str(tls / "rsa.pem"), "rsa.key": str(tls / "rsa.key"),
        "ca": str(tls / "ecdsa.pem"),
        "ticket_keys": tlsutil.ticket_keys_file(str(d / "ticket.keys"), [bytes(range(48))]),
    }
    return str(d), files


def rewrite_paths(text, cwd, files):
    """Point file values that do not exist (relative to CWD) at scratch files."""
    def sub(m):
        key, sep, quote, value = m.group(1), m.group(2), m.group(3), m.group(4)
        if os.path.exists(os.path.join(cwd, value)):
            return m.group(0)
        if key == "key" and re.match(r"^(client$|header:|cookie:)", value):
            return m.group(0)  # a rate_limit's key, not a file
        if key in ("cert", "key"):
            new = files[("rsa." if "rsa" in value.lower() else "ecdsa.") + key]
        elif key in ("ca", "client_ca"):
            new = files["ca"]
        else:
            new = files["ticket_keys"]
        return "%s%s%s%s%s" % (key, sep, quote, new, quote)
    return PATH_VALUE.sub(sub, text)


def check(sluice_bin, path, cwd):
    return subprocess.run([sluice_bin, "-t", "-c", path], cwd=cwd, capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("doc,line,text", doc_configs())
def test_doc_config_is_valid(sluice_bin, scratch, doc, line, text):
    cwd, files = scratch
    body = "\n" * (line - 1) + rewrite_paths(text, cwd, files)
    path = os.path.join(cwd, "%s-L%d.yaml" % (os.path.basename(doc), line))
    with open(path, "w") as f:
        f.write(body)
    r = check(sluice_bin, path, cwd)
    assert r.returncode == 0, "%s: the yaml block at line %d fails `sluice -t` " \
        "(line numbers below are the .md file's):\n%s" % (doc, line, r.stderr)


@pytest.mark.parametrize("path", conf_files())
def test_conf_file_is_valid(sluice_bin, scratch, path):
    cwd, _ = scratch
    r = check(sluice_bin, path, cwd)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("doc", COMPLETE_ONLY)
def test_pages_show_only_complete_configs(doc):
    """These pages promise copy-paste configurations: no fragments."""
    blocks = yaml_blocks(os.path.join(REPO, doc))
    assert blocks, "%s has no yaml block" % doc
    partial = [line for line, text in blocks if not is_complete(text)]
    assert partial == [], "%s: yaml blocks at lines %s are not complete configurations " \
        "(top-level listeners: and backends:)" % (doc, partial)


def test_docs_have_configs():
    """The collection itself works: the docs do contain complete configs."""
    assert len(doc_configs()) >= 7


def test_rewrite_keeps_existing_and_replaces_missing(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "here.pem").write_text("x")
    files = {"ecdsa.cert": "/E.pem", "ecdsa.key": "/E.key", "rsa.cert": "/R.pem",
             "rsa.key": "/R.key", "ca": "/CA.pem", "ticket_keys": "/T.keys"}
    text = ("        - cert: conf/here.pem\n"
            "          key: /no-such-dir/sluice/tls/rsa.key\n"
            "      client_ca: \"/no-such-dir/ca.pem\"\n"
            "      ticket_keys: /no-such-dir/t.keys\n"
            "      tls: {ca: /no-such-dir/backend-ca.pem, sni: app.internal}\n"
            "    name: key-server\n")
    out = rewrite_paths(text, str(tmp_path), files)
    assert out == ("        - cert: conf/here.pem\n"
                   "          key: /R.key\n"
                   "      client_ca: \"/CA.pem\"\n"
                   "      ticket_keys: /T.keys\n"
                   "      tls: {ca: /CA.pem, sni: app.internal}\n"
                   "    name: key-server\n")


# ==========================================================================
# The docs' shell commands, links and paths.
#
# Every ```sh / ```console / ```bash / ```shell block of a docs/*.md page is
# either run (or checked) here, or carries a marker comment on the line(s)
# right before it:
#     <!-- not-run: why -->      never run (installs packages, systemd, root)
#     <!-- run-by: tests/e2e/FILE.py::TEST -->
#                                run by that test instead (a package and a
#                                service under real systemd): the test must
#                                exist and read the block from the page
# A ```yaml block preceded by
#     <!-- file: NAME -->
# is written to NAME in the page's scratch directory (with the page's ports
# mapped) when the page's commands run, so `sluice -c NAME` uses it.
#
# An unmarked block whose command the test cannot handle fails the test:
# docs cannot drift silently. What each command is:
#   run      sluice (build/sluice or sluice), build/demo_backend, curl,
#            openssl, grep, cat, tail, head, mkdir, ls, echo, sleep, and
#            `kill -SIG $(cat X.pid)`, which is pointed at the master this
#            test started (never anyone else's process). Each must exit 0.
#            A line ending in `&` is started in the background and tracked.
#   checked  `make T...`: every target exists in the Makefile (not run);
#            `sysctl NAME...` (reads only): each NAME exists under /proc/sys;
#            `ulimit -n`: read only.
# Ports: every port of the page's configs (and conf/sluice.yaml) is mapped to
# a free one, in configs and commands alike (`:8443` -> `:NNNNN`). The page's
# scratch directory has build/sluice and build/demo_backend (links to
# SLUICE_BIN and DEMO_BACKEND), conf/ with conf/sluice.yaml (lua/waf.lua
# swapped for lua/allow_all.lua, for speed) and demo certificates, and lua/. A command that needs a running sluice (curl, kill)
# when the page has not started one gets the `make run` setup: conf/sluice.yaml
# in front of the demo backend.
# ==========================================================================

import shlex
import shutil
import signal
import time

import harness

SHELL_LANGS = ("sh", "console", "bash", "shell")
FENCE_ANY = re.compile(r"^(\s*)```([\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(not-run|run-by|file)\s*:\s*(.*?)\s*-->\s*$")
RUN_CMDS = {"sluice", "demo_backend", "curl", "openssl", "grep", "cat", "tail", "head",
            "mkdir", "ls", "echo", "sleep", "kill"}
CHECK_CMDS = {"make", "sysctl", "ulimit"}
KILL_FORM = re.compile(r"^kill -(HUP|USR1|TERM|INT) \$\(cat ([\w./-]+\.pid)\)$")
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def fenced_blocks(path):
    """[(lang, first content line (1-based), [lines], marker or None)] of every
    fenced block in PATH. marker is (kind, value) from the comment on the
    closest non-blank line above the fence."""
    with open(path) as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE_ANY.match(lines[i])
        if not m:
            i += 1
            continue
        indent = len(m.group(1))
        j = i + 1
        while j < len(lines) and not FENCE_CLOSE.match(lines[j]):
            j += 1
        body = [l[indent:] if l[:indent].strip() == "" else l for l in lines[i + 1:j]]
        k = i - 1
        while k >= 0 and lines[k].strip() == "":
            k -= 1
        mm = MARKER.match(lines[k]) if k >= 0 else None
        out.append((m.group(2).lower(), i + 2, body, (mm.group(1), mm.group(2)) if mm else None))
        i = j + 1
    return out


def shell_commands(lang, body, first_line):
    """[(line number, command)] of a shell block: continuation lines joined,
    comments and blank lines dropped, heredoc bodies kept with their command;
    in console blocks only `$ ` lines are commands (the rest is output)."""
    cmds = []
    i = 0
    while i < len(body):
        line, no = body[i], first_line + i
        i += 1
        if lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(body):
            line = line[:-1] + " " + body[i].strip()
            i += 1
        h = re.search(r"<<-?\s*'?\"?(\w+)'?\"?", line)
        if h:
            end = h.group(1)
            while i < len(body) and body[i].strip() != end:
                line += "\n" + body[i]
                i += 1
            line += "\n" + end
            i += 1
        cmds.append((no, strip_comment(line)))
    return cmds


def strip_comment(line):
    """The command without a trailing `# comment` (outside quotes)."""
    q = None
    for n, c in enumerate(line):
        if q:
            if c == q:
                q = None
        elif c in "'\"":
            q = c
        elif c == "#" and n > 0 and line[n - 1] in " \t":
            return line[:n].rstrip()
    return line.rstrip()


def command_words(cmd):
    """The command names of every stage of CMD (pipes, &&, ||, ;, $(...))."""
    first = cmd.split("\n", 1)[0]
    lex = shlex.shlex(first, posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    names, expect = [], True
    try:
        toks = list(lex)
    except ValueError:
        return None
    for t in toks:
        if t in (";", "&", "&&", "|", "||", "(", ")", "$("):
            expect = True
            continue
        if t == "$":
            continue
        if expect:
            if re.match(r"^\w+=", t):        # VAR=value before the command
                continue
            names.append(os.path.basename(t))
            expect = False
    return names


def classify(cmd):
    """'run', 'check', or None (the test cannot handle it)."""
    names = command_words(cmd)
    if not names:
        return None
    if all(n in RUN_CMDS for n in names):
        if "kill" in names and not KILL_FORM.match(cmd.strip()):
            return None
        return "run"
    if len(names) == 1 and names[0] in CHECK_CMDS:
        words = cmd.split()
        if names[0] == "sysctl" and any(w.startswith("-") for w in words[1:]):
            return None      # -w, -p, --system: changes things
        if names[0] == "ulimit" and words[1:] != ["-n"]:
            return None
        return "check"
    return None


def makefile_targets():
    with open(os.path.join(REPO, "Makefile")) as f:
        text = f.read()
    targets = set(re.findall(r"^([\w.-]+)\s*:(?!=)", text, re.M))
    for m in re.finditer(r"^\.PHONY:((?:.*\\\n)*.*)$", text, re.M):
        targets.update(m.group(1).replace("\\\n", " ").split())
    return targets


def check_command(cmd):
    words = cmd.split()
    assign = [w for w in words if re.match(r"^\w+=", w)]
    words = [w for w in words if w not in assign]
    if words[0] == "make":
        targets = makefile_targets()
        missing = [t for t in words[1:] if not t.startswith("-") and "=" not in t and t not in targets]
        return "no Makefile target %s" % missing if missing else None
    if words[0] == "sysctl":
        missing = [n for n in words[1:] if not os.path.exists(sysctl_path(n))]
        return "no such sysctl %s" % missing if missing else None
    return None


def sysctl_path(name):
    return os.path.join("/proc/sys", *name.split("."))


def doc_pages():
    return sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))


def pages_with_commands():
    out = []
    for md in doc_pages():
        if any(lang in SHELL_LANGS and marker is None
               for lang, _, _, marker in fenced_blocks(md)):
            rel = os.path.relpath(md, REPO)
            out.append(pytest.param(rel, id=rel))
    return out


class PageSession:
    """One page's commands, run in order in a scratch directory."""

    def __init__(self, doc, workdir, sluice_bin, demo_bin):
        self.doc, self.dir = doc, workdir
        self.procs = []          # (name, Popen, stderr path)
        self.master = None
        self.ports = {}
        os.makedirs(os.path.join(workdir, "build"))
        os.symlink(sluice_bin, os.path.join(workdir, "build", "sluice"))
        os.symlink(demo_bin, os.path.join(workdir, "build", "demo_backend"))
        os.symlink(os.path.join(REPO, "lua"), os.path.join(workdir, "lua"))
        subprocess.run(["sh", os.path.join(REPO, "conf", "make-demo-certs.sh"),
                        os.path.join(workdir, "conf", "tls")],
                       check=True, capture_output=True, timeout=60)
        self.env = dict(os.environ, PATH=os.path.join(workdir, "build") + ":" + os.environ["PATH"])
        # conf/sluice.yaml with the page's ports. The WAF (waf.lua, seconds to
        # compile under ASan, on every start and reload) is swapped for
        # allow_all.lua; test_conf_file_is_valid checks the real file.
        with open(os.path.join(REPO, "conf", "sluice.yaml")) as f:
            self.default_conf = f.read().replace("lua/waf.lua", "lua/allow_all.lua")
        self.map_ports(self.default_conf)
        self.write_file("conf/sluice.yaml", self.default_conf)

    def map_ports(self, text):
        for port in re.findall(r"(?<=:)(\d{2,5})\b", text):
            if port not in self.ports and 1024 <= int(port) < 65536:
                self.ports[port] = str(harness.free_port())

    def apply_ports(self, text):
        return re.sub(r"(?<=:)(\d{2,5})\b", lambda m: self.ports.get(m.group(1), m.group(1)), text)

    def write_file(self, name, text):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(self.apply_ports(text))

    def config_ports(self, path):
        """(sluice's own ports, server ports) of the config at PATH."""
        import yaml
        with open(path) as f:
            cfg = yaml.safe_load(f)
        own = [l["address"] for l in cfg.get("listeners", [])]
        if "admin" in cfg:
            own.append(cfg["admin"].get("address", "127.0.0.1:9901"))
        servers = [s["address"] for b in cfg.get("backends", []) for s in b.get("servers", [])]
        port = lambda a: int(a.rsplit(":", 1)[1])
        return [port(a) for a in own], [port(a) for a in servers]

    def spawn(self, name, cmd):
        err = os.path.join(self.dir, "%s-%d.stderr" % (name, len(self.procs)))
        p = subprocess.Popen(["bash", "-c", "exec " + cmd], cwd=self.dir, env=self.env,
                             stdout=subprocess.DEVNULL, stderr=open(err, "w"),
                             start_new_session=True)
        self.procs.append((name, p, err))
        return p

    def start_background(self, cmd):
        names = command_words(cmd)
        if names[0] == "demo_backend":
            p = self.spawn("demo_backend", cmd)
            m = re.search(r"--listen\s+\S*:(\d+)", cmd)
            harness.wait_port(int(m.group(1)) if m else 9000, timeout=10, proc=p)
        elif names[0] == "sluice":
            m = re.search(r"-c\s+(\S+)", cmd)
            assert m, "%s: `%s`: no -c FILE" % (self.doc, cmd)
            p = self.spawn("sluice", cmd)
            self.master = p
            own, _ = self.config_ports(os.path.join(self.dir, m.group(1)))
            for port in own:
                harness.wait_port(port, timeout=20, proc=p)
        else:
            raise AssertionError("%s: cannot run `%s` in the background" % (self.doc, cmd))

    def ensure_sluice(self):
        """The `make run` setup, when the page itself started no sluice."""
        if self.master is not None:
            return
        _, servers = self.config_ports(os.path.join(self.dir, "conf", "sluice.yaml"))
        for port in sorted(set(servers)):
            self.start_background("build/demo_backend --listen 127.0.0.1:%d --threads 16 --quiet" % port)
        self.start_background("build/sluice -c conf/sluice.yaml")

    def kill(self, cmd):
        m = KILL_FORM.match(cmd.strip())
        sig, pidfile = m.group(1), m.group(2)
        self.ensure_sluice()
        path = os.path.join(self.dir, pidfile)
        if os.path.exists(path):
            with open(path) as f:
                assert int(f.read().strip()) == self.master.pid, \
                    "%s: %s does not hold the master's pid" % (self.doc, pidfile)
        os.kill(self.master.pid, getattr(signal, "SIG" + sig))
        if sig in ("TERM", "INT"):
            rc = self.master.wait(timeout=30)
            assert rc == 0, "%s: `%s`: the master exited %s" % (self.doc, cmd, rc)
        elif sig == "HUP":
            errlog = self.stderr_of(self.master)
            logs = [errlog] + glob.glob(os.path.join(self.dir, "*error*.log"))
            harness.wait_for(lambda: any("reloaded" in harness.read_text(p) for p in logs),
                             timeout=20, what="the reload to finish")

    def stderr_of(self, proc):
        return [e for _, p, e in self.procs if p is proc][0]

    def run(self, no, cmd):
        """Run CMD as the page wrote it (ports mapped)."""
        names = command_words(cmd)
        if "curl" in names or "kill" in names:
            self.ensure_sluice()
        cmd = self.apply_ports(cmd)
        if KILL_FORM.match(cmd.strip()):
            self.kill(cmd)
            return
        assert "kill" not in names, "%s:%d: `%s`: kill only as `kill -SIG $(cat X.pid)`" % (
            self.doc, no, cmd)
        if cmd.rstrip().endswith("&") and not cmd.rstrip().endswith("&&"):
            self.start_background(cmd.rstrip()[:-1].strip())
            return
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=self.dir, env=self.env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, "%s:%d: `%s` exited %d\nstdout: %s\nstderr: %s" % (
            self.doc, no, cmd, r.returncode, r.stdout[-2000:], r.stderr[-2000:])

    def close(self):
        reports = []
        for name, p, err in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait(timeout=5)
            text = harness.read_text(err)
            if name == "sluice" and any(m in text for m in SANITIZER_MARKS):
                reports.append(text[-4000:])
        return reports


@pytest.mark.parametrize("doc", pages_with_commands())
def test_doc_commands_run(sluice_bin, demo_bin, tmp_path, doc):
    """Every unmarked shell block of the page: its commands run, or are
    checked, in order; any command the test cannot handle fails."""
    session = PageSession(doc, str(tmp_path), sluice_bin, demo_bin)
    blocks = fenced_blocks(os.path.join(REPO, doc))
    for lang, line, body, marker in blocks:
        if lang == "yaml" and marker and marker[0] == "file":
            session.map_ports("\n".join(body))
    try:
        for lang, line, body, marker in blocks:
            if marker and marker[0] in ("not-run", "run-by"):
                continue
            if lang == "yaml" and marker and marker[0] == "file":
                session.write_file(marker[1], "\n".join(body) + "\n")
                continue
            if lang not in SHELL_LANGS:
                continue
            for no, cmd in shell_commands(lang, body, line):
                kind = classify(cmd)
                assert kind, "%s:%d: the test cannot run or check `%s`: make it a command " \
                    "the test knows (tests/e2e/test_docs.py) or put <!-- not-run: reason --> " \
                    "before the block" % (doc, no, cmd)
                if kind == "check":
                    err = check_command(cmd)
                    assert err is None, "%s:%d: `%s`: %s" % (doc, no, cmd, err)
                else:
                    session.run(no, cmd)
    finally:
        reports = session.close()
    assert not reports, "sanitizer report from sluice:\n" + "\n".join(reports)


def run_by_block(doc, test):
    """The lines of the shell block of DOC (a repo-relative path) marked
    <!-- run-by: tests/e2e/FILE.py::TEST -->, for that test to run."""
    found = [body for lang, _, body, marker in fenced_blocks(os.path.join(REPO, doc))
             if marker and marker[0] == "run-by" and marker[1].endswith("::" + test)]
    assert len(found) == 1, "%s: %d blocks marked run-by ...::%s" % (doc, len(found), test)
    return [ln for ln in found[0] if ln.strip() and not ln.lstrip().startswith("#")]


def test_markers_are_well_formed():
    """A marker names its reason (not-run) or file, and sits right above a
    block it applies to: not-run above a shell block, file above yaml."""
    bad = []
    for md in doc_pages():
        rel = os.path.relpath(md, REPO)
        with open(md) as f:
            text = f.read()
        n_markers = len(re.findall(r"^\s*<!--\s*(?:not-run|run-by|file)\s*:", text, re.M))
        used = 0
        for lang, line, body, marker in fenced_blocks(md):
            if not marker:
                continue
            used += 1
            kind, value = marker
            if not value:
                bad.append("%s:%d: %s marker without a %s" % (rel, line, kind,
                                                              "reason" if kind == "not-run" else "name"))
            if kind == "file" and lang != "yaml":
                bad.append("%s:%d: file marker above a %s block" % (rel, line, lang or "plain"))
            if kind in ("not-run", "run-by") and lang not in SHELL_LANGS:
                bad.append("%s:%d: %s marker above a %s block" % (rel, line, kind, lang or "plain"))
            if kind == "run-by":
                f, _, name = value.partition("::")
                path = os.path.join(REPO, f)
                src = open(path).read() if os.path.isfile(path) and f.startswith("tests/") else ""
                if not re.search(r"^def %s\(" % re.escape(name), src, re.M):
                    bad.append("%s:%d: run-by names no test: %s" % (rel, line, value))
                elif "run_by_block(" not in src or rel not in src:
                    bad.append("%s:%d: %s does not read this page's block (run_by_block)"
                               % (rel, line, value))
        if used != n_markers:
            bad.append("%s: %d marker(s) not right above a block" % (rel, n_markers - used))
    assert bad == []


def test_sysctls_named_in_docs_exist():
    """Every kernel setting the docs name (net.*, fs.*, vm.*, kernel.*) exists
    under /proc/sys (nothing is changed)."""
    names = set()
    for md in doc_pages():
        with open(md) as f:
            names.update(re.findall(r"\b((?:net|fs|vm|kernel)(?:\.[a-z0-9_-]*[a-z0-9_])+)", f.read()))
    assert "net.core.somaxconn" in names, "the operator guide names the kernel settings"
    missing = sorted(n for n in names if not os.path.exists(sysctl_path(n)))
    assert missing == []


def test_classify():
    assert classify("curl -fsS http://127.0.0.1:9901/metrics | grep -E 'x|y'") == "run"
    assert classify("build/sluice -t -c sluice.yaml") == "run"
    assert classify("kill -HUP $(cat sluice.pid)") == "run"
    assert classify("kill -HUP $(pidof sluice)") is None
    assert classify("kill 1234") is None
    assert classify("QUICK=1 make bench") == "check"
    assert classify("sysctl net.core.somaxconn") == "check"
    assert classify("sysctl -w net.core.somaxconn=1") is None
    assert classify("apt-get install -y curl") is None
    assert classify("curl x && systemctl restart sluice") is None
    assert check_command("make no-such-target") is not None
    assert check_command("QUICK=1 make bench bench-churn") is None
    assert check_command("sysctl net.core.no_such_thing") is not None


# --------------------------------------------------------------------------
# Links between pages, and repository paths the docs name.

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"(?<![\w/.-])((?:docs|tests|src)/[\w./*{},-]*[\w*/}])")


def markdown_files():
    files = sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
    return files + [os.path.join(REPO, "README.md")]


def prose(path):
    """The text of PATH outside fenced blocks."""
    out, fence = [], False
    with open(path) as f:
        for line in f:
            if re.match(r"^\s*```", line):
                fence = not fence
                continue
            out.append("" if fence else line)
    return "".join(out)


def slug(heading):
    """GitHub's anchor for a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    return {slug(m) for m in re.findall(r"^#+\s+(.*?)\s*$", prose(path), re.M)}


def test_relative_links_resolve():
    """Every relative link in docs/**/*.md and README.md points at a file that
    exists, and its #anchor at a heading of that page."""
    bad = []
    for md in markdown_files():
        rel = os.path.relpath(md, REPO)
        for target in LINK.findall(prose(md)):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                bad.append("%s: %s (no such file)" % (rel, target))
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                bad.append("%s: %s (no such heading)" % (rel, target))
    assert bad == []


def test_repo_paths_named_in_docs_exist():
    """Every docs/..., tests/... and src/... path the docs name exists (globs
    must match something)."""
    bad = []
    for md in markdown_files():
        rel = os.path.relpath(md, REPO)
        with open(md) as f:
            text = f.read()
        for p in set(REPO_PATH.findall(text)):
            p = p.rstrip(".")
            if "{" in p:
                head, alts, tail = re.match(r"(.*)\{(.*)\}(.*)", p).groups()
                cands = [head + a + tail for a in alts.split(",")]
            else:
                cands = [p]
            for c in cands:
                if not glob.glob(os.path.join(REPO, c)):
                    bad.append("%s: %s" % (rel, c))
    assert bad == []


def test_bench_pages_name_real_targets_and_scripts():
    """docs/bench/*.md: their shell blocks run benchmarks (not run here), but
    every `make T` names a Makefile target and every `sh PATH` an existing
    script."""
    targets, bad = makefile_targets(), []
    for md in sorted(glob.glob(os.path.join(REPO, "docs", "bench", "*.md"))):
        rel = os.path.relpath(md, REPO)
        for lang, line, body, _ in fenced_blocks(md):
            if lang not in SHELL_LANGS:
                continue
            for no, cmd in shell_commands(lang, body, line):
                words = [w for w in cmd.split() if not re.match(r"^\w+=", w)]
                if words and words[0] == "make":
                    bad += ["%s:%d: make %s" % (rel, no, t) for t in words[1:]
                            if not t.startswith("-") and t not in targets]
                elif words and words[0] == "sh" and len(words) > 1:
                    if not os.path.exists(os.path.join(REPO, words[1])):
                        bad.append("%s:%d: %s" % (rel, no, words[1]))
    assert bad == []


# ==========================================================================
# docs/config.md documents every key src/cfg_schema.c accepts, in the right
# section.
#
# The keys and their nesting come from the libcyaml schema tables of
# src/cfg_schema.c, read as C text (no binary needed):
#     static const cyaml_schema_field_t NAME[] = { ENTRY, ..., CYAML_FIELD_END };
#     static const cyaml_schema_value_t NAME = { CYAML_VALUE_MAPPING(..., FIELDS) };
# An entry's first string literal is its key. An entry that names another
# field table (CYAML_FIELD_MAPPING_PTR) is a mapping with those keys; one
# that names (&) a value schema built with CYAML_VALUE_MAPPING is a list of
# such mappings (`key[]`); any other entry (F_STR, F_STRS: a scalar or a list
# of scalars) is a leaf. The root table is the one no other table names.
#
# Paths are dotted, lists marked `[]`: `workers`, `admin.token`,
# `listeners[].tls.certificates[].cert`, `listeners[].inspect.budget.time`.
# In docs/config.md a heading whose first backticked word is such a path
# (`## \`backends[].forward\``) opens that section; `## Top level` opens the
# root; any other heading closes the section. A markdown table whose header's
# first cell is "Key" documents, per row, the backticked names of its first
# cell (`cert`, `key` is two keys; `budget.instructions` is a key path
# relative to the section) and must give a type and a default.

CFG_SCHEMA_C = os.path.join(REPO, "src", "cfg_schema.c")
CONFIG_MD = os.path.join(REPO, "docs", "config.md")


def _c_strip(text):
    """C text without comments (string literals kept)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def _split_entries(body):
    """The top-level comma-separated entries of an initializer body."""
    out, depth, cur, q = [], 0, "", None
    for c in body:
        if q:
            cur += c
            if c == q and not cur.endswith("\\" + q):
                q = None
            continue
        if c in "\"'":
            q = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += c
    if cur.strip():
        out.append(cur.strip())
    return out


def cfg_schema_keys(path=CFG_SCHEMA_C):
    """{dotted key path: "leaf" | "mapping" | "list"} of every key the
    schema of PATH accepts."""
    with open(path) as f:
        text = _c_strip(f.read())
    fields = {m.group(1): _split_entries(m.group(2)) for m in re.finditer(
        r"static\s+const\s+cyaml_schema_field_t\s+(\w+)\s*\[\s*\]\s*=\s*\{(.*?)\n\};",
        text, re.S)}
    values = {}
    for m in re.finditer(r"static\s+const\s+cyaml_schema_value_t\s+(\w+)\s*=\s*\{(.*?)\n\};",
                         text, re.S):
        inner = re.search(r"CYAML_VALUE_MAPPING\s*\((.*)\)", m.group(2), re.S)
        if inner:
            refs = [w for w in re.findall(r"\b\w+\b", inner.group(1)) if w in fields]
            values[m.group(1)] = refs[0] if refs else None
        else:
            values[m.group(1)] = None      # a list of scalars
    assert fields, "no cyaml_schema_field_t tables found in %s" % path

    named = set()
    for entries in fields.values():
        for e in entries:
            named.update(w for w in re.findall(r"\b\w+\b", e) if w in fields)
            named.update(values[w] for w in re.findall(r"&\s*(\w+)", e)
                         if values.get(w))
    roots = [n for n in fields if n not in named]
    assert len(roots) == 1, "cannot tell the root table of %s among %s" % (path, roots)

    keys = {}

    def walk(table, prefix, seen):
        assert table not in seen, "schema table %s nests itself" % table
        for e in fields[table]:
            m = re.match(r"(\w+)\s*\(\s*\"([^\"]+)\"", e)
            if not m:
                assert re.match(r"CYAML_FIELD_END\b", e) or e == "", \
                    "%s: cannot read schema entry `%s`" % (table, e[:60])
                continue
            key = prefix + m.group(2)
            sub = [w for w in re.findall(r"\b\w+\b", e[m.end():]) if w in fields]
            lst = [values[w] for w in re.findall(r"&\s*(\w+)", e) if values.get(w)]
            if sub:
                keys[key] = "mapping"
                walk(sub[0], key + ".", seen | {table})
            elif lst:
                keys[key] = "list"
                walk(lst[0], key + "[].", seen | {table})
            else:
                keys[key] = "leaf"

    walk(roots[0], "", frozenset())
    return keys


def config_md_keys(path=CONFIG_MD):
    """({key path: (line, type, default)} documented in the Key tables of
    PATH, [problems])."""
    keys, problems = {}, []
    section, header, fence = None, None, False
    with open(path) as f:
        lines = f.read().split("\n")
    for no, line in enumerate(lines, 1):
        if re.match(r"^\s*```", line):
            fence = not fence
            continue
        if fence:
            continue
        h = re.match(r"^#+\s+(.*?)\s*$", line)
        if h:
            m = re.match(r"^`([a-z_][\w.\[\]]*)`", h.group(1))
            section = m.group(1) if m else ("" if h.group(1) == "Top level" else None)
            header = None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if header[0] != "key" or re.match(r"^:?-+:?$", cells[0]):
            continue
        if section is None:
            problems.append("docs/config.md:%d: a Key table outside a key section "
                            "(a heading `path` or Top level)" % no)
            continue
        names = re.findall(r"`([a-z_][\w.]*)`", cells[0])
        if not names:
            problems.append("docs/config.md:%d: no `key` in the first cell" % no)
        typ = cells[header.index("type")] if "type" in header else ""
        default = cells[header.index("default")] if "default" in header else ""
        if not typ or not default:
            problems.append("docs/config.md:%d: %s: type and default must be given"
                            % (no, ", ".join(names)))
        for n in names:
            full = (section + "." + n) if section else n
            if full in keys:
                problems.append("docs/config.md:%d: %s documented twice (first at line %d)"
                                % (no, full, keys[full][0]))
            keys[full] = (no, typ, default)
    return keys, problems


def test_config_schema_extraction_reads_cfg_schema_c():
    """The extraction itself works: it sees the keys every config has, at
    every depth, and would not pass by reading nothing. And it reads the
    whole schema: no other src/*.c file holds schema tables."""
    others = []
    for p in sorted(glob.glob(os.path.join(REPO, "src", "*.c"))):
        with open(p) as f:
            if p != CFG_SCHEMA_C and re.search(r"\bcyaml_schema_(field|value)_t\b",
                                              _c_strip(f.read())):
                others.append(os.path.relpath(p, REPO))
    assert others == [], "schema tables outside src/cfg_schema.c (docs/config.md " \
        "would not be checked against them): %s" % others
    keys = cfg_schema_keys()
    assert len(keys) >= 80, sorted(keys)
    for k, kind in [("workers", "leaf"), ("admin", "mapping"), ("admin.token", "leaf"),
                    ("listeners", "list"), ("listeners[].address", "leaf"),
                    ("listeners[].tls.certificates", "list"),
                    ("listeners[].tls.certificates[].cert", "leaf"),
                    ("listeners[].inspect.budget.time", "leaf"),
                    ("listeners[].trusted_forwarders", "leaf"),
                    ("backends[].servers[].proxy_tlvs", "leaf"),
                    ("backends[].health_check.rise", "leaf"),
                    ("backends[].forward.wl_proxy_client_cert", "leaf"),
                    ("backends[].tls.session_reuse", "leaf")]:
        assert keys.get(k) == kind, (k, keys.get(k))


def test_config_schema_extraction_on_a_sample(tmp_path):
    src = tmp_path / "cfg_schema.c"
    src.write_text(
        '#define F_STR(key, flags, type, member) CYAML_FIELD_STRING_PTR(key, flags, type, member, 0, 9)\n'
        'static const cyaml_schema_field_t y_leaf_fields[] = {\n'
        '\tF_STR("a", OPT, struct y_leaf, a), /* "not_a_key" */\n'
        '\tCYAML_FIELD_END\n};\n'
        'static const cyaml_schema_value_t y_leaf_schema = {\n'
        '\tCYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_leaf, y_leaf_fields),\n};\n'
        'static const cyaml_schema_field_t y_root_fields[] = {\n'
        '\tF_STR("top", OPT, struct y_root, top),\n'
        '\tCYAML_FIELD_MAPPING_PTR("m", OPT, struct y_root, m, y_leaf_fields),\n'
        '\tCYAML_FIELD_SEQUENCE("l", CYAML_FLAG_POINTER, struct y_root, l,\n'
        '\t\t\t     &y_leaf_schema, 1, 8),\n'
        '\tCYAML_FIELD_END\n};\n')
    assert cfg_schema_keys(str(src)) == {"top": "leaf", "m": "mapping", "m.a": "leaf",
                                          "l": "list", "l[].a": "leaf"}


def test_config_md_documents_every_key():
    """Every key of src/cfg_schema.c's schema has a row (with type and
    default) in the Key table of its section of docs/config.md, and every row
    there is a key the schema accepts."""
    schema = cfg_schema_keys()
    documented, problems = config_md_keys()
    missing = sorted(k for k in schema if k not in documented)
    unknown = sorted(k for k in documented if k not in schema)
    assert not missing, "docs/config.md does not document these keys of src/cfg_schema.c " \
        "(a row in the Key table under the heading of their section): %s" % missing
    assert not unknown, "docs/config.md documents keys src/cfg_schema.c does not accept: %s" % [
        "%s (line %d)" % (k, documented[k][0]) for k in unknown]
    assert problems == []


def yaml_key_paths(node, prefix=""):
    """The dotted key paths (lists as `[]`) of a parsed YAML document."""
    out = set()
    if isinstance(node, dict):
        for k, v in node.items():
            p = prefix + str(k)
            out.add(p)
            out |= yaml_key_paths(v, p + ".")
    elif isinstance(node, list):
        for v in node:
            out |= yaml_key_paths(v, prefix[:-1] + "[].")
    return out


def test_config_md_shows_every_key_in_an_example():
    """Every key of the schema appears, at its place in the document, in a
    ```yaml example of docs/config.md; each example is a whole document
    from the top level (a fragment starts at `listeners:`, `backends:`...),
    and uses only keys the schema accepts."""
    import yaml
    schema = cfg_schema_keys()
    shown, bad = set(), []
    for line, text in yaml_blocks(CONFIG_MD):
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            bad.append("docs/config.md:%d: not YAML: %s" % (line, e))
            continue
        paths = yaml_key_paths(doc)
        wrong = sorted(p for p in paths if p not in schema)
        if not isinstance(doc, dict) or wrong:
            bad.append("docs/config.md:%d: not a document from the top level, or keys "
                       "the schema does not have: %s" % (line, wrong[:5]))
        shown |= paths
    assert bad == []
    missing = sorted(k for k in schema if k not in shown)
    assert not missing, "no ```yaml example in docs/config.md shows %s" % missing


def complete_fragment(text):
    """TEXT (a docs/config.md fragment from the top level) with the
    listeners: or backends: it lacks appended: a listener for its first
    backend, or a backend with one server for each backend its listeners
    name. Appended at the end, so the fragment's line numbers stay."""
    import yaml
    doc = yaml.safe_load(text) or {}
    extra = ""
    if "listeners" not in doc:
        names = [b.get("name", "app") for b in doc.get("backends", [])] or ["app"]
        extra += "listeners:\n  - {address: \"127.0.0.1:1\", backend: %s}\n" % names[0]
    if "backends" not in doc:
        names = sorted({l.get("backend", "app") for l in doc.get("listeners", [])}) or ["app"]
        extra += "backends:\n" + "".join(
            "  - {name: %s, servers: [{address: \"127.0.0.1:9\"}]}\n" % n for n in names)
    return text + extra


def config_md_fragments():
    rel = os.path.relpath(CONFIG_MD, REPO)
    return [pytest.param(line, text, id="%s:%d" % (rel, line))
            for line, text in yaml_blocks(CONFIG_MD) if not is_complete(text)]


@pytest.mark.parametrize("line,text", config_md_fragments())
def test_config_md_fragment_is_valid(sluice_bin, scratch, line, text):
    """The reference's single-section examples pass `sluice -t` too, made
    whole with a minimal listener or backend."""
    cwd, files = scratch
    text = rewrite_paths(text, cwd, files)
    body = "\n" * (line - 1) + complete_fragment(text)
    path = os.path.join(cwd, "config.md-L%d.yaml" % line)
    with open(path, "w") as f:
        f.write(body)
    r = check(sluice_bin, path, cwd)
    assert r.returncode == 0, "docs/config.md: the yaml block at line %d, completed with " \
        "a minimal listener or backend, fails `sluice -t` (line numbers are the .md " \
        "file's):\n%s" % (line, r.stderr)


# ==========================================================================
# docs/architecture.md: one page with the data path and a module map that
# names every src/*.c module, each with its concern.

ARCH_MD = os.path.join(REPO, "docs", "architecture.md")


def module_map(path=ARCH_MD):
    """({module.c: (line, concern)} of the table under the "Module map"
    heading of PATH, [problems])."""
    mods, problems, inside, header = {}, [], False, True
    with open(path) as f:
        lines = f.read().split("\n")
    for no, line in enumerate(lines, 1):
        h = re.match(r"^#+\s+(.*)$", line)
        if h:
            inside, header = h.group(1).lower().startswith("module map"), True
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header:
            header = False
            continue
        if re.match(r"^:?-+:?$", cells[0]):
            continue
        names = re.findall(r"`([\w-]+)\.c(?:/h)?`", cells[0])
        concern = cells[1] if len(cells) > 1 else ""
        if len(concern) < 10:
            problems.append("docs/architecture.md:%d: %s: no concern given" % (no, cells[0]))
        for n in names:
            mods[n + ".c"] = (no, concern)
    return mods, problems


def test_architecture_is_one_page_with_data_path_and_module_map():
    heads = [h.lower() for h in re.findall(r"^#+\s+(.*?)\s*$", prose(ARCH_MD), re.M)]
    assert any(h.startswith("data path") for h in heads), heads
    assert any(h.startswith("module map") for h in heads), heads
    mods, problems = module_map()
    assert len(mods) >= 20, mods
    assert problems == []


def test_module_map_names_every_source_file():
    """Every src/*.c file has a row in the module map of docs/architecture.md,
    and every module the map names exists."""
    mods, _ = module_map()
    files = {os.path.basename(p) for p in glob.glob(os.path.join(REPO, "src", "*.c"))}
    assert files, "no src/*.c"
    missing = sorted(files - set(mods))
    assert not missing, "docs/architecture.md's module map does not name %s: add a " \
        "row `| \\`name.c/h\\` | its concern |`" % missing
    stale = sorted("%s (line %d)" % (m, mods[m][0]) for m in set(mods) - files)
    assert not stale, "docs/architecture.md's module map names modules src/ does not " \
        "have: %s" % stale


# ==========================================================================
# docs/lua-api.md documents what scripts can reach, read from the C that
# registers it (no binary needed):
#   luaL_Reg tables `static const luaL_Reg NAME[] = { { "m", f }, ... }` in
#     src/inspect_api.c and src/luaprim.c: the methods of req, resp and the
#     primitives' objects, and the sluice.* functions;
#   src/inspect.c's sandbox_open(): the sluice.* fields it sets after
#     luaprim_open(), the globals it removes or replaces, the libraries it
#     opens, and string.dump; script_load()'s phase function names.
# Each luaL_Reg table is named in LUA_TABLES with the receiver the page uses
# for it; a new table fails the test until it is added there.

LUA_API_MD = os.path.join(REPO, "docs", "lua-api.md")
LUA_TABLES = {
    ("inspect_api.c", "req_m"): "req:",
    ("inspect_api.c", "resp_m"): "resp:",
    ("luaprim.c", "regex_m"): "re:",
    ("luaprim.c", "multi_m"): "m:",
    ("luaprim.c", "cidrs_m"): "set:",
    ("luaprim.c", "funcs"): "sluice.",
    ("crs_lua.c", "methods"): "crs:",
    ("shdict_lua.c", "shared_m"): "sluice.shared:",
}
LUA_LIB_NAMES = {"LUA_GNAME": "base", "LUA_STRLIBNAME": "string", "LUA_TABLIBNAME": "table",
                 "LUA_MATHLIBNAME": "math", "LUA_UTF8LIBNAME": "utf8", "LUA_IOLIBNAME": "io",
                 "LUA_OSLIBNAME": "os", "LUA_DBLIBNAME": "debug", "LUA_LOADLIBNAME": "package",
                 "LUA_COLIBNAME": "coroutine"}


def _c_function(text, name):
    m = re.search(r"^[\w \*]*\b%s\s*\([^)]*\)\s*\{(.*?)^\}" % name, text, re.M | re.S)
    assert m, "no function %s()" % name
    return m.group(1)


def lua_registrations():
    """{"req:method", "sluice.regex", ...: what}, plus "sandbox" facts:
    {("lib", "string"), ("removed", "dofile"), ("replaced", "print"),
    ("removed", "string.dump"), ("phase", "inspect"), ...}."""
    names, facts = {}, set()
    for fname in ("inspect_api.c", "luaprim.c", "crs_lua.c", "shdict_lua.c"):
        with open(os.path.join(REPO, "src", fname)) as f:
            text = _c_strip(f.read())
        for m in re.finditer(r"luaL_Reg\s+(\w+)\s*\[\s*\]\s*=\s*\{(.*?)\};", text, re.S):
            prefix = LUA_TABLES.get((fname, m.group(1)))
            assert prefix, "src/%s registers a luaL_Reg table %s that LUA_TABLES in " \
                "tests/e2e/test_docs.py does not know: add it (and document it)" % (
                    fname, m.group(1))
            for key in re.findall(r"\{\s*\"(\w+)\"\s*,", m.group(2)):
                names[prefix + key] = "%s:%s" % (fname, m.group(1))
    # primitives that set their constructor in the sluice table themselves
    with open(os.path.join(REPO, "src", "crs_lua.c")) as f:
        for key in re.findall(r"lua_setfield\s*\(\s*L\s*,\s*-2\s*,\s*\"(\w+)\"",
                              _c_function(_c_strip(f.read()), "crs_lua_open")):
            if not key.startswith("__"):
                names["sluice." + key] = "crs_lua.c:crs_lua_open"
    with open(os.path.join(REPO, "src", "inspect.c")) as f:
        text = _c_strip(f.read())
    sb = _c_function(text, "sandbox_open")
    # The sluice table: from its creation to lua_setglobal(L, "sluice").
    m = re.search(r"luaprim_open\s*\(\s*L\s*\)\s*;(.*?)lua_setglobal\s*\(\s*L\s*,\s*\"sluice\"", sb, re.S)
    assert m, "sandbox_open(): cannot find the sluice table"
    for key in re.findall(r"lua_setfield\s*\(\s*L\s*,\s*-2\s*,\s*\"(\w+)\"", m.group(1)):
        names["sluice." + key] = "inspect.c:sandbox_open"
    for lib in re.findall(r"\{\s*(LUA_\w+)\s*,\s*luaopen_\w+\s*\}", sb):
        facts.add(("lib", LUA_LIB_NAMES.get(lib, lib)))
    drop = re.search(r"drop\s*\[\s*\]\s*=\s*\{(.*?)\}", sb, re.S)
    for g in re.findall(r"\"(\w+)\"", drop.group(1) if drop else ""):
        facts.add(("removed", g))
    for g in re.findall(r"lua_setglobal\s*\(\s*L\s*,\s*\"(\w+)\"\s*\)", sb):
        if g != "sluice":
            facts.add(("replaced", g))
    for lib, field in re.findall(r"lua_getglobal\s*\(\s*L\s*,\s*(LUA_\w+)\s*\)\s*;\s*"
                                 r"lua_pushnil\s*\(\s*L\s*\)\s*;\s*lua_setfield\s*\(\s*L\s*,"
                                 r"\s*-2\s*,\s*\"(\w+)\"", sb):
        facts.add(("removed", "%s.%s" % (LUA_LIB_NAMES.get(lib, lib), field)))
    sl = _c_function(text, "script_load")
    m = re.search(r"names\s*\[\s*\]\s*=\s*\{(.*?)\}", sl, re.S)
    assert m, "script_load(): cannot find the phase function names"
    for fn in re.findall(r"\"(\w+)\"", m.group(1)):
        facts.add(("phase", fn))
    return names, facts


def test_lua_registration_extraction_reads_the_sources():
    names, facts = lua_registrations()
    for n in ("req:method", "req:deny", "req:total_us", "resp:set_header", "re:match",
              "m:scan", "set:contains", "sluice.regex", "sluice.b64decode", "sluice.shared",
              "sluice.worker"):
        assert n in names, n
    assert len(names) >= 60, sorted(names)
    for f in (("lib", "string"), ("lib", "base"), ("removed", "dofile"),
              ("removed", "string.dump"), ("replaced", "load"), ("replaced", "print"),
              ("phase", "inspect"), ("phase", "log")):
        assert f in facts, f


def test_lua_api_md_documents_every_registration():
    """Every method, function and field the C registers for scripts is named
    in docs/lua-api.md as `req:name(`, `sluice.name`, ...; every such name
    the page uses is registered; the phase functions and the sandbox's
    libraries, removals and replacements are named."""
    names, facts = lua_registrations()
    with open(LUA_API_MD) as f:
        doc = f.read()
    code = " ".join(re.findall(r"`([^`\n]+)`", doc))
    missing = []
    for n in sorted(names):
        pat = re.escape(n) + (r"\(" if ":" in n else r"(?![\w])")
        if not re.search(pat, code):
            missing.append(n)
    assert not missing, "docs/lua-api.md does not document %s (registered in %s)" % (
        missing, sorted({names[n] for n in missing}))
    recv = "|".join(re.escape(p) for p in sorted(set(LUA_TABLES.values())))
    # (`sluice.yaml:12:` is a file name, not a field: no `:`, `.` or `/` after.)
    used = set(re.findall(r"(?<![\w./])((?:%s)\w+)(?![\w:./])" % recv, code))
    stale = sorted(u for u in used if u not in names)
    assert not stale, "docs/lua-api.md names %s, which the C does not register" % stale
    sandbox = re.search(r"\*\*Sandbox\.\*\*(.*?)\n\n", doc, re.S)
    assert sandbox, "docs/lua-api.md has no **Sandbox.** paragraph"
    sb_code = set(re.findall(r"`([^`\n]+)`", sandbox.group(1)))
    sb_words = {re.sub(r"\(.*", "", w) for w in sb_code}
    undocumented = sorted("%s %s" % f for f in facts if f[0] != "phase"
                          and f[1] not in sb_words and not (f[0] == "lib" and f[1] == "base"))
    assert not undocumented, "the Sandbox paragraph of docs/lua-api.md does not name: %s" \
        % undocumented
    if ("lib", "base") in facts:
        assert "base functions" in sandbox.group(1)
    phases = sorted(f[1] for f in facts if f[0] == "phase" and not re.search(
        r"^\|\s*`%s\(" % f[1], doc, re.M))
    assert not phases, "the hook functions table of docs/lua-api.md lacks %s" % phases


def test_config_key_paths_named_in_docs_exist():
    """A dotted key path a page names in backticks (`timeouts.drain`,
    `backends[].queue_timeout`, `inspect.body`, `tls.tickets`) is a key of
    src/cfg_schema.c's schema, at that nesting (a path may leave out its start)."""
    schema = cfg_schema_keys()
    comps = {c.replace("[]", "") for k in schema for c in k.split(".")}
    plain = {k.replace("[]", "") for k in schema}
    bad = []
    for md in markdown_files():
        rel = os.path.relpath(md, REPO)
        for tok in sorted(set(re.findall(r"`([a-z_]+(?:\[\])?(?:\.[a-z_]+(?:\[\])?)+)`", prose(md)))):
            if re.search(r"\.(c|h|md|lua|ya?ml|py|sh|pem|key|png|json|txt|log)$", tok):
                continue       # a file name
            if tok.split(".")[0].replace("[]", "") not in comps:
                continue       # not a config path (sluice.shared, req.x ...)
            t = tok.replace("[]", "")
            if not any(k == t or k.endswith("." + t) for k in plain):
                bad.append("%s: `%s`" % (rel, tok))
    assert bad == [], "key paths that src/cfg_schema.c's schema does not have: %s" % bad
