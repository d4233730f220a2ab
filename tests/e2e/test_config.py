"""`sluice -t -c FILE`: valid configs pass; bad ones exit 1 with
`FILE:LINE:COL: KEY: message` naming the offending line and key."""

import os
import re
import subprocess

import pytest

import harness as H

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def base_lines():
    return [
        "workers: 1",
        "error_log: stderr",
        'access_log: "off"',
        "timeouts:",
        "  client_header: 10s",
        "  client_keepalive: 60s",
        "  client_body: 30s",
        "  drain: 10s",
        "limits:",
        "  max_request_line: 8k",
        "  max_header_size: 32k",
        "  max_headers: 100",
        "  max_body_size: 0",
        "listeners:",
        "  - name: http",
        '    address: "127.0.0.1:%d"' % H.free_port(),
        "    backend: app",
        "backends:",
        "  - name: app",
        "    balance: roundrobin",
        "    queue_timeout: 5s",
        "    queue_max: 100",
        "    idle_max: 8",
        "    idle_timeout: 30s",
        "    connect_timeout: 3s",
        "    response_timeout: 30s",
        "    health_check:",
        "      path: /health",
        "      interval: 2s",
        "      timeout: 1s",
        "      expect_status: 200",
        "      rise: 2",
        "      fall: 3",
        "    servers:",
        "      - name: s1",
        '        address: "127.0.0.1:%d"' % H.free_port(),
        "        max_connections: 16",
    ]


def mutate(lines, find, replace=None, insert_after=None):
    """Replace the line starting with FIND (or insert INSERT_AFTER after it).
    Returns (lines, 1-based line number of the changed line)."""
    idx = next(i for i, l in enumerate(lines) if l.startswith(find))
    lines = list(lines)
    if insert_after is not None:
        lines.insert(idx + 1, insert_after)
        return lines, idx + 2
    lines[idx] = replace
    return lines, idx + 1


# (id, find, replacement or None, inserted line or None, expected key path)
BAD = [
    ("workers_not_int", "workers:", "workers: many", None, "workers"),
    ("unknown_top_key", "workers:", None, "wrokers: 2", "wrokers"),
    ("bad_duration", "  client_header:", "  client_header: 10x", None, "timeouts.client_header"),
    ("bad_size", "  max_header_size:", "  max_header_size: 12q", None, "limits.max_header_size"),
    ("negative_max_connections", "        max_connections:", "        max_connections: -1", None,
     "backends[0].servers[0].max_connections"),
    ("non_numeric_max_connections", "        max_connections:", "        max_connections: abc", None,
     "backends[0].servers[0].max_connections"),
    ("listener_port_out_of_range", "    address:", '    address: "127.0.0.1:99999"', None,
     "listeners[0].address"),
    ("unknown_backend_reference", "    backend: app", "    backend: nope", None, "listeners[0].backend"),
    ("bad_balance", "    balance:", "    balance: random", None, "backends[0].balance"),
    ("bad_queue_timeout", "    queue_timeout:", "    queue_timeout: soon", None,
     "backends[0].queue_timeout"),
    ("bad_health_interval", "      interval:", "      interval: fast", None,
     "backends[0].health_check.interval"),
    ("unknown_server_key", "        max_connections:", None, "        weigth: 3",
     "backends[0].servers[0].weigth"),
    ("bad_server_address", "        address:", '        address: "not an address"', None,
     "backends[0].servers[0].address"),
    ("unknown_timeout_key", "  drain:", None, "  client_hedaer: 5s", "timeouts.client_hedaer"),
    ("max_headers_not_int", "  max_headers:", "  max_headers: [1, 2]", None, "limits.max_headers"),
    ("weight_above_256", "        max_connections:", None, "        weight: 257",
     "backends[0].servers[0].weight"),
    ("weight_negative", "        max_connections:", None, "        weight: -1",
     "backends[0].servers[0].weight"),
    ("backup_not_bool", "        max_connections:", None, "        backup: maybe",
     "backends[0].servers[0].backup"),
    ("all_backups_not_bool", "    idle_max:", None, "    all_backups: 2", "backends[0].all_backups"),
    ("bad_slow_start", "    idle_max:", None, "    slow_start: slowly", "backends[0].slow_start"),
]


def run_check(sluice_bin, path):
    return subprocess.run([sluice_bin, "-t", "-c", path], capture_output=True, text=True, timeout=10)


def error_lines(stderr, path):
    rx = re.compile(r"^%s:(\d+):(\d+): (\S+): (.+)$" % re.escape(path))
    out = []
    for l in stderr.splitlines():
        m = rx.match(l.strip())
        if m:
            out.append((int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)))
    return out


def key_matches(got, expected):
    """KEY is the full dotted path, or (spec allows) the bare key name."""
    leaf = re.sub(r"\[\d+\]$", "", expected.rsplit(".", 1)[-1])
    return got == expected or got == leaf


def test_valid_config_passes(sluice_bin, tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text("\n".join(base_lines()) + "\n")
    r = run_check(sluice_bin, str(p))
    assert r.returncode == 0, r.stderr
    assert error_lines(r.stderr, str(p)) == []


def test_harness_generated_config_passes(sluice_bin, tmp_path):
    s = H.Sluice(sluice_bin, tmp_path, H.make_config(
        H.free_port(), [H.server(H.free_port()), H.server(H.free_port(), "s2")], workers=2,
        health={"path": "/health", "interval": "200ms", "timeout": "150ms", "expect_status": 200,
                "rise": 2, "fall": 2}))
    r = s.check()
    assert r.returncode == 0, r.stderr


def test_shipped_default_config_passes(sluice_bin, tmp_path):
    """conf/sluice.yaml checks out once `make run`'s certificates exist
    (made here in a scratch directory: its paths are relative)."""
    import subprocess
    subprocess.run(["sh", os.path.join(REPO, "conf", "make-demo-certs.sh"), str(tmp_path / "conf" / "tls")],
                   check=True, capture_output=True, timeout=60)
    os.symlink(os.path.join(REPO, "lua"), str(tmp_path / "lua"))  # the inspect scripts
    path = os.path.join(REPO, "conf", "sluice.yaml")
    r = subprocess.run([sluice_bin, "-t", "-c", path], cwd=str(tmp_path), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name,find,repl,ins,key", BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_line_and_key(sluice_bin, tmp_path, name, find, repl, ins, key):
    lines, lineno = mutate(base_lines(), find, repl, ins)
    p = tmp_path / ("%s.yaml" % name)
    p.write_text("\n".join(lines) + "\n")
    r = run_check(sluice_bin, str(p))
    assert r.returncode == 1, (r.returncode, r.stderr)
    errs = error_lines(r.stderr, str(p))
    assert errs, "no FILE:LINE:COL: KEY: message line in stderr:\n" + r.stderr
    hits = [e for e in errs if e[0] == lineno and key_matches(e[2], key)]
    assert hits, "expected line %d key %s, got %r" % (lineno, key, errs)
    assert all(e[1] >= 1 for e in hits)
    assert all(e[3].strip() for e in hits)


def test_yaml_syntax_error_names_line(sluice_bin, tmp_path):
    lines, lineno = mutate(base_lines(), "  client_keepalive:", "   client_keepalive: 60s")
    p = tmp_path / "syntax.yaml"
    p.write_text("\n".join(lines) + "\n")
    r = run_check(sluice_bin, str(p))
    assert r.returncode == 1
    m = re.search(r"%s:(\d+):(\d+): " % re.escape(str(p)), r.stderr)
    assert m, r.stderr
    assert abs(int(m.group(1)) - lineno) <= 1, (lineno, r.stderr)


def test_missing_file(sluice_bin, tmp_path):
    r = run_check(sluice_bin, str(tmp_path / "nope.yaml"))
    assert r.returncode == 1
    assert "nope.yaml" in r.stderr


def test_start_with_invalid_config_fails(sluice_bin, tmp_path):
    lines, _ = mutate(base_lines(), "    balance:", "    balance: random")
    p = tmp_path / "bad.yaml"
    p.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([sluice_bin, "-c", str(p)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=10)
    finally:
        H.kill_popen(proc, grace=1)
    assert proc.returncode != 0
    assert "balance" in err.decode()
