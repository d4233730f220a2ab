#!/usr/bin/env python3
"""h2hold: hold many idle HTTP/2 connections open against one TLS server on
127.0.0.1, for bench/h2.py (what bench/connhold.c does for HTTP/1.1; h2load
cannot leave connections idle). One process, one asyncio loop, the `h2`
library (Debian's python3-h2) for the framing.

    h2hold.py PORT [CONCURRENCY]

Every connection: TCP connect, TLS handshake offering ALPN h2 only (no
certificate verification, SNI "localhost"), the client preface and
SETTINGS, one `GET /` on stream 1, the whole response read (and SETTINGS
acknowledged), then idle: the connection stays open and keeps being read (a
PING is answered, a GOAWAY or a close is counted), but sends nothing more.
At most CONCURRENCY (default 50) connections are being opened at a time.

Commands on stdin, one per line (connhold's):
  N       open connections until N are open and answered once; prints one
          status line when N are up, or after 120 s, whichever is first
  s       print a status line now
  q       close everything and exit
Status line:
  open <n> target <N> errors <e> closed <c> reqs <r> ms <t>
errors: connects/handshakes/requests that failed (or did not negotiate h2,
or got no 200); closed: open connections the server closed or sent GOAWAY
on; reqs: responses received in all; ms: time the last N command took.
The first error is printed on stderr.

probe(port) is also used by bench/h2.py: one request on a new connection.
"""
import asyncio
import os
import resource
import socket
import ssl
import sys
import time

# Run as a script, this file's directory (bench/) comes first on sys.path,
# and bench/h2.py would shadow the h2 library: look there last.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [x for x in sys.path if os.path.abspath(x or ".") != _HERE] + [_HERE]

import h2.config  # noqa: E402
import h2.connection  # noqa: E402
import h2.events  # noqa: E402
import h2.exceptions  # noqa: E402

BODY_READ = 1 << 16


def client_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    return ctx


def new_h2(port):
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    c.send_headers(1, [(":method", "GET"), (":path", "/"), (":scheme", "https"),
                       (":authority", f"localhost:{port}")], end_stream=True)
    return c


class Answer:
    """What came back on stream 1 (and whether the connection is still up)."""

    def __init__(self):
        self.status = None
        self.body = 0
        self.done = False
        self.gone = None          # why the connection ended, once it has

    def feed(self, conn, events):
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == 1:
                self.status = dict(ev.headers).get(":status")
            elif isinstance(ev, h2.events.DataReceived):
                self.body += len(ev.data)
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == 1:
                self.done = True
            elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == 1:
                self.done, self.gone = True, f"stream reset ({ev.error_code!r})"
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.gone = f"GOAWAY ({ev.error_code!r})"


def probe(port, timeout=5):
    """One GET / over a new TLS connection offering only h2. Returns a dict:
    alpn, status (str or None), body (bytes received), error (None or text)."""
    out = {"alpn": None, "status": None, "body": 0, "error": None}
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s = client_ctx().wrap_socket(raw, server_hostname="localhost")
        out["alpn"] = s.selected_alpn_protocol()
        if out["alpn"] != "h2":
            s.close()
            out["error"] = f"ALPN selected {out['alpn']!r}, not h2"
            return out
        c, a = new_h2(port), Answer()
        s.sendall(c.data_to_send())
        while not a.done and not a.gone:
            data = s.recv(BODY_READ)
            if not data:
                a.gone = "closed by the server"
                break
            a.feed(c, c.receive_data(data))
            s.sendall(c.data_to_send())
        c.close_connection()
        s.sendall(c.data_to_send())
        s.close()
        out["status"], out["body"] = a.status, a.body
        if not a.done:
            out["error"] = f"no complete response: {a.gone}"
    except (OSError, ssl.SSLError, h2.exceptions.ProtocolError) as e:
        out["error"] = repr(e)
    return out


class Holder:
    def __init__(self, port, conc):
        self.port, self.sem = port, asyncio.Semaphore(conc)
        self.ctx = client_ctx()
        self.open = self.errors = self.closed = self.reqs = 0
        self.opening = 0          # connections not yet open nor failed
        self.first_error = None
        self.writers = []
        self.tasks = []

    def error(self, what):
        self.errors += 1
        if self.first_error is None:
            self.first_error = what
            print(f"h2hold: first error: {what}", file=sys.stderr, flush=True)

    async def one(self):
        try:
            r, w, c, a = await self.open_one()
        finally:
            self.opening -= 1
        if w is None:
            return
        # Idle from here on: keep reading (answer PINGs), count the end.
        try:
            while not a.gone:
                data = await r.read(BODY_READ)
                if not data:
                    break
                a.feed(c, c.receive_data(data))
                w.write(c.data_to_send())
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError):
            pass
        if not getattr(w, "_h2hold_closing", False):
            self.open -= 1
            self.closed += 1

    async def open_one(self):
        """Connect, handshake, one request: (reader, writer, H2Connection,
        Answer), writer None on failure."""
        none = (None, None, None, None)
        async with self.sem:
            try:
                r, w = await asyncio.wait_for(asyncio.open_connection(
                    "127.0.0.1", self.port, ssl=self.ctx, server_hostname="localhost"), 30)
            except (OSError, ssl.SSLError, asyncio.TimeoutError) as e:
                self.error(f"connect/handshake: {e!r}")
                return none
            alpn = w.get_extra_info("ssl_object").selected_alpn_protocol()
            if alpn != "h2":
                self.error(f"ALPN selected {alpn!r}, not h2")
                w.close()
                return none
            c, a = new_h2(self.port), Answer()
            w.write(c.data_to_send())
            try:
                while not a.done and not a.gone:
                    data = await asyncio.wait_for(r.read(BODY_READ), 30)
                    if not data:
                        a.gone = "closed by the server"
                        break
                    a.feed(c, c.receive_data(data))
                    w.write(c.data_to_send())
            except (OSError, ssl.SSLError, asyncio.TimeoutError, h2.exceptions.ProtocolError) as e:
                a.gone = repr(e)
            if not a.done or a.status != "200":
                self.error(f"request: status {a.status}, {a.gone or 'incomplete'}")
                w.close()
                return none
            self.reqs += 1
            self.open += 1
            self.writers.append(w)
            return r, w, c, a

    def status(self, target, ms):
        return (f"open {self.open} target {target} errors {self.errors} closed {self.closed} "
                f"reqs {self.reqs} ms {ms}")

    async def reach(self, n):
        t0 = time.monotonic()
        more = max(0, n - self.open)
        self.opening += more
        self.tasks += [asyncio.ensure_future(self.one()) for _ in range(more)]
        while self.opening > 0 and time.monotonic() < t0 + 120:
            await asyncio.sleep(0.05)
        return self.status(n, int((time.monotonic() - t0) * 1000))

    async def close_all(self):
        for w in self.writers:
            w._h2hold_closing = True
            w.close()
        await asyncio.sleep(0.2)


async def main():
    port = int(sys.argv[1])
    conc = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    h = Holder(port, conc)
    loop = asyncio.get_running_loop()
    target = 0
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        cmd = line.strip()
        if not line or cmd == "q":
            await h.close_all()
            return
        if cmd == "s":
            print(h.status(target, 0), flush=True)
        elif cmd.isdigit():
            target = int(cmd)
            print(await h.reach(target), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
