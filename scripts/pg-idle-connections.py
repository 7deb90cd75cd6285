#!/usr/bin/env python3
"""Holds N idle PostgreSQL sessions open until killed.

    scripts/pg-idle-connections.py N HOST PORT USER

For scripts/bench-proxy.sh (IDLE_BACKENDS=N): a pooler's benchmark with as
many backends as sluice proxy keeps (one per client), to tell the cost of
idle backends to PostgreSQL from the cost of the proxy. Speaks just enough of
the v3 protocol for a private server with trust authentication: a startup
packet, then reads until ReadyForQuery; anything else is an error.
"""
import signal
import socket
import struct
import sys


def startup(host, port, user):
    sock = socket.create_connection((host, port))
    params = b"user\0" + user.encode() + b"\0database\0postgres\0\0"
    sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
    buf = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            sys.exit(f"{host}:{port} closed the connection during startup")
        buf += chunk
        while len(buf) >= 5:
            kind, length = buf[0:1], struct.unpack("!i", buf[1:5])[0]
            if len(buf) < 1 + length:
                break
            if kind == b"E":
                sys.exit(f"{host}:{port} refused a session: {buf[5:1 + length]!r}")
            if kind == b"R" and struct.unpack("!i", buf[5:9])[0] != 0:
                sys.exit(f"{host}:{port} asks for a password: use trust authentication")
            if kind == b"Z":
                return sock
            buf = buf[1 + length:]


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    n, host, port, user = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    sessions = [startup(host, port, user) for _ in range(n)]
    print(f"holding {len(sessions)} idle sessions on {host}:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.pause()


if __name__ == "__main__":
    main()
