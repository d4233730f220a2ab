"""A frame-level HTTP/2 client for the tests, on the h2 library (python3-h2):
it sends exactly the frames a test asks for, including ones a browser never
would (validation of outbound fields can be turned off), and records every
event per stream. Deadlines on every read; nothing here sleeps."""

import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

import harness as H


class StreamRecord:
    def __init__(self):
        self.headers = None        # final response fields, as (name, value) str pairs
        self.interim = []          # 1xx responses' fields
        self.data = bytearray()
        self.trailers = None
        self.ended = False
        self.reset = None          # the error code of a RST_STREAM from the server

    @property
    def status(self):
        if self.headers is None:
            return None
        return int(dict(self.headers)[":status"])

    def header(self, name):
        for k, v in self.headers or []:
            if k == name:
                return v
        return None

    @property
    def done(self):
        return self.ended or self.reset is not None


class H2Client:
    def __init__(self, port, tls=False, validate=True, timeout=H.DEFAULT_TIMEOUT, settings=None):
        self.timeout = timeout
        sock = socket.create_connection((H.HOST, port), timeout=timeout)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
            assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
        self.sock = sock
        cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8",
                                        validate_outbound_headers=validate,
                                        normalize_outbound_headers=validate,
                                        validate_inbound_headers=True)
        self.conn = h2.connection.H2Connection(cfg)
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.streams = {}
        self.remote_settings = {}
        self.goaway = None
        self.closed = False
        self.flush()

    def flush(self):
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def send_raw(self, data):
        self.sock.sendall(data)

    def request(self, path="/", method="GET", headers=(), body=None, authority="h2.test",
                scheme="http", end=True):
        """Open a stream; BODY (bytes) is sent as it fits the windows."""
        sid = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":scheme", scheme)]
        if authority is not None:
            fields.append((":authority", authority))
        fields.append((":path", path))
        fields += list(headers)
        self.streams[sid] = StreamRecord()
        self.conn.send_headers(sid, fields, end_stream=end and body is None)
        self.flush()
        if body is not None:
            self.send_body(sid, body, end=end)
        return sid

    def send_body(self, sid, body, end=True):
        view = memoryview(body)
        while len(view):
            win = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if win <= 0:
                self.pump(lambda: self.conn.local_flow_control_window(sid) > 0 or self.streams[sid].done,
                          what="window for stream %d" % sid)
                if self.streams[sid].done:
                    return
                continue
            n = min(win, len(view))
            self.conn.send_data(sid, view[:n].tobytes())
            view = view[n:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def reset(self, sid, code=8):
        self.conn.reset_stream(sid, error_code=code)
        self.flush()

    def _event(self, ev):
        st = self.streams.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.ResponseReceived):
            st.headers = ev.headers
        elif isinstance(ev, h2.events.InformationalResponseReceived):
            st.interim.append(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            st.data += ev.data
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.TrailersReceived):
            st.trailers = ev.headers
        elif isinstance(ev, h2.events.StreamEnded):
            st.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            if st is not None:
                st.reset = ev.error_code
        elif isinstance(ev, h2.events.RemoteSettingsChanged):
            for k, v in ev.changed_settings.items():
                self.remote_settings[k] = v.new_value
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = ev

    def pump(self, until, timeout=None, what="condition"):
        """Read and handle frames until UNTIL() is true; TimeoutError
        after TIMEOUT. A closed connection ends the wait too."""
        deadline = time.monotonic() + (timeout or self.timeout) * H.SLOW
        while not until():
            if self.closed:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("h2: timed out waiting for " + what)
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, ssl.SSLError, OSError):
                data = b""
            if not data:
                self.closed = True
                return until()
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.closed = True
                return until()
            for ev in events:
                self._event(ev)
            self.flush()
        return True

    def wait(self, *sids, timeout=None):
        self.pump(lambda: all(self.streams[s].done for s in sids), timeout=timeout,
                  what="streams %s" % (sids,))
        return [self.streams[s] for s in sids]

    def get(self, path="/", **kw):
        sid = self.request(path, **kw)
        return self.wait(sid)[0]

    def close(self):
        try:
            self.conn.close_connection()
            self.flush()
        except Exception:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
