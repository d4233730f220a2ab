"""Every sluice configuration shown in the documentation passes `sluice -t`.

Checked: each ```yaml block of docs/*.md that is a complete configuration,
i.e. has both a top-level `listeners:` and a top-level `backends:` key (the
two a configuration cannot do without), and every conf/*.yaml file. Blocks
with neither are not configurations. Blocks with just one are fragments
(docs/config.md shows single sections that way) and are skipped, except in
the pages listed in COMPLETE_ONLY, where every yaml block must be complete.

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
            "          key: /etc/sluice/tls/rsa.key\n"
            "      client_ca: \"/etc/ca.pem\"\n"
            "      ticket_keys: /etc/t.keys\n"
            "      tls: {ca: /etc/backend-ca.pem, sni: app.internal}\n"
            "    name: key-server\n")
    out = rewrite_paths(text, str(tmp_path), files)
    assert out == ("        - cert: conf/here.pem\n"
                   "          key: /R.key\n"
                   "      client_ca: \"/CA.pem\"\n"
                   "      ticket_keys: /T.keys\n"
                   "      tls: {ca: /CA.pem, sni: app.internal}\n"
                   "    name: key-server\n")
