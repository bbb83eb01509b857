"""Reading one HTTP/1.1 request off a raw socket, for the tests' hand-written fake servers.

A fake server must read the whole request before it answers and closes: http.client sends the
headers and the body in two writes, so on a loaded machine one `recv` can return the headers alone.
A socket closed with bytes still unread makes the kernel reset the connection (RST) instead of
closing it (FIN), and the client then loses the answer it had not yet read: it reports "the
connection broke mid-response", a fault of the fake server, not of the code under test.
"""

from __future__ import annotations

import socket

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD_BYTES = 1 << 16


def read_request(conn: socket.socket) -> bytes:
    """The request's head and its Content-Length body, however the bytes arrive; b"" when the client
    hangs up first. Raises OSError (a socket timeout included) as the socket does."""
    data = b""
    while _HEAD_END not in data:
        part = conn.recv(65536)
        if not part or len(data) > _MAX_HEAD_BYTES:
            return data
        data += part
    head, _, body = data.partition(_HEAD_END)
    length = _content_length(head)
    while len(body) < length:
        part = conn.recv(65536)
        if not part:
            break
        body += part
    return head + _HEAD_END + body


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0
