"""Small blocking network helpers for launchers: free ports on 127.0.0.1 and one-shot HTTP calls."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

__all__ = ["HOST", "free_port", "free_ports", "http_status"]

HOST = "127.0.0.1"


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (bind port 0, read it back, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (sockets held open together so the kernel cannot repeat one)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def http_status(
    url: str, method: str = "GET", body: bytes | None = None, timeout_s: float = 2.0
) -> tuple[int, bytes]:
    """(status, body) of one request; (0, b"") when nothing answers."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, b""
