"""ModSecurity as a verdict oracle for the Core Rule Set (issue 22).

`ModSecurity` runs Debian's Apache 2.4 with libapache2-mod-security2 (2.9.7)
loading the OWASP CRS 3.3.4 of Debian's modsecurity-crs package, in the
foreground (`apache2 -X`, one process, no MPM children) with its own
ServerRoot, PidFile, logs and config in the test's directory, on a free
loopback port; it is tracked by PID and killed on teardown. /etc/apache2 and
the system service are never touched.

The ModSecurity configuration is Debian's: /etc/modsecurity/
modsecurity.conf-recommended is read at start and written into the instance
directory with only these changes: SecRuleEngine On (blocking) or
DetectionOnly, the audit log, SecTmpDir and SecDataDir moved into the
instance directory, and the unicode map given by its absolute path. So the
body limits (SecRequestBodyLimit 13107200, SecRequestBodyNoFilesLimit 131072,
...), the PCRE limits and Debian's rules 200000-200005 (XML and JSON body
processors for those content types, deny 400 on a body parse error or a
multipart strict-validation error, ...) are all in force. Then, as
/usr/share/modsecurity-crs/owasp-crs.load does: crs-setup.conf, the optional
REQUEST-900 exclusions, rules/*.conf, the optional RESPONSE-999 exclusions.
The paranoia level is set by the SecAction crs-setup.conf documents as rule
900000 (commented out there), placed right after crs-setup.conf; thresholds
are CRS's defaults (inbound 5, outbound 4).

Where the verdict comes from: ModSecurity's debug log at level 4
----------------------------------------------------------------
* The audit log (Serial, JSON format: Debian's build has yajl) lists, in
  part H, only the messages of rules with the `log` action. The error log is
  the same set. Every `nolog` match is missing there: the 901xxx
  initialisation rules, the 9xx011-9xx018 paranoia-level skips, 949060-949063
  (score sums), 912100/912110, 200001 (JSON body processor), 920xxx helper
  rules... A sluice engine that runs the same rule files has to reproduce
  those too, so they are part of the oracle.
* Debug log level 4 writes, for every rule invoked, a "Recipe: Invoking rule"
  line and "Rule returned N."; and for every rule or whole chain that
  matched, the alert line ModSecurity builds (`Warning. <action message>
  [file] [line] [id] [msg] ...`, or `Access denied with code ...` for an
  executed disruptive action) - at level 4 for nolog rules, at level 2/1 for
  logged ones. A chain's alert carries the chain starter's id and is only
  written when every link matched. A rule that matches several targets
  writes one alert per matched target (and its setvars run once per target,
  which is why CRS scores add up per target): the list keeps those repeats.
  Level 9 adds every transformation and target value: far larger, and
  nothing this needs (level 4 is already ~0.5 MB per request with CRS).
  So `matched` is the ordered list of ids of those alert lines, minus
  unconditional SecActions ("Unconditional match in SecAction", reported
  separately as `secactions`), for the request phases (1 and 2).
* The debug log carries no request id on its lines except "Initialising
  transaction (txid <UNIQUE_ID>)". Requests are sent one at a time to a
  single-process Apache with KeepAlive Off, and Apache runs the logging
  phase before it closes the connection, so everything the log gained
  between sending a request and reading the server's EOF belongs to that
  request: the log is read incrementally from the last offset (and truncated
  when it grows past 32 MiB; ModSecurity opens it O_APPEND). The txid is
  checked against the `X-Oracle-Txid` response header (mod_unique_id's
  UNIQUE_ID, added by mod_headers).
* The anomaly score: CRS keeps tx.anomaly_score_pl1..pl4 (inbound only) and
  949060-949063 sum those up to the paranoia level into tx.anomaly_score,
  which 949110 compares with the threshold. tx.anomaly_score itself is later
  raised by RESPONSE-959 with outbound scores, so the oracle appends one
  nolog SecAction of its own (id 9999901, phase 5, after everything else) whose
  message carries the four per-level scores, the paranoia level and the
  threshold; `score` is the sum of the per-level scores up to the paranoia
  level: exactly the value 949110 tested. That SecAction's alert is also the
  "request complete" marker.

The verdict
-----------
`verdict(raw)` sends RAW (bytes, or str sent as UTF-8) as is after a TCP connect (the write
side is then shut down, so a short body fails fast instead of waiting for
Apache's Timeout) and returns a dict:
  status       the HTTP status Apache answered (None if none)
  seen         ModSecurity created a transaction for the request
  txid         its UNIQUE_ID
  phases       ModSecurity phases that ran, e.g. [1, 2, 3, 4, 5]; Apache
               answers some requests after phase 1 and before phase 2 (a
               path climbing above the root: 400; an encoded NUL in the
               path: 404; a bad chunked body: 400; a body over the limit:
               413; an XML body that does not parse: 500; TRACE: answered
               by Apache's core) and some before ModSecurity sees them at
               all (a malformed request line or header, an empty Host, bad
               framing headers: 400, seen False). Without phase 2 there is
               no CRS verdict (949110 is a phase-2 rule).
  blocked      ModSecurity executed a disruptive action ("Access denied")
  disruptive   the id of that rule (949110 in anomaly mode; 2000xx for
               Debian's body rules), or None
  would_block  949110 matched (True in detection-only mode too)
  score        inbound anomaly score as 949110 saw it; pl_scores [pl1..pl4]
  threshold    tx.inbound_anomaly_score_threshold
  matched      every rule id (or chain starter) that matched in phases 1-2,
               in order, unconditional SecActions excluded
  rules        the subset of `matched` with the `log` action: what the audit
               log's part H lists for the request phases (attack rules,
               949110, Debian's 2000xx denies)
  logged       all logged alerts, all phases (== the audit log's messages)
  secactions   unconditional SecAction ids of phases 1-2
  late         ids matched in phases 3-5 (response rules, 980xxx correlation)
`verdicts(raws)` does the same for a list over one instance.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import harness as H

APACHE2 = "/usr/sbin/apache2"
APACHE_MODULES = "/usr/lib/apache2/modules"
MODSEC_SO = os.path.join(APACHE_MODULES, "mod_security2.so")
RECOMMENDED = "/etc/modsecurity/modsecurity.conf-recommended"
UNICODE_MAP = "/etc/modsecurity/unicode.mapping"
CRS_SETUP = "/etc/modsecurity/crs/crs-setup.conf"
CRS_BEFORE = "/etc/modsecurity/crs/REQUEST-900-EXCLUSION-RULES-BEFORE-CRS.conf"
CRS_AFTER = "/etc/modsecurity/crs/RESPONSE-999-EXCLUSION-RULES-AFTER-CRS.conf"
CRS_RULES = "/usr/share/modsecurity-crs/rules"
PACKAGES = ("apache2", "libapache2-mod-security2", "modsecurity-crs")

ORACLE_ID = 9999901          # the oracle's own phase-5 SecAction
PHASES = {"REQUEST_HEADERS": 1, "REQUEST_BODY": 2, "RESPONSE_HEADERS": 3,
          "RESPONSE_BODY": 4, "LOGGING": 5}
DEBUG_LOG_MAX = 32 << 20


def flow_control(rule_id):
    """True for CRS rules that only steer evaluation and match (or not)
    from the configuration alone: the 901xxx initialisation, the
    paranoia-level gates 9xx011-9xx018, the application-exclusion gates
    (9001000-9006999), the score sums 949060-949063 / 959060-959063. The
    stored corpus verdicts leave them out of `matched` to stay small."""
    if 901000 <= rule_id <= 901999 or 9000000 <= rule_id <= 9009999:
        return True
    if rule_id < 1000000 and 910000 <= rule_id <= 999999 and 11 <= rule_id % 1000 <= 18:
        return True
    return rule_id in (949060, 949061, 949062, 949063, 959060, 959061, 959062, 959063)


def missing():
    """Why the oracle cannot run here (a skip message), or None."""
    for p, pkg in ((APACHE2, "apache2"), (MODSEC_SO, "libapache2-mod-security2"),
                   (RECOMMENDED, "libapache2-mod-security2"), (CRS_SETUP, "modsecurity-crs"),
                   (os.path.join(CRS_RULES, "REQUEST-949-BLOCKING-EVALUATION.conf"),
                    "modsecurity-crs")):
        if not os.path.exists(p):
            return "%s missing (apt-get install %s)" % (p, pkg)
    return None


def ensure_installed():
    """Install Debian's apache2, libapache2-mod-security2 and modsecurity-crs
    with apt-get if anything is missing (the packages' service start is left
    to policy-rc.d; nothing here uses it). Returns missing() afterwards."""
    if missing() is None:
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return missing()
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends"] + list(PACKAGES),
                       env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0 and missing() is not None:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends"] + list(PACKAGES),
                       env=env, capture_output=True, text=True, timeout=900)
    return missing()


def package_versions():
    """{package: version} from dpkg for the three packages."""
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + list(PACKAGES),
                       capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(" ")
        out[k] = v
    return out


def _recommended_conf(engine, tmpdir, datadir, audit_log):
    """Debian's modsecurity.conf-recommended, with the engine mode set and
    its file paths moved into this instance."""
    out = ["# generated from %s by tests/e2e/modsec.py" % RECOMMENDED]
    with open(RECOMMENDED) as f:
        for line in f:
            s = line.strip()
            if s.startswith("SecRuleEngine "):
                line = "SecRuleEngine %s\n" % engine
            elif s.startswith("SecTmpDir "):
                line = "SecTmpDir %s/\n" % tmpdir
            elif s.startswith("SecDataDir "):
                line = "SecDataDir %s/\n" % datadir
            elif s.startswith("SecAuditLog "):
                line = "SecAuditLog %s\n" % audit_log
            elif s.startswith("SecUnicodeMapFile "):
                line = "SecUnicodeMapFile %s %s\n" % (UNICODE_MAP, s.split()[2])
            out.append(line.rstrip("\n"))
    return "\n".join(out) + "\n"


# alert lines: `[time] [host/sid#..][rid#..][uri][level] message [file ".."] [line ".."] [id ".."] ...`
_LINE = re.compile(r"\]\[rid#[0-9a-f]+\]\[.*?\]\[(\d)\] (.*)$")
_ALERT_ID = re.compile(r'\[file "[^"]*"\] \[line "\d+"\] \[id "(\d+)"\]')
_ORACLE_MSG = re.compile(r'\[msg "oracle pl=(\d*) s1=(\d*) s2=(\d*) s3=(\d*) s4=(\d*) threshold=(\d*)"\]')


def parse_debug_segment(text, paranoia=None):
    """The verdict fields (see the module docstring) from the debug-log
    lines of one request. Also returns 'complete': the oracle's phase-5
    marker was seen."""
    v = dict(seen=False, txid=None, phases=[], blocked=False, disruptive=None,
             would_block=False, score=0, pl_scores=[0, 0, 0, 0], threshold=None,
             paranoia=paranoia, matched=[], rules=[], logged=[], secactions=[], late=[],
             complete=False)
    phase = 1
    for line in text.splitlines():
        m = _LINE.search(line)
        if not m:
            continue
        level, msg = int(m.group(1)), m.group(2)
        if msg.startswith("Initialising transaction (txid "):
            v["seen"] = True
            v["txid"] = msg[len("Initialising transaction (txid "):].rstrip(").")
            continue
        if msg.startswith("Starting phase "):
            name = msg[len("Starting phase "):].split()[0].rstrip(".")
            phase = PHASES.get(name, phase)
            v["phases"].append(phase)
            continue
        if msg.startswith("Recipe: ") or msg.startswith("Rule "):
            continue
        a = _ALERT_ID.search(msg)
        if not a:
            continue
        rid = int(a.group(1))
        if rid == ORACLE_ID:
            o = _ORACLE_MSG.search(msg)
            if o:
                nums = [int(x) if x else 0 for x in o.groups()]
                v["paranoia"] = nums[0]
                v["pl_scores"] = nums[1:5]
                v["threshold"] = nums[5]
            v["complete"] = True
            continue
        logged = level <= 3
        if logged:
            v["logged"].append(rid)
        if msg.startswith("Access denied") or msg.startswith("Access to ") \
                or msg.startswith("Access allowed") or msg.startswith("Redirect"):
            v["blocked"] = msg.startswith("Access denied") or msg.startswith("Access to ")
            v["disruptive"] = rid
        if rid == 949110:
            v["would_block"] = True
        if phase >= 3:
            v["late"].append(rid)
        elif "Unconditional match in SecAction" in msg:
            v["secactions"].append(rid)
        else:
            v["matched"].append(rid)
            if logged:
                v["rules"].append(rid)
    pl = v["paranoia"] or 1
    v["score"] = sum(v["pl_scores"][:pl])
    return v


def read_status(data):
    """The status code of the first response in DATA, or None."""
    m = re.match(rb"HTTP/\d\.\d (\d{3})", data)
    return int(m.group(1)) if m else None


def _response_header(data, name):
    head = data.split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\r\n")[1:]:
        k, _, val = line.partition(b":")
        if k.strip().lower() == name.lower():
            return val.strip().decode("latin-1")
    return None


class ModSecurity:
    """One Apache + ModSecurity + CRS instance (see the module docstring).

    WORKDIR keeps the config and logs (for diagnostics); the DocumentRoot
    and ModSecurity's tmp/data directories live in a 0755 directory under
    /tmp, because Apache drops to www-data and pytest's tmp_path is 0700.
    PARANOIA 1..4; BLOCKING False runs SecRuleEngine DetectionOnly."""

    def __init__(self, workdir, name="modsec", paranoia=1, blocking=True, debug_level=4):
        if paranoia not in (1, 2, 3, 4):
            raise ValueError("paranoia level must be 1..4")
        self.dir = os.path.abspath(str(workdir))
        self.name = name
        self.paranoia = paranoia
        self.blocking = blocking
        self.debug_level = debug_level
        self.port = H.free_port()
        self.proc = None
        self.pub = None
        base = os.path.join(self.dir, name)
        self.conf_path = base + "-httpd.conf"
        self.modsec_conf_path = base + "-modsecurity.conf"
        self.out_path = base + ".out"
        self.error_log = base + "-error.log"
        self.debug_log = base + "-debug.log"
        self.audit_log = base + "-audit.log"
        self._dbg_off = 0
        self._audit_off = 0
        self.requests = 0

    # -- lifecycle ---------------------------------------------------------

    def _write_config(self):
        self.pub = tempfile.mkdtemp(prefix="sluice-modsec-", dir="/tmp")
        os.chmod(self.pub, 0o755)
        htdocs = os.path.join(self.pub, "htdocs")
        tmpdir = os.path.join(self.pub, "tmp")
        datadir = os.path.join(self.pub, "data")
        for d in (htdocs, tmpdir, datadir):
            os.mkdir(d)
        with open(os.path.join(htdocs, "index.html"), "w") as f:
            f.write("<html><body>oracle ok</body></html>\n")
        user = ""
        if os.geteuid() == 0:
            import pwd
            try:
                pw = pwd.getpwnam("www-data")
            except KeyError:
                pw = pwd.getpwnam("nobody")
            for d in (tmpdir, datadir):
                os.chown(d, pw.pw_uid, pw.pw_gid)
            user = "User %s\nGroup #%d\n" % (pw.pw_name, pw.pw_gid)
        engine = "On" if self.blocking else "DetectionOnly"
        with open(self.modsec_conf_path, "w") as f:
            f.write(_recommended_conf(engine, tmpdir, datadir, self.audit_log))
            f.write("SecAuditLogFormat JSON\n")
            f.write("SecDebugLog %s\nSecDebugLogLevel %d\n" % (self.debug_log, self.debug_level))
        mods = ["mpm_prefork", "authz_core", "dir", "mime", "headers", "unique_id", "security2"]
        load = "".join("LoadModule %s_module %s/mod_%s.so\n" % (m, APACHE_MODULES, m) for m in mods)
        crs = ["Include %s" % CRS_SETUP,
               # crs-setup.conf's rule 900000, uncommented with our level
               'SecAction "id:900000,phase:1,nolog,pass,t:none,setvar:tx.paranoia_level=%d"'
               % self.paranoia]
        if os.path.exists(CRS_BEFORE):
            crs.append("Include %s" % CRS_BEFORE)
        crs.append("Include %s/*.conf" % CRS_RULES)
        if os.path.exists(CRS_AFTER):
            crs.append("Include %s" % CRS_AFTER)
        conf = """# sluice oracle: Apache + ModSecurity + CRS, generated by tests/e2e/modsec.py
ServerRoot %(dir)s
PidFile %(dir)s/%(name)s.pid
Listen 127.0.0.1:%(port)d
ServerName localhost
%(load)s%(user)sErrorLog %(error_log)s
LogLevel info security2:crit
# one request per connection: a request's debug-log lines end before the close
KeepAlive Off
Timeout 10
# let %%2F in paths reach ModSecurity's phase 2 (Apache's default answers 404 first)
AllowEncodedSlashes NoDecode
DocumentRoot %(htdocs)s
TypesConfig /etc/mime.types
<Directory %(htdocs)s>
    Require all granted
    # every path and method gets index.html (200) unless ModSecurity blocks
    FallbackResource /index.html
</Directory>
Header always set X-Oracle-Txid "%%{UNIQUE_ID}e"
<IfModule security2_module>
    # /etc/apache2/mods-available/security2.conf sets SecDataDir /var/cache/modsecurity
    # and includes /etc/modsecurity/*.conf (modsecurity.conf, from -recommended)
    Include %(modsec_conf)s
    %(crs)s
    # the oracle's marker and score report (phase 5, after everything else)
    SecAction "id:%(oracle)d,phase:5,pass,nolog,noauditlog,msg:'oracle pl=%%{tx.paranoia_level} s1=%%{tx.anomaly_score_pl1} s2=%%{tx.anomaly_score_pl2} s3=%%{tx.anomaly_score_pl3} s4=%%{tx.anomaly_score_pl4} threshold=%%{tx.inbound_anomaly_score_threshold}'"
</IfModule>
""" % dict(dir=self.dir, name=self.name, port=self.port, load=load, user=user,
           error_log=self.error_log, htdocs=htdocs, modsec_conf=self.modsec_conf_path,
           crs="\n    ".join(crs), oracle=ORACLE_ID)
        with open(self.conf_path, "w") as f:
            f.write(conf)

    def _env(self):
        # apache2 itself needs none of apache2ctl's envvars except a lock dir
        env = dict(os.environ)
        env.update(APACHE_RUN_DIR=self.pub, APACHE_LOCK_DIR=self.pub, APACHE_LOG_DIR=self.dir,
                   APACHE_PID_FILE=os.path.join(self.dir, self.name + ".pid"), LANG="C")
        return env

    def check(self):
        """`apache2 -t` on the written config; raises with its output."""
        r = subprocess.run([APACHE2, "-t", "-f", self.conf_path], capture_output=True, text=True,
                           env=self._env(), timeout=60)
        if r.returncode != 0:
            raise RuntimeError("apache2 -t rejects %s:\n%s%s" % (self.conf_path, r.stdout, r.stderr))

    def start(self, timeout=30.0):
        self._write_config()
        self.check()
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen([APACHE2, "-X", "-f", self.conf_path], stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                                         env=self._env(), start_new_session=True)
        finally:
            out.close()
        try:
            H.wait_port(self.port, timeout, proc=self.proc)
        except Exception as e:
            self.stop()
            raise RuntimeError("%s did not start: %s\n%s\n%s" % (
                self.name, e, H.read_text(self.out_path)[-3000:], H.read_text(self.error_log)[-3000:]))
        # a first request proves the config took (some errors only show after
        # the port is bound); its log lines are skipped
        resp = b""
        try:
            resp = self.exchange(request("GET", "/", [("User-Agent", "oracle-ready")]), timeout)
        except OSError:
            pass
        if read_status(resp) is None:
            self.stop()
            raise RuntimeError("%s does not answer:\n%s" % (self.name, self.diagnostics()))
        self._dbg_off = self._size(self.debug_log)
        self._audit_off = self._size(self.audit_log)
        return self

    def stop(self):
        if self.proc is not None:
            H.kill_popen(self.proc, grace=5.0)
            self.proc = None
        if self.pub:
            shutil.rmtree(self.pub, ignore_errors=True)
            self.pub = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @staticmethod
    def _size(path):
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    def diagnostics(self):
        return "---- %s out ----\n%s\n---- error log ----\n%s" % (
            self.name, H.read_text(self.out_path)[-2000:], H.read_text(self.error_log)[-4000:])

    # -- requests ----------------------------------------------------------

    def exchange(self, raw, timeout=20.0):
        """Send RAW on a new connection, shut the write side, read until
        EOF. Returns the response bytes."""
        if isinstance(raw, str):
            raw = raw.encode("utf-8")
        s = socket.create_connection((H.HOST, self.port), timeout=timeout)
        chunks = []
        try:
            try:
                s.sendall(raw)
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass        # Apache may answer and close before reading it all
            while True:
                try:
                    d = s.recv(65536)
                except ConnectionResetError:
                    break
                if not d:
                    break
                chunks.append(d)
        finally:
            s.close()
        return b"".join(chunks)

    def _read_debug(self):
        with open(self.debug_log, "rb") as f:
            f.seek(self._dbg_off)
            data = f.read()
        self._dbg_off += len(data)
        return data.decode("latin-1")

    def verdict(self, raw, timeout=20.0):
        """What ModSecurity decided for the raw request RAW (see the module
        docstring for the fields). Also: 'response' (the bytes Apache sent)."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("%s is not running\n%s" % (self.name, self.diagnostics()))
        resp = self.exchange(raw, timeout)
        self.requests += 1
        text = self._read_debug()
        v = parse_debug_segment(text, self.paranoia)
        if v["seen"] and not v["complete"]:
            # not expected (logging precedes the close), but do not race it
            deadline = time.monotonic() + 5.0
            while not v["complete"] and time.monotonic() < deadline:
                time.sleep(0.01)
                text += self._read_debug()
                v = parse_debug_segment(text, self.paranoia)
            if not v["complete"]:
                raise RuntimeError("%s: request %d has no phase-5 marker in the debug log"
                                   % (self.name, self.requests))
        if text.count("Initialising transaction (txid ") > 1:
            raise RuntimeError("%s: two transactions in one request's debug-log segment"
                               % self.name)
        v["status"] = read_status(resp)
        hdr_txid = _response_header(resp, b"X-Oracle-Txid")
        if v["seen"] and hdr_txid not in (None, "(null)") and hdr_txid != v["txid"]:
            raise RuntimeError("%s: txid mismatch: log %s, response %s"
                               % (self.name, v["txid"], hdr_txid))
        v["response"] = resp
        del v["complete"]
        if self._dbg_off > DEBUG_LOG_MAX:
            os.truncate(self.debug_log, 0)      # O_APPEND: ModSecurity writes at the new end
            self._dbg_off = 0
        return v

    def verdicts(self, raws, progress=None):
        """verdict() for each of RAWS in order, over this one instance."""
        out = []
        for i, raw in enumerate(raws):
            out.append(self.verdict(raw))
            if progress and (i + 1) % progress == 0:
                print("%s: %d/%d" % (self.name, i + 1, len(raws)), flush=True)
        return out

    def audit_entries(self):
        """New entries of the JSON audit log (RelevantOnly, as Debian's
        recommended config: transactions with a logged warning or a 4xx/5xx
        other than 404) since the last call: a list of dicts with txid and
        ids (the rule ids of the part-H messages, in order)."""
        with open(self.audit_log, "rb") as f:
            f.seek(self._audit_off)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._audit_off += end
        out = []
        for line in data[:end].decode("utf-8", "replace").splitlines():
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            msgs = j.get("audit_data", {}).get("messages", [])
            ids = [int(m.group(1)) for m in (_ALERT_ID.search(s) for s in msgs) if m]
            out.append(dict(txid=j["transaction"]["transaction_id"], ids=ids, entry=j))
        return out


def request(method="GET", target="/", headers=None, body=None, host="www.example.com",
            version="HTTP/1.1"):
    """A raw request (bytes): request line, Host, HEADERS [(name, value)],
    Content-Length when BODY is given."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    lines = ["%s %s %s" % (method, target, version)]
    if host is not None:
        lines.append("Host: %s" % host)
    for k, v in headers or []:
        lines.append("%s: %s" % (k, v))
    if body is not None:
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + (body or b"")


BROWSER_HEADERS = [
    ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:115.0) Gecko/20100101 Firefox/115.0"),
    ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"),
    ("Accept-Language", "en-US,en;q=0.5"),
    ("Accept-Encoding", "gzip, deflate, br"),
    ("Connection", "keep-alive"),
    ("Upgrade-Insecure-Requests", "1"),
]


@pytest.fixture
def modsec(tmp_path):
    """Factory: modsec(paranoia=1, blocking=True) -> started ModSecurity;
    installs the packages if needed, skips only if that fails."""
    why = ensure_installed()
    if why:
        pytest.skip(why)
    instances = []

    def make(name=None, **kw):
        m = ModSecurity(tmp_path, name or "modsec%d" % len(instances), **kw)
        instances.append(m)
        return m.start()
    yield make
    for m in instances:
        m.stop()
