"""Regressions for bugs the libFuzzer targets found (tests/fuzz/README.md),
end to end. Each test is named after what broke; its fuzz reproducer is in
tests/fuzz/regressions/<target>/."""
import signal
import subprocess

import harness as H


def config_with_bad_backend(port, backend_port, bad_backend):
    """A config whose listener names BAD_BACKEND (a YAML double-quoted
    string, escapes allowed), which does not exist."""
    return ("workers: 1\n"
            "backends:\n"
            "  - name: app\n"
            "    servers:\n"
            "      - address: 127.0.0.1:%d\n"
            "listeners:\n"
            "  - address: 127.0.0.1:%d\n"
            "    backend: \"%s\"\n" % (backend_port, port, bad_backend))


FORGED = "app\\nFAKE.yaml:1:1: forged: line\\rwith a CR"


# fuzz_cfg: tests/fuzz/regressions/fuzz_cfg/error-value-with-newline
def test_config_error_quoting_a_newline_stays_one_line(sluice_bin, tmp_path):
    path = str(tmp_path / "nl.yaml")
    with open(path, "w") as f:
        f.write(config_with_bad_backend(H.free_port(), H.free_port(), FORGED))
    r = subprocess.run([sluice_bin, "-t", "-c", path], capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    errs = [l for l in lines if l.startswith(path + ":")]
    assert len(errs) == 1, r.stderr
    assert "unknown backend \"app\\nFAKE.yaml:1:1: forged: line\\rwith a CR\"" in errs[0], r.stderr
    assert not any(l.startswith("FAKE.yaml") for l in lines), r.stderr
    assert "\r" not in r.stderr


# The same through a reload: the master logs the report line by line, so an
# unescaped newline would have forged a "reload rejected:" line of its own.
def test_reload_rejection_quoting_a_newline_stays_one_line(sluice, recorder):
    be = recorder()
    port = H.free_port()
    s = sluice(H.make_config(port, [H.server(be.port)]))
    assert H.http_request(s.port, "GET", "/").status == 200
    off = len(H.read_text(s.error_log))
    pids = s.worker_pids()
    with open(s.config_path, "w") as f:
        f.write(config_with_bad_backend(port, be.port, FORGED).replace(
            "workers: 1\n", "workers: 1\nerror_log: %s\naccess_log: %s\n" % (s.error_log, s.access_log)))
    s.signal(signal.SIGHUP)
    s.wait_error_log(r"reload rejected: keeping the running configuration", start=off)
    log = H.read_text(s.error_log)[off:]
    rejected = [l for l in log.splitlines() if "reload rejected:" in l]
    assert any("unknown backend \"app\\nFAKE.yaml:1:1: forged: line\\rwith a CR\"" in l for l in rejected), log
    assert not any(l.split("reload rejected: ", 1)[-1].startswith("FAKE.yaml") for l in rejected), log
    assert not any(l.startswith("FAKE.yaml") for l in log.splitlines()), log
    assert s.worker_pids() == pids
    assert H.http_request(s.port, "GET", "/").status == 200
