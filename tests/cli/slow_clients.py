#!/usr/bin/env python3
"""Slow HTTP clients (slowloris) against a local dashboard, for test_dashboard.sh.

slow_clients.py many PORT N SECONDS TOKEN
    Holds N connections that send a request's headers a byte at a time and
    never finish them, reopening (at most 20 per tick) those the server
    closes.  Meanwhile, once a second, sends one whole request with the
    bearer TOKEN.  Prints one line per whole request: "ok STATUS MS" or
    "fail WHY MS", then "slow opened K" (connections opened in all).

slow_clients.py one PORT LIMIT
    One connection that sends a header byte every half second; prints
    "closed S" (seconds until the server closed it) or "open LIMIT" when it
    is still open after LIMIT seconds.
"""
import socket
import sys
import time

HEAD = b"GET /api/queues HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def slow(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.setblocking(False)
    s.send(HEAD)
    return s


def alive(s):
    """Sends one more byte of the never-ending header; False once closed."""
    try:
        if s.recv(1, socket.MSG_PEEK) is not None:
            return False  # an answer (an error page) or the end: closed
    except BlockingIOError:
        pass
    except OSError:
        return False
    try:
        s.send(b"a")
        return True
    except OSError:
        return False


def whole(port, token):
    """One complete request; (True, status) or (False, why)."""
    req = ("GET /api/queues HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
           "Connection: close\r\n\r\n" % token).encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.settimeout(5)
            s.sendall(req)
            line = s.makefile("rb").readline().decode(errors="replace").split()
            if len(line) < 2:
                return False, "no-status-line"
            return True, line[1]
    except OSError as e:
        return False, type(e).__name__


def many(port, n, seconds, token):
    held, opened = [], 0
    for _ in range(n):
        try:
            held.append(slow(port))
            opened += 1
        except OSError:
            break
    end = time.monotonic() + seconds
    next_probe = time.monotonic() + 1
    while time.monotonic() < end:
        still = [s for s in held if alive(s)]
        for s in held:
            if s not in still:
                s.close()
        held = still
        for _ in range(min(20, n - len(held))):
            try:
                held.append(slow(port))
                opened += 1
            except OSError:
                break
        if time.monotonic() >= next_probe:
            t0 = time.monotonic()
            ok, what = whole(port, token)
            ms = int((time.monotonic() - t0) * 1000)
            print("%s %s %d" % ("ok" if ok else "fail", what, ms), flush=True)
            next_probe = time.monotonic() + 1
        time.sleep(0.5)
    print("slow opened %d" % opened, flush=True)
    for s in held:
        s.close()


def one(port, limit):
    s = slow(port)
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if not alive(s):
            print("closed %d" % int(time.monotonic() - t0))
            return
        time.sleep(0.5)
    print("open %d" % limit)


if __name__ == "__main__":
    if sys.argv[1] == "many":
        many(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        one(int(sys.argv[2]), float(sys.argv[3]))
