"""The malformed-request and smuggling tables (test_malformed.py,
test_smuggling.py) again, over HTTP/2, for every case that has an HTTP/2
shape: framing (content-length, transfer-encoding, te), field syntax (CR,
LF, NUL, case, spaces, colons, empty names, obs-fold-like values),
pseudo-headers, :path, :authority and Host, methods, the header limits,
headers_with_underscores, and the client-identity headers.

Each case is sent with H2Client(validate=False) on a connection that has
just completed a good request (so an idle pooled backend connection is
there, and a head that wrongly went on would reach the backend at once), and
asserts:
- the stream's exact outcome: RST_STREAM(PROTOCOL_ERROR) ("rst"), or
  sluice's own 4xx status, or for a header block the HPACK decoder will not
  take, the connection's GOAWAY(COMPRESSION_ERROR);
- the backend's bytes: nothing of a refused case -- they are parsed with
  test_smuggling's strict parser, which also proves that what was forwarded
  (the controls, the next request) is in sluice's normalised form;
- the connection (or, after a GOAWAY, a new one) and the worker serve on: a
  following request gets its 200, and the worker PIDs have not changed;
- for the identity cases, the exact head the backend received (and that it
  is byte for byte what the same request over HTTP/1.1 produces).

Cases that show a bug in sluice are xfail(strict=True), their reason saying
what happens and what should."""

import os
import threading
import time

import pytest

import harness as H
import tlsutil as T
from h2client import H2Client, StreamRecord
from test_smuggling import parse_strict

PROTOCOL_ERROR = 1
COMPRESSION_ERROR = 9
RST = "rst"

# limits of this module's sluice (small so the oversize cases are cheap)
MAX_REQUEST_LINE = 1024
MAX_HEADER_SIZE = 4096
MAX_HEADERS = 20
MAX_BODY = 1024

AUTH = "h2.test"
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: h2.test\r\n\r\n"
ALLOW_ALL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lua",
                         "allow_all.lua")

# A request to /hold/... is answered only once HOLD is set (or after 5 s):
# the split H2.CL case keeps its stream open at sluice with it.
HOLD = threading.Event()


def backend_handler(conn):
    while True:
        q = conn.read_request()
        if q.target.startswith("/hold/"):
            HOLD.wait(5)
        conn.respond(b"ok", headers=[("X-Target", q.target)])


class Rig:
    def __init__(self, s, rb, ports, workers):
        self.s = s
        self.rb = rb
        self.ports = ports
        self.workers = workers


LISTENERS = {
    "h2c": {"h2c": "on"},
    "drop": {"h2c": "on", "headers_with_underscores": "drop"},
    "reject": {"h2c": "on", "headers_with_underscores": "reject"},
    "trusted": {"h2c": "on", "trusted_forwarders": ["127.0.0.1"]},
    # the Lua hook holding bodies up to 16 bytes, as test_smuggling's "inspect" rig
    "inspect": {"h2c": "on", "inspect": {"script": os.path.abspath(ALLOW_ALL), "body": "16"}},
    "tls": None,  # h2 by ALPN; filled in with the certificate below
}


@pytest.fixture(scope="module")
def rig(sluice_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("h2malformed")
    (d / "pki").mkdir()
    pki = T.make_pki(d / "pki")
    rb = H.RecordingBackend(backend_handler)
    listeners = []
    for name, kw in LISTENERS.items():
        li = {"name": name, "address": "%s:%d" % (H.HOST, H.free_port()), "backend": "app"}
        li.update(kw if kw is not None else {"tls": {"certificates": [pki.ecdsa.entry()]}})
        listeners.append(li)
    cfg = H.make_config(H.free_port(), [H.server(rb.port)],
                        timeouts={"client_header": "3s", "client_body": "3s"},
                        limits={"max_request_line": MAX_REQUEST_LINE, "max_header_size": MAX_HEADER_SIZE,
                                "max_headers": MAX_HEADERS, "max_body_size": MAX_BODY})
    cfg["listeners"] = listeners
    s = H.Sluice(sluice_bin, d, cfg, name="h2malformed")
    try:
        s.start()
        ports = {li["name"]: int(li["address"].rsplit(":", 1)[1]) for li in listeners}
        yield Rig(s, rb, ports, sorted(s.worker_pids()))
    finally:
        HOLD.set()
        s.kill()
        rb.stop()


# --------------------------------------------------------------------------
# cases

class Case:
    """One request.

    fields: the whole header block (pseudo-headers included), else
    :method METHOD, :scheme, :authority h2.test, :path PATH, then EXTRA.
    body: DATA (one frame), sent in the same write as the HEADERS;
    trailers: a trailing HEADERS frame, in that write too.
    expect: RST (RST_STREAM PROTOCOL_ERROR), a status sluice answers itself,
    ("goaway", code) for a connection error, or a tuple of those when
    either is right.
    forward: the (method, target, body) the backend must receive for this
    case, complete and normalised; None: nothing of it.
    partial: the backend may hold an incomplete prefix of it, on a
    connection sluice then closes (never a complete request).
    head: the exact head the backend must receive (identity cases)."""

    def __init__(self, name, extra=(), method="GET", path=None, fields=None, body=None,
                 trailers=None, expect=RST, forward=None, listener="h2c", partial=False,
                 head=None, xfail=None):
        self.name = name
        self.listener = listener
        self.scheme = "https" if listener == "tls" else "http"
        self.path = path if path is not None else "/c/" + name
        if fields is None:
            fields = [(":method", method), (":scheme", self.scheme), (":authority", AUTH),
                      (":path", self.path)] + list(extra)
        self.fields = fields
        self.body = body
        self.trailers = trailers
        self.expect = expect
        self.forward = forward
        self.partial = partial
        self.head = head
        self.xfail = xfail

    def param(self):
        marks = [pytest.mark.xfail(strict=True, reason=self.xfail)] if self.xfail else []
        return pytest.param(self, id=self.name, marks=marks)


def fwd(case_name, method="GET", body=b""):
    return (method, "/c/" + case_name, body)


def C(name, *extra, **kw):
    return Case(name, extra, **kw)


M_GET, S_HTTP, A_OK = (":method", "GET"), (":scheme", "http"), (":authority", AUTH)


def P(path):
    return (":path", path)


def pseudo(name, *fields, **kw):
    return Case(name, fields=list(fields), **kw)


# The one-write H2.CL and malformed-trailer cases: nghttp2 only queues its
# RST_STREAM, so sluice frames those before it dispatches the heads of the
# same input, and checks DATA that came with a head against its
# content-length; nothing of them reaches the backend.

H2C_CASES = [
    # ---- framing: content-length (H2.CL)
    C("cl_non_numeric", ("content-length", "abc"), method="POST", body=b"hello"),
    C("cl_negative", ("content-length", "-1"), method="POST", body=b"hello"),
    C("cl_plus_sign", ("content-length", "+5"), method="POST", body=b"hello"),
    C("cl_hex", ("content-length", "0x5"), method="POST", body=b"hello"),
    C("cl_list", ("content-length", "5, 5"), method="POST", body=b"hello"),
    C("cl_duplicate_equal", ("content-length", "5"), ("content-length", "5"), method="POST", body=b"hello"),
    C("cl_duplicate_conflicting", ("content-length", "5"), ("content-length", "6"), method="POST",
      body=b"hello!"),
    C("cl_leading_space", ("content-length", " 5"), method="POST", body=b"hello"),
    C("cl_overflow", ("content-length", "99999999999999999999"), method="POST", body=b"hello"),
    C("cl_on_headers_with_end_stream", ("content-length", "5")),
    C("cl_shorter_than_data", ("content-length", "5"), method="POST", body=b"01234" + SMUGGLED),
    C("cl_longer_than_data", ("content-length", "10"), method="POST", body=b"01234"),
    C("cl_zero_with_data", ("content-length", "0"), method="POST", body=SMUGGLED),
    C("cl_body_over_max_body_size", ("content-length", str(MAX_BODY + 1)), method="POST",
      body=b"x" * (MAX_BODY + 1), expect=413),
    # without content-length the body streams (chunked) as over HTTP/1.1: the
    # head may be out before the limit is met; that request never completes
    C("no_cl_body_over_max_body_size", method="POST", body=b"x" * (MAX_BODY + 1), expect=413,
      partial=True),
    # ---- framing: transfer-encoding and te (H2.TE)
    C("te_chunked_with_chunked_body", ("transfer-encoding", "chunked"), method="POST",
      body=b"0\r\n\r\n" + SMUGGLED),
    C("te_chunked_no_body", ("transfer-encoding", "chunked")),
    C("te_identity", ("transfer-encoding", "identity"), method="POST", body=b"hello"),
    C("te_header_gzip", ("te", "gzip")),
    C("te_header_trailers_gzip", ("te", "trailers, gzip")),
    C("Transfer_Encoding_uppercase_underscore", ("Transfer_Encoding", "chunked"), method="POST",
      body=b"0\r\n\r\n"),
    C("transfer_encoding_underscore", ("transfer_encoding", "chunked"), method="POST",
      body=b"0\r\n\r\n", expect=400),
    C("content_length_underscore", ("content_length", "5"), method="POST", body=b"hello", expect=400),
    # controls: what HTTP/2 allows, forwarded normalised
    C("te_trailers_forwarded_without_te", ("te", "trailers"), expect=200,
      forward=fwd("te_trailers_forwarded_without_te")),
    C("chunked_bytes_are_body_without_cl", method="POST", body=b"0\r\n\r\n" + SMUGGLED, expect=200,
      forward=fwd("chunked_bytes_are_body_without_cl", "POST", b"0\r\n\r\n" + SMUGGLED)),
    C("cl_leading_zeros_canonical", ("content-length", "005"), method="POST", body=b"hello",
      expect=200, forward=fwd("cl_leading_zeros_canonical", "POST", b"hello")),
    # ---- connection-specific fields
    C("connection_keep_alive", ("connection", "keep-alive")),
    C("connection_close", ("connection", "close")),
    C("keep_alive", ("keep-alive", "timeout=5")),
    C("proxy_connection", ("proxy-connection", "keep-alive")),
    C("upgrade_websocket", ("upgrade", "websocket")),
    C("upgrade_h2c", ("upgrade", "h2c")),
    # connection-specific (RFC 7540 3.2.1): dropped, the request goes on
    C("http2_settings_dropped", ("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA"), expect=(200, RST),
      forward=fwd("http2_settings_dropped")),
    C("expect_100_continue_handled_by_sluice", ("expect", "100-continue"), expect=200,
      forward=fwd("expect_100_continue_handled_by_sluice")),
    C("expect_unknown_417", ("expect", "bananas"), expect=417),
    # ---- field syntax: control bytes, CR/LF smuggling
    C("cr_in_value", ("x-v", "a\rb")),
    C("lf_in_value", ("x-v", "a\nb")),
    C("nul_in_value", ("x-v", "a\x00b")),
    C("ctl_in_value", ("x-v", "a\x01b")),
    C("del_in_value", ("x-v", "a\x7fb")),
    C("crlf_request_in_value", ("x-v", "a\r\nGET /smuggled HTTP/1.1\r\nHost: h2.test\r\n\r\n")),
    C("crlf_header_in_value", ("x-v", "1\r\nTransfer-Encoding: chunked")),
    C("crlf_in_cookie", ("cookie", "a=1\r\nx-injected: 1")),
    C("obs_fold_value_space", ("x-v", "a\r\n b")),
    C("obs_fold_value_tab", ("x-v", "a\r\n\tb")),
    C("value_leading_space", ("x-v", " a")),
    C("value_trailing_space", ("x-v", "a ")),
    C("value_trailing_tab", ("x-v", "a\t")),
    C("cr_in_name", ("x\rv", "1")),
    C("lf_in_name", ("x\nv", "1")),
    C("nul_in_name", ("x\x00v", "1")),
    C("uppercase_name", ("X-Upper", "1")),
    C("uppercase_host", ("Host", AUTH)),
    C("space_in_name", ("x v", "1")),
    C("trailing_space_in_name", ("x-v ", "1")),
    C("tab_in_name", ("x\tv", "1")),
    C("colon_in_name", ("x:v", "1")),
    C("paren_in_name", ("x(a)", "1")),
    C("empty_name", ("", "1")),
    C("tab_in_value_forwarded", ("x-v", "a\tb"), expect=200, forward=fwd("tab_in_value_forwarded")),
    # ---- pseudo-headers
    pseudo("pseudo_after_regular", M_GET, S_HTTP, ("x-a", "1"), A_OK, P("/c/pseudo_after_regular")),
    pseudo("duplicate_method", M_GET, M_GET, S_HTTP, A_OK, P("/c/duplicate_method")),
    pseudo("duplicate_scheme", M_GET, S_HTTP, S_HTTP, A_OK, P("/c/duplicate_scheme")),
    pseudo("duplicate_authority", M_GET, S_HTTP, A_OK, A_OK, P("/c/duplicate_authority")),
    pseudo("duplicate_path", M_GET, S_HTTP, A_OK, P("/c/duplicate_path"), P("/c/other")),
    pseudo("missing_method", S_HTTP, A_OK, P("/c/missing_method")),
    pseudo("missing_scheme", M_GET, A_OK, P("/c/missing_scheme")),
    pseudo("missing_path", M_GET, S_HTTP, A_OK),
    pseudo("missing_authority_and_host", M_GET, S_HTTP, P("/c/missing_authority_and_host")),
    pseudo("unknown_pseudo_foo", M_GET, S_HTTP, A_OK, P("/c/unknown_pseudo_foo"), (":foo", "bar")),
    pseudo("status_pseudo_in_request", M_GET, S_HTTP, A_OK, P("/c/status_pseudo_in_request"),
           (":status", "200")),
    pseudo("protocol_pseudo_not_enabled", M_GET, S_HTTP, A_OK, P("/c/protocol_pseudo_not_enabled"),
           (":protocol", "websocket")),
    pseudo("scheme_empty", M_GET, (":scheme", ""), A_OK, P("/c/scheme_empty")),
    # ---- :path
    pseudo("path_empty", M_GET, S_HTTP, A_OK, P("")),
    pseudo("path_not_origin_form", M_GET, S_HTTP, A_OK, P("c/path_not_origin_form")),
    pseudo("path_absolute_form", M_GET, S_HTTP, A_OK, P("http://evil.test/c/path_absolute_form")),
    pseudo("path_authority_form", M_GET, S_HTTP, A_OK, P("evil.test:80")),
    pseudo("path_asterisk_get", M_GET, S_HTTP, A_OK, P("*")),
    pseudo("path_space", M_GET, S_HTTP, A_OK, P("/c/a b")),
    pseudo("path_crlf_request", M_GET, S_HTTP, A_OK,
           P("/c/x HTTP/1.1\r\nHost: h2.test\r\n\r\nGET /smuggled")),
    pseudo("path_nul", M_GET, S_HTTP, A_OK, P("/c/a\x00b")),
    pseudo("path_tab", M_GET, S_HTTP, A_OK, P("/c/a\tb")),
    pseudo("path_del", M_GET, S_HTTP, A_OK, P("/c/a\x7fb")),
    pseudo("path_non_ascii", M_GET, S_HTTP, A_OK, (b":path", b"/c/path_non_ascii\xc3\xa9"),
           expect=(RST, 400)),
    pseudo("path_over_max_request_line_414", M_GET, S_HTTP, A_OK, P("/" + "a" * (MAX_REQUEST_LINE + 100)),
           expect=414),
    pseudo("path_over_max_header_size_431", M_GET, S_HTTP, A_OK, P("/" + "a" * (MAX_HEADER_SIZE + 100)),
           expect=431),
    pseudo("options_asterisk_forwarded", (":method", "OPTIONS"), S_HTTP, A_OK, P("*"), expect=200,
           forward=("OPTIONS", "*", b"")),
    # ---- :authority and Host
    C("authority_userinfo", path="/c/authority_userinfo", fields=[
        M_GET, S_HTTP, (":authority", "user@h2.test"), P("/c/authority_userinfo")], expect=400),
    C("authority_userinfo_password", fields=[
        M_GET, S_HTTP, (":authority", "user:pw@h2.test"), P("/c/authority_userinfo_password")], expect=400),
    C("authority_space", fields=[M_GET, S_HTTP, (":authority", "h2.test evil.test"), P("/c/x")]),
    C("authority_crlf", fields=[M_GET, S_HTTP, (":authority", "h2.test\r\nX-Injected: 1"), P("/c/x")]),
    C("authority_slash", fields=[M_GET, S_HTTP, (":authority", "h2.test/evil"), P("/c/x")]),
    C("authority_backslash", fields=[M_GET, S_HTTP, (":authority", "h2.test\\evil"), P("/c/x")]),
    C("authority_empty", fields=[M_GET, S_HTTP, (":authority", ""), P("/c/x")]),
    C("authority_comma_list", fields=[M_GET, S_HTTP, (":authority", "h2.test,evil.test"), P("/c/x")],
      expect=400),
    C("authority_bad_port", fields=[M_GET, S_HTTP, (":authority", "h2.test:80x"), P("/c/x")],
      expect=400),
    C("host_authority_mismatch", ("host", "evil.test"), expect=400),
    C("host_authority_port_mismatch", ("host", "h2.test:8080"), expect=400),
    C("two_host_headers_same", ("host", AUTH), ("host", AUTH)),
    C("two_host_headers_no_authority", fields=[
        M_GET, S_HTTP, P("/c/x"), ("host", "h2.test"), ("host", "evil.test")]),
    C("host_only_userinfo", fields=[M_GET, S_HTTP, P("/c/x"), ("host", "h2.test@evil.test")], expect=400),
    C("host_only_bad_port", fields=[M_GET, S_HTTP, P("/c/x"), ("host", "h2.test:80x")], expect=400),
    C("host_only_space", fields=[M_GET, S_HTTP, P("/c/x"), ("host", "h2.test evil.test")]),
    C("host_only_comma_list", fields=[M_GET, S_HTTP, P("/c/x"), ("host", "h2.test, evil.test")]),
    C("host_only_slash", fields=[M_GET, S_HTTP, P("/c/x"), ("host", "h2.test/evil")]),
    C("host_only_backslash", fields=[M_GET, S_HTTP, P("/c/x"), ("host", "h2.test\\evil")]),
    C("host_only_empty", fields=[M_GET, S_HTTP, P("/c/x"), ("host", "")]),
    C("host_only_forwarded", fields=[M_GET, S_HTTP, P("/c/host_only_forwarded"), ("host", AUTH)],
      expect=200, forward=fwd("host_only_forwarded")),
    C("host_authority_differ_in_case_forwarded", ("host", "H2.TEST"), expect=200,
      forward=fwd("host_authority_differ_in_case_forwarded")),
    # ---- methods
    C("method_lowercase_501", method="get", expect=501),
    C("method_unknown_501", method="FOO", expect=501),
    C("method_bad_char", method="G(T"),
    C("method_crlf_request", method="GET /smuggled HTTP/1.1\r\nHost: h2.test\r\n\r\nGET"),
    pseudo("connect_with_scheme_and_path", (":method", "CONNECT"), S_HTTP, A_OK, P("/c/x")),
    pseudo("connect_501", (":method", "CONNECT"), (":authority", "h2.test:443"), expect=501),
    # ---- limits
    C("too_many_headers_431", *[("x-n%d" % i, "v") for i in range(MAX_HEADERS + 5)], expect=431),
    C("huge_header_count_431", *([("x", "")] * 10000), expect=431),
    C("header_over_max_header_size_431", ("x-big", "v" * (MAX_HEADER_SIZE + 100)), expect=431),
    C("headers_total_over_max_header_size_431", *[("x-h%d" % i, "v" * 400) for i in range(12)],
      expect=431),
    # Past what nghttp2's HPACK decoder takes for one field (64 KiB): the
    # connection ends, GOAWAY COMPRESSION_ERROR (RFC 9113 4.3: a header block
    # that cannot be decoded is a connection error); a new one serves.
    C("header_field_beyond_hpack_limit_goaway", ("x-big", "v" * 100000),
      expect=("goaway", COMPRESSION_ERROR)),
    # ---- trailers (dropped as over HTTP/1.1; malformed ones reset the stream)
    C("trailer_forwarded_without_trailers", method="POST", body=b"hello", trailers=[("x-t", "1")],
      expect=200, forward=fwd("trailer_forwarded_without_trailers", "POST", b"hello")),
    C("trailer_content_length_dropped", method="POST", body=b"hello", trailers=[("content-length", "50")]),
    C("trailer_crlf_in_value", method="POST", body=b"hello",
      trailers=[("x-t", "a\r\nGET /smuggled HTTP/1.1")]),
    C("trailer_pseudo_header", method="POST", body=b"hello", trailers=[(":path", "/smuggled")]),
    C("trailer_transfer_encoding", method="POST", body=b"hello",
      trailers=[("transfer-encoding", "chunked")]),
    # ---- headers_with_underscores, per listener
    C("underscore_name_allow", ("x_custom", "1"), expect=200, forward=fwd("underscore_name_allow")),
    C("underscore_name_drop", ("x_custom", "1"), ("x-keep", "1"), listener="drop", expect=200,
      forward=fwd("underscore_name_drop"),
      head=b"GET /c/underscore_name_drop HTTP/1.1\r\nx-keep: 1\r\nHost: h2.test\r\n"
           b"X-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n"),
    C("underscore_name_reject", ("x_custom", "1"), listener="reject", expect=400),
    C("transfer_encoding_underscore_drop", ("transfer_encoding", "chunked"), listener="drop",
      method="POST", body=b"0\r\n\r\n", expect=400),
    C("transfer_encoding_underscore_reject", ("transfer_encoding", "chunked"), listener="reject",
      method="POST", body=b"0\r\n\r\n", expect=400),
    C("transfer_encoding_underscore_trusted", ("transfer_encoding", "chunked"), listener="trusted",
      method="POST", body=b"0\r\n\r\n", expect=400),
    C("content_length_underscore_drop", ("content_length", "5"), listener="drop", method="POST",
      body=b"hello", expect=400),
    # ---- the same H2.CL and trailer shapes with the body held for inspection
    # (up to 16 bytes): the body is complete before the head goes on
    C("inspect_cl_shorter_than_data", ("content-length", "5"), method="POST", body=b"01234" + SMUGGLED,
      listener="inspect"),
    C("inspect_cl_longer_than_data", ("content-length", "10"), method="POST", body=b"01234",
      listener="inspect"),
    C("inspect_cl_zero_with_data", ("content-length", "0"), method="POST", body=SMUGGLED,
      listener="inspect"),
    C("inspect_te_chunked_with_chunked_body", ("transfer-encoding", "chunked"), method="POST",
      body=b"0\r\n\r\n" + SMUGGLED, listener="inspect"),
    C("inspect_trailer_crlf_in_value", method="POST", body=b"hello",
      trailers=[("x-t", "a\r\nGET /smuggled HTTP/1.1")], listener="inspect"),
    # ---- over TLS (h2 by ALPN): a few of the above
    C("tls_te_chunked_with_chunked_body", ("transfer-encoding", "chunked"), method="POST",
      body=b"0\r\n\r\n" + SMUGGLED, listener="tls"),
    C("tls_crlf_request_in_value", ("x-v", "a\r\nGET /smuggled HTTP/1.1\r\nHost: h2.test\r\n\r\n"),
      listener="tls"),
    C("tls_host_authority_mismatch", ("host", "evil.test"), listener="tls", expect=400),
    C("tls_uppercase_name", ("X-Upper", "1"), listener="tls"),
    C("tls_cl_shorter_than_data", ("content-length", "5"), method="POST", body=b"01234" + SMUGGLED,
      listener="tls"),
]

# ---- client identity (docs/client-identity.md): what the backend receives, exactly

IDENTITY = [("x-forwarded-for", "1.2.3.4"), ("x_forwarded_for", "5.6.7.8"),
            ("x-forwarded_for", "5.6.7.9"), ("forwarded", "for=1.1.1.1"), ("x-real-ip", "9.9.9.9"),
            ("x_real_ip", "9.9.9.8"), ("proxy-client-ip", "8.8.8.8"), ("proxy_client_ip", "8.8.8.7"),
            ("wl-proxy-ssl", "true"), ("wl_proxy_ssl", "true"), ("wl-proxy-client-ip", "7.7.7.7"),
            ("x-weblogic-keepalivesecs", "1"), ("x_weblogic_x", "1"), ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.test"), ("x-forwarded-port", "443"),
            ("x-forwarded-anything", "x"), ("x-keep", "yes")]


def untrusted_head(name, proto="http"):
    return (b"GET /c/%s HTTP/1.1\r\nx-keep: yes\r\nHost: h2.test\r\nX-Forwarded-For: 127.0.0.1\r\n"
            b"X-Forwarded-Proto: %s\r\n\r\n" % (name.encode(), proto.encode()))


def trusted_head(name):
    kept = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in IDENTITY[1:])
    # the forwarder's X-Forwarded-For becomes one line with sluice's element;
    # its X-Forwarded-Proto is kept, so sluice adds none
    return (b"GET /c/%s HTTP/1.1\r\n%sHost: h2.test\r\nX-Forwarded-For: 1.2.3.4, 127.0.0.1\r\n\r\n"
            % (name.encode(), kept))


IDENTITY_CASES = [
    C("identity_untrusted_stripped", *IDENTITY, expect=200, forward=fwd("identity_untrusted_stripped"),
      head=untrusted_head("identity_untrusted_stripped")),
    C("identity_untrusted_stripped_drop", *IDENTITY, listener="drop", expect=200,
      forward=fwd("identity_untrusted_stripped_drop"),
      head=untrusted_head("identity_untrusted_stripped_drop")),
    # reject refuses every name with an underscore, identity ones included
    C("identity_untrusted_reject_400", *IDENTITY, listener="reject", expect=400),
    C("identity_untrusted_stripped_tls", *IDENTITY, listener="tls", expect=200,
      forward=fwd("identity_untrusted_stripped_tls"),
      head=untrusted_head("identity_untrusted_stripped_tls", "https")),
    C("identity_trusted_kept", *IDENTITY, listener="trusted", expect=200,
      forward=fwd("identity_trusted_kept"), head=trusted_head("identity_trusted_kept")),
    # a name that is only the prefix ("x-forwarded-") is not an identity header
    C("identity_bare_prefixes_kept", ("x-forwarded-", "a"), ("wl-proxy-", "b"), expect=200,
      forward=fwd("identity_bare_prefixes_kept"),
      head=b"GET /c/identity_bare_prefixes_kept HTTP/1.1\r\nx-forwarded-: a\r\nwl-proxy-: b\r\n"
           b"Host: h2.test\r\nX-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Proto: http\r\n\r\n"),
]

ALL_CASES = H2C_CASES + IDENTITY_CASES
assert len({c.name for c in ALL_CASES}) == len(ALL_CASES), "duplicate case names"


# --------------------------------------------------------------------------
# the runner

def _snapshot(rb):
    with rb.lock:
        return {c.index: len(c.data) for c in rb.conns}


def _deltas(rb, snap):
    with rb.lock:
        conns = list(rb.conns)
    out = []
    for c in conns:
        with c.lock:
            d = bytes(c.data[snap.get(c.index, 0):])
        if d:
            out.append((c, d))
    return out


def client(rig, listener, **kw):
    return H2Client(rig.ports[listener], tls=listener == "tls", validate=False, **kw)


def send_case(c, case):
    """The case's frames, in one write."""
    sid = c.conn.get_next_available_stream_id()
    c.streams[sid] = StreamRecord()
    last = case.body is None and case.trailers is None
    c.conn.send_headers(sid, case.fields, end_stream=last)
    if case.body is not None:
        c.conn.send_data(sid, case.body, end_stream=case.trailers is None)
    if case.trailers is not None:
        c.conn.send_headers(sid, case.trailers, end_stream=True)
    c.flush()
    return sid


def describe(c, rec):
    return "status=%s reset=%s data=%r goaway=%s closed=%s" % (
        rec.status, rec.reset, bytes(rec.data)[:120], c.goaway and c.goaway.error_code, c.closed)


def outcome_ok(c, rec, want):
    if want == RST:
        return rec.reset == PROTOCOL_ERROR and rec.headers is None
    if isinstance(want, tuple) and want and want[0] == "goaway":
        return c.goaway is not None and c.goaway.error_code == want[1] and not rec.done
    if isinstance(want, tuple):
        return any(outcome_ok(c, rec, w) for w in want)
    # a final status, and the stream ended (a RST_STREAM NO_ERROR after a
    # complete response is allowed, RFC 9113 8.1)
    return rec.status == want and rec.ended and rec.reset in (None, 0)


def assert_local_error(rec):
    """sluice's own error answer: text/plain, a length that matches."""
    if rec.status is None or rec.status < 400:
        return
    assert (rec.header("content-type") or "").startswith("text/plain"), rec.headers
    assert rec.header("content-length") == str(len(rec.data)), rec.headers
    assert rec.header("x-target") is None, "an answer from the backend, not from sluice"


def head_of(data, request_line):
    i = data.find(request_line)
    if i < 0:
        return None
    return data[i:data.index(b"\r\n\r\n", i) + 4]


def check_backend(rig, case, snap, after_target):
    """Nothing of the case at the backend but what it must forward; all of
    it in sluice's normalised form; an incomplete prefix only where the case
    allows one, on a backend connection sluice closes."""
    time.sleep(0.1)  # grace for a late (wrong) forward: absence cannot be polled
    deltas = _deltas(rig.rb, snap)
    expected = [("GET", after_target, b"")] + ([case.forward] if case.forward else [])
    got, incomplete = [], []
    for conn, data in deltas:
        qs, tail = parse_strict(data)
        got += qs
        if tail:
            incomplete.append((conn, tail))
    assert sorted(q.key() for q in got) == sorted(expected), \
        "backend received %r, expected %r; bytes: %r" % (got, expected, [d for _, d in deltas])
    if incomplete:
        assert case.partial, "incomplete request at the backend: %r" % incomplete[0][1][:300]
        for conn, _ in incomplete:
            H.wait_for(lambda: conn.closed_by_peer, 3, what="sluice closing the backend connection")
    if not (case.forward and b"/smuggled" in case.forward[2]):
        for _, data in deltas:
            assert b"/smuggled" not in data, data
    if case.head is not None:
        line = b"%s %s HTTP/1.1\r\n" % (case.forward[0].encode(), case.forward[1].encode())
        heads = [head_of(d, line) for _, d in deltas if head_of(d, line)]
        assert heads == [case.head], heads
    return deltas


def run_case(rig, case):
    c = client(rig, case.listener)
    try:
        warm = c.get("/warm/" + case.name, scheme=case.scheme)
        assert warm.status == 200
        snap = _snapshot(rig.rb)
        sid = send_case(c, case)
        rec = c.wait(sid, timeout=6)[0]
        assert outcome_ok(c, rec, case.expect), "%s: want %r, got %s" % (case.name, case.expect,
                                                                          describe(c, rec))
        assert_local_error(rec)
        after_target = "/after/" + case.name
        if c.goaway is not None:
            # a connection error: that connection is done; a new one serves
            c.close()
            c = client(rig, case.listener)
        after = c.get(after_target, scheme=case.scheme)
        assert after.status == 200 and after.header("x-target") == after_target, describe(c, after)
        assert c.goaway is None
    finally:
        c.close()
    check_backend(rig, case, snap, after_target)
    assert sorted(rig.s.worker_pids()) == rig.workers, "a worker died"
    return rec


@pytest.mark.parametrize("case", [c.param() for c in ALL_CASES])
def test_h2_case(rig, case):
    run_case(rig, case)


# --------------------------------------------------------------------------
# the rest: cases the table cannot say

def test_identity_same_bytes_as_http11(rig):
    """The identity headers of an untrusted client, over HTTP/2 and over
    HTTP/1.1 on the same listener (h2c takes both): the backend receives the
    very same head."""
    name = "identity_h1_h2_same"
    snap = _snapshot(rig.rb)
    c = client(rig, "h2c")
    try:
        r = c.get("/c/" + name, headers=IDENTITY)
        assert r.status == 200
    finally:
        c.close()
    h1 = (b"GET /c/%s HTTP/1.1\r\n" % name.encode()
          + b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in IDENTITY)
          + b"Host: h2.test\r\n\r\n")
    with H.Client(rig.ports["h2c"], timeout=6) as h:
        h.send(h1)
        r = h.read_response()
    assert r.status == 200 and r.header("x-target") == "/c/" + name
    H.wait_for(lambda: len([d for _, d in _deltas(rig.rb, snap)
                            if head_of(d, b"GET /c/%s " % name.encode())]) >= 1, 3, what="both heads")
    heads = []
    for _, d in _deltas(rig.rb, snap):
        i = 0
        while True:
            j = d.find(b"GET /c/%s HTTP/1.1\r\n" % name.encode(), i)
            if j < 0:
                break
            heads.append(d[j:d.index(b"\r\n\r\n", j) + 4])
            i = j + 1
    assert heads == [untrusted_head(name)] * 2, heads


def test_cl_longer_data_split_never_reaches_backend(rig):
    """H2.CL across reads: the head and the declared 5 bytes went on (sluice
    streams; it cannot know more will come), then DATA past content-length
    carrying a request: the stream is reset (PROTOCOL_ERROR) and not a byte
    of the excess reaches the backend."""
    HOLD.clear()
    name = "cl_longer_data_split"
    target = "/hold/" + name
    c = client(rig, "h2c")
    try:
        assert c.get("/warm/" + name).status == 200
        snap = _snapshot(rig.rb)
        sid = c.conn.get_next_available_stream_id()
        c.streams[sid] = StreamRecord()
        c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", AUTH),
                                  (":path", target), ("content-length", "5")])
        c.conn.send_data(sid, b"01234")
        c.flush()
        H.wait_for(lambda: any(d.endswith(b"\r\n\r\n01234") for _, d in _deltas(rig.rb, snap)), 3,
                   what="the head and 5 bytes at the backend")
        c.conn.send_data(sid, SMUGGLED, end_stream=True)
        c.flush()
        rec = c.wait(sid)[0]
        assert rec.reset == PROTOCOL_ERROR and rec.headers is None, describe(c, rec)
        HOLD.set()
        after = c.get("/after/" + name)
        assert after.status == 200 and c.goaway is None
    finally:
        HOLD.set()
        c.close()
    time.sleep(0.1)
    got = []
    for conn, data in _deltas(rig.rb, snap):
        assert b"smuggled" not in data, data
        qs, tail = parse_strict(data)
        assert tail == b"", tail
        got += [q.key() for q in qs]
    assert sorted(got) == sorted([("POST", target, b"01234"), ("GET", "/after/" + name, b"")])


def test_cl_shorter_data_split_never_completes(rig):
    """H2.CL across reads, the other way: the head (content-length: 10) went
    on, then DATA of 5 bytes ends the stream: reset (PROTOCOL_ERROR), and the
    backend's incomplete request never completes -- sluice closes that
    backend connection."""
    name = "cl_shorter_data_split"
    c = client(rig, "h2c")
    try:
        assert c.get("/warm/" + name).status == 200
        snap = _snapshot(rig.rb)
        sid = c.conn.get_next_available_stream_id()
        c.streams[sid] = StreamRecord()
        c.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", AUTH),
                                  (":path", "/c/" + name), ("content-length", "10")])
        c.flush()
        H.wait_for(lambda: any(b"POST /c/%s " % name.encode() in d for _, d in _deltas(rig.rb, snap)),
                   3, what="the head at the backend")
        c.conn.send_data(sid, b"01234", end_stream=True)
        c.flush()
        rec = c.wait(sid)[0]
        assert rec.reset == PROTOCOL_ERROR and rec.headers is None, describe(c, rec)
        assert c.get("/after/" + name).status == 200 and c.goaway is None
    finally:
        c.close()
    time.sleep(0.1)
    got = []
    for conn, data in _deltas(rig.rb, snap):
        qs, tail = parse_strict(data)
        got += [q.key() for q in qs]
        if tail:
            assert tail.startswith(b"POST /c/%s " % name.encode()), tail
            H.wait_for(lambda: conn.closed_by_peer, 3, what="sluice closing the backend connection")
    assert got == [("GET", "/after/" + name, b"")], got


def test_unknown_method_logged_as_sent(rig):
    """The 501 for a method sluice does not know: the access log line must
    not name another method. (:path comes first so that the line has the
    target: a field after the bad :method is not read.)"""
    c = client(rig, "h2c")
    try:
        case = Case("method_for_log", fields=[(":path", "/c/method_for_log"), (":method", "FOO"),
                                              (":scheme", "http"), (":authority", AUTH)], expect=501)
        rec = c.wait(send_case(c, case))[0]
        assert rec.status == 501, describe(c, rec)
    finally:
        c.close()
    e = rig.s.wait_access_entry(lambda e: e["target"] == "/c/method_for_log")
    assert e["status"] == "501" and e["reason"] == "method_not_implemented" and e["proto"] == "HTTP/2.0"
    assert e["method"] in ("FOO", "-"), e


def test_streams_before_and_after_share_a_connection(rig):
    """Many malformed streams on one connection, interleaved with good ones:
    each bad one is reset or refused alone, the good ones are served, and
    only the good ones reach the backend."""
    bad = [c for c in H2C_CASES if c.listener == "h2c" and c.expect == RST and c.body is None
           and c.trailers is None and not c.xfail][:20]
    snap = _snapshot(rig.rb)
    c = client(rig, "h2c")
    try:
        pairs = []
        for case in bad:
            sid = send_case(c, case)
            ok = c.request("/mix/" + case.name)
            pairs.append((case, sid, ok))
        for case, sid, ok in pairs:
            rb, rok = c.wait(sid, ok)
            assert rb.reset == PROTOCOL_ERROR, (case.name, describe(c, rb))
            assert rok.status == 200, (case.name, describe(c, rok))
        assert c.goaway is None
    finally:
        c.close()
    time.sleep(0.1)
    got = []
    for _, data in _deltas(rig.rb, snap):
        qs, tail = parse_strict(data)
        assert tail == b""
        got += [q.target for q in qs]
    assert sorted(got) == sorted("/mix/" + case.name for case in bad)
    assert sorted(rig.s.worker_pids()) == rig.workers
