"""sluice.shared, the instance-wide shared dictionary (docs/lua-api.md,
"sluice.shared: the shared dictionary"; src/shdict.c), against the real
binary: exact counts with two workers, the shipped lua/rate_limit.lua
allowing exactly BURST requests across two workers, values kept across a
reload while sluice.worker_state starts afresh (and config checks writing
to a private dictionary), eviction when full counted exactly on /metrics
with the worker serving on, bad API use raising errors that get on_error,
and lua_shared_memory's configuration errors.
"""

import os
import re
import threading

import harness as H

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
EVAL = os.path.join(HERE, "lua", "eval.lua")
RATE_LIMIT = os.path.join(REPO, "lua", "rate_limit.lua")


def write(tmp_path, name, text):
    with open(os.path.join(str(tmp_path), name), "w") as f:
        f.write(text)
    return name


def start(sluice, recorder, script, *, workers=1, inspect=None, top=None):
    be = recorder()
    ins = {"script": script}
    ins.update(inspect or {})
    c = H.make_config(H.free_port(), [H.server(be.port)], workers=workers,
                      listener={"inspect": ins}, admin=H.admin_config())
    c.update(top or {})
    return sluice(c), be


def metric(s, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), s.metrics_text(), re.M)
    assert m, "%s not on /metrics" % name
    return int(m.group(1))


def reqs_to(be, path):
    return [q for q in be.all_requests() if q.target == path]


def parallel(n_threads, fn):
    """Run fn(i) for i in range(n_threads) at once; re-raise the first error."""
    errors = []

    def run(i):
        try:
            fn(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "client threads still running"
    if errors:
        raise errors[0]


COUNTER = """\
function inspect(req)
  local n = sluice.shared:incr("hits", 1, 0)
  req:set_header("X-Count", tostring(n))
  req:set_header("X-Worker", tostring(sluice.worker))
end
"""


def test_counter_exact_across_two_workers(sluice, recorder, tmp_path):
    """400 requests over 40 connections, spread over 2 workers: the
    counter's values are exactly 1..400, each handed out once."""
    s, be = start(sluice, recorder, write(tmp_path, "counter.lua", COUNTER), workers=2)
    assert len(s.worker_pids()) == 2

    def client(i):
        for _ in range(2):                      # 2 connections of 5 requests per thread
            with H.Client(s.port) as c:
                for _ in range(5):
                    assert c.request("GET", "/c").status == 200
    parallel(40, client)
    got = [q for q in reqs_to(be, "/c")]
    assert len(got) == 400
    counts = sorted(int(q.header("x-count")) for q in got)
    assert counts == list(range(1, 401)), counts[:20]
    assert {q.header("x-worker") for q in got} == {"0", "1"}


def rate_limit_copy(tmp_path, burst):
    """lua/rate_limit.lua with BURST set and RATE so low (one request an
    hour) that no token comes back while the test runs; plus a prologue
    that counts calls per worker in sluice.shared and answers /probe with
    those counts."""
    src = H.read_text(RATE_LIMIT)
    src, n1 = re.subn(r"^local RATE = \d+", "local RATE = 1 / 3600", src, flags=re.M)
    src, n2 = re.subn(r"^local BURST = \d+", "local BURST = %d" % burst, src, flags=re.M)
    assert n1 == n2 == 1, "rate_limit.lua's knobs moved"
    src += """
local limit = inspect
function inspect(req)
  if req:path() == "/probe" then
    req:set_header("X-Calls", tostring(sluice.shared:get("calls0")) .. " " .. tostring(sluice.shared:get("calls1")))
    return
  end
  sluice.shared:incr("calls" .. sluice.worker, 1, 0)
  return limit(req)
end
"""
    return write(tmp_path, "rate_limit.lua", src)


def test_rate_limit_exact_burst_across_two_workers(sluice, recorder, tmp_path):
    """BURST 20, 60 requests at once from one address, one connection each,
    over 2 workers: exactly 20 reach the backend and 40 get 429 (tag
    ratelimit), whichever worker took them. Another address has its own
    bucket."""
    burst, total = 20, 60
    s, be = start(sluice, recorder, rate_limit_copy(tmp_path, burst), workers=2)
    statuses = []
    lock = threading.Lock()
    go = threading.Barrier(total)

    def client(i):
        with H.Client(s.port) as c:
            go.wait(10)
            st = c.request("GET", "/rl%d" % i).status
        with lock:
            statuses.append(st)
    parallel(total, client)
    assert sorted(statuses) == [200] * burst + [429] * (total - burst), statuses
    assert len([q for q in be.all_requests() if q.target.startswith("/rl")]) == burst
    # both workers decided some of them
    r = H.http_request(s.port, "GET", "/probe")
    assert r.status == 200
    calls = [int(x) for x in reqs_to(be, "/probe")[0].header("x-calls").split()]
    assert sum(calls) == total and min(calls) > 0, calls
    e = s.wait_access_entry(lambda x: x["status"] == "429")
    assert (e["inspect"], e["tags"]) == ("deny", "ratelimit"), e
    # still limited; another client address is not
    assert H.http_request(s.port, "GET", "/again").status == 429
    with H.Client(s.port, source=("127.0.0.2", 0)) as c:
        assert c.request("GET", "/other").status == 200


RELOAD_SCRIPT = """\
-- the main chunk runs in each worker as it starts, and at every config
-- check (against a private dictionary there)
sluice.shared:incr("loads", 1, 0)

function inspect(req)
  if req:path() == "/set" then
    sluice.shared:set("k", "v1")
    sluice.shared:set("t", 1, 3600)
    sluice.worker_state.w = "kept?"
  end
  local d = sluice.shared
  req:set_header("X-State", string.format("%s %s %s %s", tostring(d:get("k")), tostring(d:get("loads")),
                 tostring(sluice.worker_state.w), d:ttl("t") and d:ttl("t") > 3000 and "ttl" or "-"))
end
"""


def test_values_survive_reload(sluice, recorder, tmp_path):
    """sluice.shared keeps its entries (and their TTLs) across reloads, a
    size change included (a warning says the region stays);
    sluice.worker_state starts afresh; the master's config checks never
    wrote to the workers' dictionary (loads counts worker starts only)."""
    s, be = start(sluice, recorder, write(tmp_path, "state.lua", RELOAD_SCRIPT))
    assert H.http_request(s.port, "GET", "/set").status == 200
    assert H.http_request(s.port, "GET", "/a").status == 200
    assert reqs_to(be, "/a")[0].header("x-state") == "v1 1 kept? ttl"
    s.reload()
    assert H.http_request(s.port, "GET", "/b").status == 200
    assert reqs_to(be, "/b")[0].header("x-state") == "v1 2 nil ttl"
    off = len(H.read_text(s.error_log))
    cfg = dict(s.config)
    cfg["lua_shared_memory"] = "16m"
    s.reload(cfg)
    s.wait_error_log(r"lua_shared_memory: the file asks for 16777216 bytes; the shared dictionary "
                     r"keeps its 8388608 bytes and its entries until sluice restarts", start=off)
    assert H.http_request(s.port, "GET", "/c").status == 200
    assert reqs_to(be, "/c")[0].header("x-state") == "v1 3 nil ttl"
    assert metric(s, "sluice_lua_shared_bytes_capacity") < 8 << 20


FILL_SCRIPT = """\
function inspect(req)
  local d = sluice.shared
  local base = tonumber(req:header("X-Base"))
  local forcible = false
  for i = base, base + 49 do
    local ok, err, f = d:set(string.format("e%05d", i), string.rep("x", 1000))
    assert(ok, err)
    forcible = forcible or f
  end
  local st = d:stats()
  req:set_header("X-Stats", string.format("%d %d %s %d", st.bytes_capacity, st.entries,
                 tostring(forcible), #d:get(string.format("e%05d", base + 49))))
end
"""


def test_eviction_when_full_is_counted(sluice, recorder, tmp_path):
    """lua_shared_memory 64k (one shard): 200 entries of 18 blocks each
    (a 6-byte key and 1000 bytes: 20 + 17 x 60) into room for C blocks.
    Once full, each new entry evicts exactly one old one, so evictions =
    200 - C // 18, as /metrics says; every request is served."""
    s, be = start(sluice, recorder, write(tmp_path, "fill.lua", FILL_SCRIPT),
                  top={"lua_shared_memory": "64k"})
    blocks_per = 1 + -(-(6 + 1000 - 20) // 60)
    assert blocks_per == 18
    for r in range(4):
        assert H.http_request(s.port, "GET", "/f%d" % r, headers=[("X-Base", str(r * 50))]).status == 200
    stats = [reqs_to(be, "/f%d" % r)[0].header("x-stats").split() for r in range(4)]
    cap = int(stats[0][0])
    fit = cap // 64 // blocks_per
    assert 40 < fit < 60, cap
    assert [int(x[1]) for x in stats] == [min(50 * (r + 1), fit) for r in range(4)]
    assert [x[2] for x in stats] == ["false" if 50 * (r + 1) <= fit else "true" for r in range(4)]
    assert all(x[3] == "1000" for x in stats)
    assert metric(s, "sluice_lua_shared_evictions_total") == 200 - fit
    assert metric(s, "sluice_lua_shared_entries") == fit
    assert metric(s, "sluice_lua_shared_bytes_used") == fit * blocks_per * 64
    assert metric(s, "sluice_lua_shared_bytes_capacity") == cap
    assert H.http_request(s.port, "GET", "/after", headers=[("X-Base", "1000")]).status == 200


BAD_USES = [
    # (path, code, what the error log says)
    ("/key", "sluice.shared:get({})", r"bad argument #1 to 'get' \(string expected, got table\)"),
    ("/val", "sluice.shared:set('k', {1})",
     r"bad argument #2 to 'set' \(string, number, boolean or nil expected, got table\)"),
    ("/ttl", "sluice.shared:set('k', 1, -5)",
     r"bad argument #3 to 'set' \(ttl must be from 0 \(no expiry\) to 1e9 seconds\)"),
    ("/incr", "sluice.shared:incr('k', 'one')", r"bad argument #2 to 'incr' \(number expected, got string\)"),
    ("/dot", "sluice.shared.get('k')", r"sluice\.shared:get\(\.\.\.\): call it with a colon, on sluice\.shared"),
    ("/assign", "sluice.shared.n = 1", r"sluice\.shared cannot be assigned to: use sluice\.shared:set\(k, v\)"),
    ("/old", "local t = sluice.shared.rate_limit",
     r"sluice\.shared has no field 'rate_limit': it is the instance-wide dictionary .*sluice\.worker_state"),
]


def test_bad_api_use_raises_and_gets_on_error(sluice, recorder):
    """Misuse raises a Lua error: logged with its message, the request gets
    on_error (deny: 500), the worker goes on. A key too large is an answer,
    not an error."""
    s, be = start(sluice, recorder, EVAL, inspect={"on_error": "deny"})
    for path, code, rx in BAD_USES:
        off = len(H.read_text(s.error_log))
        r = H.http_request(s.port, "GET", path, headers=[("X-Lua", code)])
        assert r.status == 500, (path, r)
        s.wait_error_log(r"inspect\(\) failed for 127\.0\.0\.1:\d+ GET %s: eval:1: %s" % (re.escape(path), rx),
                         start=off)
    code = ("local v, err = sluice.shared:get(string.rep('k', 256)) "
            "local ok, err2 = sluice.shared:set(string.rep('k', 256), 1) "
            "req:set_header('X-R', tostring(v) .. ' ' .. err .. ' ' .. tostring(ok) .. ' ' .. err2)")
    assert H.http_request(s.port, "GET", "/big", headers=[("X-Lua", code)]).status == 200
    assert reqs_to(be, "/big")[0].header("x-r") == "nil key too large false key too large"
    assert not [q for q, _, _ in BAD_USES if reqs_to(be, q)]


def test_lua_shared_memory_config_errors(sluice, recorder, tmp_path):
    """Bad sizes are refused by the check with the key, its line and why."""
    be = recorder()
    for value, why in (("32k", "must be at least 65536"), ("lots", "bad size \"lots\""),
                       ("17g", "is too large (at most 17179869184)")):
        c = H.make_config(H.free_port(), [H.server(be.port)])
        c["lua_shared_memory"] = value
        s = sluice(c, start=False)
        r = s.check()
        assert r.returncode != 0, value
        assert re.search(r":\d+: lua_shared_memory: .*%s" % re.escape(why), r.stderr), r.stderr
