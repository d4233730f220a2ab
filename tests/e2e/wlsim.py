"""A WebLogic cluster member, simulated in Python, for the session
persistence tests: what a proxy sees of WebLogic's in-memory session
replication, without WebLogic.

One WlSim is one managed server: a threaded HTTP/1.1 origin (keep-alive)
on a free loopback port with a server id standing in for WebLogic's JVMID
hash (a signed 32-bit decimal, random per start unless given). Its session
cookie carries the routing data a WebLogic proxy plug-in reads:

    Set-Cookie: JSESSIONID=<52 chars>!<primary id>!<secondary id>; path=/; HttpOnly

primary is the server holding the session, secondary the member holding
its replica (the literal NONE when there is none). Every answer is
`count=<n> server=<name> id=<id>`, the counter living in the session, and
(by default) carries `X-WebLogic-JVMID: <id>`. The session id is also
accepted as a path parameter, `/path;jsessionid=<value>`, like WebLogic's
URL rewriting.

A restart keeps the name and the port but takes a NEW id (unless one was
fixed) and forgets its sessions, as a real restart does; kill() is a crash
(connections reset, sessions gone). Replication is modelled by a `replicated`
dict shared between members (the cluster's replicas, keyed by the 52-char
id): every update is written to it, and a member that receives a cookie
naming another primary, for a session it finds there, serves it and
becomes its primary, as WebLogic's secondary does when the primary has
failed: the cookie is reissued as <sid>!<this id>!<new secondary>.
"""

import random
import socket
import string
import struct
import threading

import harness as H

SID_LEN = 52
SID_CHARS = string.ascii_letters + string.digits
NONE = "NONE"
_REPLICA_LOCK = threading.Lock()     # one lock for every shared `replicated` dict


def random_jvmid():
    """A JVMID-hash-like id: signed 32-bit decimal, as WebLogic prints it."""
    return str(random.randint(-2**31, 2**31 - 1))


def new_session_id():
    return "".join(random.SystemRandom().choice(SID_CHARS) for _ in range(SID_LEN))


def parse_cookie_value(value):
    """'<sid>!<primary>!<secondary>' -> (sid, primary, secondary); parts that
    are absent come back as None (a cookie from elsewhere, a bare id)."""
    parts = value.split("!")
    parts += [None] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def cookie_from_headers(headers, name):
    """The value of cookie NAME in the request's Cookie headers, or None
    (the first one wins, like a servlet container)."""
    for k, v in headers:
        if k.lower() != "cookie":
            continue
        for part in v.split(";"):
            n, eq, val = part.strip().partition("=")
            if eq and n == name:
                return val
    return None


def path_session_param(target, name):
    """The ;jsessionid=... path parameter of TARGET (also ;<name lowered>=
    for a renamed cookie), or None."""
    path = target.split("?", 1)[0]
    for seg in path.split(";")[1:]:
        k, eq, v = seg.partition("=")
        if eq and k.lower() in ("jsessionid", name.lower()):
            return v.split("/", 1)[0]
    return None


class WlSim:
    """One simulated WebLogic managed server.

    NAME: shown in the body. SERVER_ID: a fixed id (str/int), kept across
    restarts; default: random per start. SECONDARY: whom to name as secondary in new cookies: None
    (NONE), a fixed id, another WlSim (its current id while it runs, NONE
    while it is down) or a callable returning an id. REPLICATED: a dict
    shared by the members of one cluster (see the module docstring).
    COOKIE_NAME: the session cookie (WebLogic's CookieName). JVMID_HEADER:
    send X-WebLogic-JVMID on every response."""

    def __init__(self, name="wls1", server_id=None, secondary=None, replicated=None,
                 cookie_name="JSESSIONID", jvmid_header=True, port=None):
        self.name = name
        self.fixed_id = None if server_id is None else str(server_id)
        self.server_id = None
        self.secondary = secondary
        self.replicated = replicated
        self.cookie_name = cookie_name
        self.jvmid_header = jvmid_header
        self.port = port or H.free_port()
        self.sessions = {}            # sid -> count, this member's primaries
        self.requests = []            # every harness.Request, in arrival order
        self.takeovers = []           # (sid, old primary) for each failover served
        self.starts = 0
        self.accepted = 0
        self.lock = threading.Lock()
        self.lsock = None
        self.conns = []
        self.threads = []
        self.stopping = False

    @property
    def address(self):
        return "%s:%d" % (H.HOST, self.port)

    def running(self):
        return self.lsock is not None and not self.stopping

    # -- lifecycle
    def start(self, server_id=None):
        """Bind the port (the same one across restarts) and serve. The id
        is SERVER_ID, else the fixed one, else a fresh random one. Sessions
        are left as they are: restart() is what forgets them."""
        assert not self.running(), "%s already running" % self.name
        self.server_id = str(server_id) if server_id is not None else (
            self.fixed_id or random_jvmid())
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((H.HOST, self.port))
        s.listen(128)
        s.settimeout(0.1)
        self.lsock = s
        self.stopping = False
        self.starts += 1
        t = threading.Thread(target=self._accept_loop, args=(s,), daemon=True)
        t.start()
        self.threads = [t]
        return self

    def _shutdown(self, abort):
        """Close the listener and every connection: FIN (graceful) or RST
        (ABORT, what a peer sees when the process dies)."""
        self.stopping = True
        if self.lsock is not None:
            try:
                self.lsock.close()
            except OSError:
                pass
        with self.lock:
            conns, self.conns = list(self.conns), []
        for c in conns:
            # Wake the connection's thread, which closes the socket: with
            # SO_LINGER 0 that close sends the RST (closing it here would
            # not wake a thread blocked in recv on it).
            try:
                if abort:
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    c.shutdown(socket.SHUT_RD)
                else:
                    c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads:
            t.join(timeout=2)
        self.threads = []
        self.lsock = None

    def stop(self):
        """Graceful stop; sessions stay in memory until restart() decides.
        Safe to call twice."""
        if self.lsock is not None:
            self._shutdown(abort=False)

    def kill(self):
        """A crash: connections are reset, the port refuses, and the
        in-memory sessions are gone (replicas in `replicated` survive)."""
        if self.lsock is not None:
            self._shutdown(abort=True)
        with self.lock:
            self.sessions = {}

    def restart(self, keep_sessions=False, server_id=None):
        """Stop and start on the same port under a NEW id (SERVER_ID, or the
        fixed one if configured, else random and different from the old).
        Sessions are forgotten unless KEEP_SESSIONS."""
        old = self.server_id
        self.stop()
        if not keep_sessions:
            with self.lock:
                self.sessions = {}
        if server_id is None and self.fixed_id is None:
            server_id = random_jvmid()
            while server_id == old:
                server_id = random_jvmid()
        return self.start(server_id)

    # -- serving
    def _accept_loop(self, lsock):
        while not self.stopping:
            try:
                c, _ = lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.conns.append(c)
                self.accepted += 1
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, sock):
        sock.settimeout(30.0)
        st = H.Stream(sock)
        try:
            while not self.stopping:
                q = H.read_request(st)
                with self.lock:
                    self.requests.append(q)
                close = self._wants_close(q)
                sock.sendall(self.handle(q, close))
                if close:
                    break
        except (H.ConnClosed, OSError, ValueError):
            pass
        finally:
            with self.lock:
                if sock in self.conns:
                    self.conns.remove(sock)
            try:
                sock.close()
            except OSError:
                pass

    @staticmethod
    def _wants_close(q):
        tokens = ",".join(q.header_all("connection")).lower()
        if q.version == "HTTP/1.0":
            return "keep-alive" not in tokens
        return "close" in tokens

    def handle(self, q, close=False):
        """The response bytes for request Q (session lookup, count, cookie)."""
        sid, count, set_cookie = self._session_for(q)
        body = ("count=%d server=%s id=%s" % (count, self.name, self.server_id)).encode()
        hs = [("Content-Type", "text/plain")]
        if set_cookie:
            hs.append(("Set-Cookie", "%s=%s; path=/; HttpOnly" % (self.cookie_name, set_cookie)))
        if self.jvmid_header:
            hs.append(("X-WebLogic-JVMID", self.server_id))
        if close:
            hs.append(("Connection", "close"))
        return H.canned_response(body, 200, hs)

    def _incoming(self, q):
        """(sid, primary, secondary) the client sent: cookie first, then the
        path parameter (WebLogic's order); all None without one."""
        v = cookie_from_headers(q.headers, self.cookie_name)
        if v is None:
            v = path_session_param(q.target, self.cookie_name)
        if not v:
            return None, None, None
        return parse_cookie_value(v)

    def current_secondary(self, exclude=None):
        """The id to name as secondary now; NONE if there is no member to
        hold the replica. A WlSim peer counts while it runs; a fixed or
        computed id does not when it is EXCLUDE (the primary this member is
        taking over from, presumed dead)."""
        p = self.secondary
        if isinstance(p, WlSim):
            sec = p.server_id if p.running() else None
            exclude = None
        elif callable(p):
            sec = p()
        else:
            sec = p
        sec = None if sec is None else str(sec)
        if sec is None or sec in (exclude, self.server_id):
            return NONE
        return sec

    def _session_for(self, q):
        """Find or make the session; returns (sid, count, cookie value to
        set or None). When the cookie names another primary and the
        cluster's replicas hold the session, the replica wins (failover:
        this member becomes the primary; a stale local copy is ignored, as
        the promoted replica is the live one); else it is found locally;
        anything else gets a new session."""
        sid, primary, secondary = self._incoming(q)
        with self.lock:
            count = None
            if sid and primary not in (None, self.server_id) and self.replicated is not None:
                with _REPLICA_LOCK:
                    count = self.replicated.get(sid)
            took_over = count is not None
            if count is None and sid:
                count = self.sessions.get(sid)
            if count is None:
                sid, count, primary = new_session_id(), 0, None
            count += 1
            self.sessions[sid] = count
            if took_over:
                self.takeovers.append((sid, primary))
            if self.replicated is not None:
                with _REPLICA_LOCK:
                    self.replicated[sid] = count
        if primary == self.server_id and secondary == self.current_secondary(primary):
            return sid, count, None
        value = "%s!%s!%s" % (sid, self.server_id, self.current_secondary(primary))
        return sid, count, value

    # -- queries for tests
    def all_requests(self):
        with self.lock:
            return list(self.requests)

    def wait_requests(self, n, timeout=5.0):
        return H.wait_for(lambda: len(self.all_requests()) >= n and self.all_requests(),
                          timeout, what="%d requests at %s" % (n, self.name))

    def conn_count(self):
        """Connections accepted since this object was made (all starts)."""
        with self.lock:
            return self.accepted
