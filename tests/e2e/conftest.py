"""pytest fixtures for the sluice end-to-end suite.

Binaries come from the environment: SLUICE_BIN (build/sluice) and
DEMO_BACKEND (build/demo_backend); defaults are the repo's build/ paths.
Tests needing a missing binary are skipped, so the harness self-tests run
anywhere.
"""

import os
import shutil
import signal
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PER_TEST_LIMIT = int(os.environ.get("SLUICE_E2E_TEST_LIMIT", "90"))


def _bin(env, default):
    p = os.environ.get(env) or os.path.join(REPO, "build", default)
    return os.path.abspath(p)


@pytest.fixture(scope="session")
def sluice_bin():
    p = _bin("SLUICE_BIN", "sluice")
    if not os.access(p, os.X_OK):
        pytest.skip("sluice binary not found at %s (set SLUICE_BIN)" % p)
    return p


@pytest.fixture(scope="session")
def demo_bin():
    p = _bin("DEMO_BACKEND", "demo_backend")
    if not os.access(p, os.X_OK):
        pytest.skip("demo backend not found at %s (set DEMO_BACKEND)" % p)
    return p


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _failed(request):
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


class _Deadline(Exception):
    pass


@pytest.fixture(autouse=True)
def _per_test_deadline():
    """Hard bound per test (no pytest-timeout plugin needed): SIGALRM
    raises in the main thread."""
    def on_alarm(signum, frame):
        raise _Deadline("test exceeded %ds" % PER_TEST_LIMIT)
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(PER_TEST_LIMIT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _sluice_factory(request, sluice_bin, workdir, instances):
    def make(config, start=True, name=None):
        name = name or "sluice%d" % len(instances)
        s = harness.Sluice(sluice_bin, workdir, config, name=name)
        instances.append(s)
        if start:
            s.start()
        return s
    return make


SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def _teardown_sluices(request, instances):
    reports = []
    for s in instances:
        if _failed(request) and s.proc is not None:
            print("\n==== diagnostics for %s (pid %s) ====" % (s.name, s.proc.pid))
            print(s.diagnostics())
        s.kill()
        # Under `make test-asan` a sanitizer report in any sluice process
        # (a worker the master quietly replaced included) fails the test.
        text = harness.read_text(s.stderr_path)
        if any(m in text for m in SANITIZER_MARKS):
            reports.append("%s:\n%s" % (s.name, text[-4000:]))
        # Under `make valgrind` every process logs memcheck errors and
        # definite/indirect leaks to its own file; any content fails.
        reports.extend(s.valgrind_reports())
    if reports:
        pytest.fail("sanitizer report from sluice:\n" + "\n".join(reports), pytrace=False)


@pytest.fixture
def sluice(request, sluice_bin, tmp_path):
    """Factory: sluice(config_dict_or_text, start=True) -> harness.Sluice."""
    instances = []
    yield _sluice_factory(request, sluice_bin, tmp_path, instances)
    _teardown_sluices(request, instances)


@pytest.fixture
def public_dir():
    """A scratch directory every user may enter (pytest's tmp_path is under
    a root-only 0700 directory): for a sluice started as another user."""
    d = tempfile.mkdtemp(prefix="sluice-e2e-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def demo(demo_bin, tmp_path):
    """Factory: demo(**DemoBackend kwargs) -> started harness.DemoBackend."""
    instances = []

    def make(**kw):
        d = harness.DemoBackend(demo_bin, tmp_path, **kw)
        instances.append(d)
        return d.start()
    yield make
    for d in instances:
        d.stop()


@pytest.fixture
def recorder():
    """Factory: recorder(handler=None) -> running harness.RecordingBackend."""
    instances = []

    def make(handler=None, **kw):
        r = harness.RecordingBackend(handler, **kw)
        instances.append(r)
        return r
    yield make
    for r in instances:
        r.stop()


@pytest.fixture
def blackhole():
    b = harness.BlackholeServer()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def id_pki(tmp_path_factory):
    """tlsutil's test PKI, made once per session for the client-identity
    tests (test_identity.py, test_proxy_protocol.py)."""
    import shutil
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    import tlsutil
    return tlsutil.make_pki(tmp_path_factory.mktemp("idpki"))


@pytest.fixture
def tomcat(request, tmp_path):
    """Factory: tomcat(jvm_route="t<n>", start=True, name=None, **kw) ->
    tomcat.Tomcat, a separate Tomcat 10 JVM with its own CATALINA_BASE and
    counter.jsp (see tomcat.py). Skips when Tomcat 10 or java is missing;
    every JVM is stopped by PID at teardown."""
    import tomcat as tc
    why = tc.missing()
    if why:
        pytest.skip(why)
    instances = []

    def make(jvm_route=None, start=True, name=None, **kw):
        n = len(instances) + 1
        jvm_route = jvm_route if jvm_route is not None else "t%d" % n
        t = tc.Tomcat(tmp_path, name or "tomcat%d-%s" % (n, jvm_route), jvm_route=jvm_route,
                      **kw)
        instances.append(t)
        return t.start() if start else t
    yield make
    for t in instances:
        if _failed(request) and t.proc is not None:
            print("\n==== diagnostics for %s (pid %s) ====" % (t.name, t.proc.pid))
            print(t.diagnostics())
        t.stop()


@pytest.fixture
def wlsim():
    """Factory: wlsim(name="wls<n>", start=True, **kw) -> wlsim.WlSim, a
    simulated WebLogic cluster member (see wlsim.py); all stopped at
    teardown."""
    import wlsim as wl
    instances = []

    def make(name=None, start=True, **kw):
        s = wl.WlSim(name or "wls%d" % (len(instances) + 1), **kw)
        instances.append(s)
        return s.start() if start else s
    yield make
    for s in instances:
        s.stop()
