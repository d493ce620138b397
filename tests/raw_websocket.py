"""A WebSocket client on a bare socket, for tests that must send what no client library
sends (unmasked frames, half messages) or read nothing at all."""

from __future__ import annotations

import base64
import os
import socket
import struct

from provider_sdk_emulators.kit.websocket import accept_key

__all__ = ["frame", "handshake", "read_frame"]


def handshake(port: int, path: str) -> socket.socket:
    """A socket to 127.0.0.1:``port`` whose handshake for ``path`` the server accepted."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                 f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                 "Sec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    assert f"sec-websocket-accept: {accept_key(key)}".encode().lower() in head.lower()
    return sock


def frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True) -> bytes:
    """One frame, masked as a client's must be unless ``masked`` is false."""
    mask = os.urandom(4) if masked else b""
    if masked:
        repeated = (mask * (len(payload) // 4 + 1))[:len(payload)]
        payload = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
            len(payload), "big")
    size = len(payload)
    first, masked_bit = (0x80 if fin else 0) | opcode, 0x80 if masked else 0
    if size < 126:
        head = struct.pack(">BB", first, masked_bit | size)
    elif size < 1 << 16:
        head = struct.pack(">BBH", first, masked_bit | 126, size)
    else:
        head = struct.pack(">BBQ", first, masked_bit | 127, size)
    return head + mask + payload


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """The next frame from the server: its opcode and payload."""
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the connection closed"
            data += chunk
        return data

    first, size = exactly(2)
    if size == 126:
        size = struct.unpack(">H", exactly(2))[0]
    elif size == 127:
        size = struct.unpack(">Q", exactly(8))[0]
    return first & 0x0F, exactly(size)
