#!/usr/bin/env python3
"""Seeds of fuzz_h2 (tests/fuzz/corpus/fuzz_h2/): valid HTTP/2 exchanges as a
client with prior knowledge sends them.

Each seed is fuzz_h2's input: one option byte (bit 0: the proxied listener;
bits 1-3: the backend's canned answer, see fuzz_h2.c), then the client's
bytes: the connection preface, SETTINGS, then HEADERS (HPACK), CONTINUATION,
DATA, RST_STREAM, WINDOW_UPDATE, PING, PRIORITY, GOAWAY.

Header blocks are hand-encoded as HPACK literals without indexing and with a
literal (not indexed) name, no Huffman, so the fuzzer sees every name and
value as plain bytes it can mutate (one seed uses incremental indexing and the
dynamic table on purpose). Frames come from hyperframe, which the `h2`
library is built on, and every seed is checked by feeding it to an `h2`
server-side connection: none may raise a protocol error.

    python3 tests/fuzz/corpus/make_h2_seeds.py    # rewrites corpus/fuzz_h2/
"""
import os
import sys

import h2.config
import h2.connection
import h2.events
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame, PingFrame,
                              PriorityFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_h2")

# fuzz_h2.c's canned backend answers (option bits 1-3).
A_OK, A_CHUNKED, A_204, A_INTERIM, A_BIG, A_304, A_HOP, A_503 = range(8)


def hpack_int(value, prefix_bits, first):
    """RFC 7541 5.1 integer with FIRST's high bits as the pattern."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7f) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name, value, index=False):
    """Literal field, new (literal) name, no Huffman: without indexing
    (0000 prefix), or with incremental indexing (01 prefix)."""
    name = name.encode() if isinstance(name, str) else name
    value = value.encode() if isinstance(value, str) else value
    head = b"\x40" if index else b"\x00"
    return head + hpack_int(len(name), 7, 0) + name + hpack_int(len(value), 7, 0) + value


def block(fields):
    return b"".join(literal(n, v) for n, v in fields)


def request(method="GET", path="/", authority="example.com", extra=(), scheme="http"):
    fields = [(":method", method), (":scheme", scheme), (":path", path)]
    if authority is not None:
        fields.append((":authority", authority))
    return block(fields + list(extra))


def settings(**kw):
    f = SettingsFrame(0)
    names = {
        "header_table_size": SettingsFrame.HEADER_TABLE_SIZE,
        "enable_push": SettingsFrame.ENABLE_PUSH,
        "max_concurrent_streams": SettingsFrame.MAX_CONCURRENT_STREAMS,
        "initial_window_size": SettingsFrame.INITIAL_WINDOW_SIZE,
        "max_frame_size": SettingsFrame.MAX_FRAME_SIZE,
        "max_header_list_size": SettingsFrame.MAX_HEADER_LIST_SIZE,
    }
    for k, v in kw.items():
        f.settings[names[k]] = v
    return f.serialize()


def settings_ack():
    return SettingsFrame(0, flags=["ACK"]).serialize()


def headers(sid, data, end_stream=True, end_headers=True, pad=None, priority=None):
    flags = []
    if end_stream:
        flags.append("END_STREAM")
    if end_headers:
        flags.append("END_HEADERS")
    f = HeadersFrame(sid, data=data, flags=flags)
    if pad is not None:
        f.flags.add("PADDED")
        f.pad_length = pad
    if priority is not None:
        f.flags.add("PRIORITY")
        f.depends_on, f.stream_weight, f.exclusive = priority
    return f.serialize()


def continuation(sid, data, end_headers):
    return ContinuationFrame(sid, data=data, flags=["END_HEADERS"] if end_headers else []).serialize()


def data(sid, payload, end_stream=False, pad=None):
    f = DataFrame(sid, data=payload, flags=["END_STREAM"] if end_stream else [])
    if pad is not None:
        f.flags.add("PADDED")
        f.pad_length = pad
    return f.serialize()


def rst(sid, code=8):
    return RstStreamFrame(sid, error_code=code).serialize()


def window_update(sid, inc):
    return WindowUpdateFrame(sid, window_increment=inc).serialize()


def ping(payload=b"sluice!!", ack=False):
    return PingFrame(0, opaque_data=payload, flags=["ACK"] if ack else []).serialize()


def priority(sid, dep, weight, excl=False):
    return PriorityFrame(sid, depends_on=dep, stream_weight=weight, exclusive=excl).serialize()


def goaway(last, code=0, debug=b""):
    return GoAwayFrame(0, last_stream_id=last, error_code=code, additional_data=debug).serialize()


def opt(answer, proxied=False):
    return bytes([(answer << 1) | (1 if proxied else 0)])


def seeds():
    s = {}
    hello = b"hello world"
    s["get"] = opt(A_OK) + PREFACE + settings() + headers(1, request())
    s["get-proxied"] = opt(A_OK, proxied=True) + PREFACE + settings() + headers(
        1, request(path="/p?q=1", extra=[("x-forwarded-for", "192.0.2.7"), ("accept", "*/*")]))
    s["post-content-length"] = opt(A_INTERIM) + PREFACE + settings(enable_push=0) + headers(
        1, request("POST", "/upload", extra=[("content-length", str(len(hello))),
                                             ("content-type", "text/plain")]),
        end_stream=False) + data(1, hello, end_stream=True)
    s["post-no-length-chunked"] = opt(A_CHUNKED) + PREFACE + settings() + headers(
        1, request("PUT", "/put"), end_stream=False) + data(1, b"part one, ") + data(
        1, b"part two", end_stream=True, pad=4)
    s["continuation"] = opt(A_OK) + PREFACE + settings() + headers(
        1, request(extra=[("user-agent", "fuzz/1.0")]), end_stream=True, end_headers=False) + continuation(
        1, block([("cookie", "a=1"), ("cookie", "b=2")]), False) + continuation(
        1, block([("accept", "text/html"), ("accept-language", "en")]), True)
    s["three-streams-ping-window"] = opt(A_BIG) + PREFACE + settings(initial_window_size=1024) + headers(
        1, request()) + headers(3, request("HEAD", "/h")) + window_update(0, 1 << 20) + ping() + headers(
        5, request("OPTIONS", "*")) + window_update(1, 100000) + window_update(5, 100000) + settings_ack()
    s["reset-then-get"] = opt(A_OK) + PREFACE + settings() + headers(
        1, request("POST", "/slow", extra=[("content-length", "100")]), end_stream=False) + data(
        1, b"0123456789") + rst(1, 8) + headers(3, request(path="/after"))
    s["settings-small-window-big-answer"] = opt(A_BIG) + PREFACE + settings(
        header_table_size=0, enable_push=0, max_concurrent_streams=10, initial_window_size=10,
        max_frame_size=16384, max_header_list_size=8192) + settings_ack() + headers(
        1, request(path="/big")) + window_update(1, 30000)
    s["goaway"] = opt(A_204) + PREFACE + settings() + headers(1, request(path="/x")) + ping(
        b"\x00" * 8) + goaway(0)
    s["expect-continue"] = opt(A_503) + PREFACE + settings() + headers(
        1, request("POST", "/e", extra=[("expect", "100-continue"), ("content-length", "4")]),
        end_stream=False) + data(1, b"body", end_stream=True)
    s["host-header-padded-priority"] = opt(A_304) + PREFACE + settings() + priority(1, 0, 16) + headers(
        1, request(authority=None, extra=[("host", "example.org:8080"), ("if-none-match", '"x"')]),
        pad=8, priority=(0, 200, False)) + headers(3, request(path="/two"), priority=(1, 16, True))
    s["trailers"] = opt(A_HOP) + PREFACE + settings() + headers(
        1, request("POST", "/t", extra=[("te", "trailers")]), end_stream=False) + data(
        1, b"abc") + headers(1, block([("x-checksum", "123")]), end_stream=True)
    s["dynamic-table"] = opt(A_OK) + PREFACE + settings() + headers(
        1, literal(":method", "GET") + literal(":scheme", "http") + literal(":path", "/a", index=True) +
        literal(":authority", "example.com", index=True) + literal("x-token", "abc", index=True)) + headers(
        3, literal(":method", "GET") + literal(":scheme", "http") + b"\xc0\xbf\xbe")
    return s


def check(name, raw):
    """An h2 server must take the client's bytes without a protocol error
    (h2 raises one; a GOAWAY with an error code counts too)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, validate_inbound_headers=True))
    conn.initiate_connection()
    events = conn.receive_data(raw[1:])
    bad = [e for e in events if isinstance(e, h2.events.ConnectionTerminated) and e.error_code != 0]
    if bad:
        sys.exit(f"{name}: the h2 library refused the seed: {bad}")
    return sum(isinstance(e, h2.events.RequestReceived) for e in events)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, raw in seeds().items():
        n = check(name, raw)
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(raw)
        print(f"{name}: {len(raw)} bytes, {n} request(s)")


if __name__ == "__main__":
    main()
