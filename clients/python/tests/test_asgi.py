"""The idempotency middleware (skiplock.asgi) on FastAPI, served by uvicorn
on a real socket and called with httpx: replay, 409 with Retry-After,
422, 400 and 413; a crashed server's key taken over after the recovery
window; and, with examples/charges_app.py, a charge whose
connection dropped after its commit, retried with the same key, charges
once and answers the same response."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import httpx
import pytest

from conftest import URL, idle_in_transaction, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
BODY = b'{"amount": 1250, "currency": "usd"}'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """uvicorn serving `args` (a module:app, or a script taking --port)."""

    def __init__(self, args, log_path, **env):
        self.port = free_port()
        cmd = [sys.executable, "-m", "uvicorn", args, "--port", str(self.port),
               "--log-level", "warning"] if ":" in args else \
            [sys.executable, args, "--port", str(self.port)]
        self.log = open(log_path, "a")
        self.proc = subprocess.Popen(cmd, cwd=HERE, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, DATABASE_URL=URL,
                                              PYTHONPATH=os.path.join(HERE, "..", "src"),
                                              **env), start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_until(self._up, 20, "uvicorn to listen")

    def _up(self):
        assert self.proc.poll() is None, "uvicorn exited"
        try:
            socket.create_connection(("127.0.0.1", self.port), 0.2).close()
            return True
        except OSError:
            return False

    def post(self, path, body=BODY, key=None, **kw):
        headers = {"content-type": "application/json"}
        if key is not None:
            headers["idempotency-key"] = key
        return httpx.post(self.url + path, content=body, headers=headers, timeout=30, **kw)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def effects(db):
    db.execute("DROP TABLE IF EXISTS public.t_effects; "
               "CREATE TABLE public.t_effects (n serial PRIMARY KEY, key text, route text)")
    yield lambda key: [r[0] for r in db.execute(
        "SELECT route FROM public.t_effects WHERE key = %s ORDER BY n", [key])]
    db.execute("DROP TABLE public.t_effects")


@pytest.fixture
def server(effects, tmp_path):
    servers = []

    def start(**env):
        servers.append(Server("asgi_app:app", tmp_path / "uvicorn.log", **env))
        return servers[-1]
    yield start
    for s in servers:
        s.stop()


def key():
    return f"t-asgi-{uuid.uuid4().hex[:12]}"


def key_state(db, k):
    row = db.execute("SELECT state FROM skiplock.idempotency_keys WHERE key = %s",
                     [k]).fetchone()
    return row and row[0]


@pytest.mark.parametrize("route", ["/work", "/work-in-tx"])
def test_replay_is_the_first_response(db, server, effects, route):
    s, k = server(), key()
    first = s.post(route, key=k)
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    for _ in range(2):
        again = s.post(route, key=k)
        assert (again.status_code, again.content) == (201, first.content)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["location"] == first.headers["location"]
        assert again.headers["content-type"] == first.headers["content-type"]
    assert effects(k) == [route[1:]]  # once
    assert key_state(db, k) == "completed" and idle_in_transaction(db) == 0


def test_same_key_other_body_is_422_and_runs_nothing(db, server, effects):
    s, k = server(), key()
    assert s.post("/work", key=k).status_code == 201
    other = s.post("/work", body=b'{"amount": 1}', key=k)
    assert other.status_code == 422 and "different request" in other.json()["error"]
    assert s.post("/slow", key=k).status_code == 422  # another path is another request
    assert effects(k) == ["work"]


def test_concurrent_duplicate_is_409_with_retry_after(db, server, effects):
    s, k = server(T_SLOW="1.5"), key()
    first = []
    t = threading.Thread(target=lambda: first.append(s.post("/slow", key=k)))
    t.start()
    wait_until(lambda: key_state(db, k) == "in_progress", 10, "the first claim")
    dup = s.post("/slow", key=k)
    assert dup.status_code == 409 and dup.headers["retry-after"] == "1"
    t.join()
    assert first[0].status_code == 201
    after = s.post("/slow", key=k)
    assert (after.status_code, after.content) == (201, first[0].content)
    assert effects(k) == ["slow"]


def test_bad_requests_write_nothing(db, server, effects):
    s = server()
    before = db.execute("SELECT count(*) FROM skiplock.idempotency_keys").fetchone()[0]
    assert s.post("/work", key="k" * 256).status_code == 400
    assert s.post("/work", key="").status_code == 400
    too_big = s.post("/work", body=b'{"pad": "' + b"x" * 5000 + b'"}', key=key())
    assert too_big.status_code == 413
    assert db.execute("SELECT count(*) FROM skiplock.idempotency_keys").fetchone()[0] == before
    assert db.execute("SELECT count(*) FROM public.t_effects").fetchone()[0] == 0
    assert s.post("/work").status_code == 201  # no key: passed through
    assert httpx.get(s.url + "/plain").text == "no key needed"


def test_failures_and_unstorable_responses_release_the_key(db, server, effects):
    s, k = server(), key()
    assert s.post("/boom", key=k).status_code == 500
    assert key_state(db, k) is None  # released: the retry runs at once
    assert s.post("/boom", key=k).status_code == 500
    assert effects(k) == ["boom-attempt", "boom-attempt"]
    k2 = key()
    big = s.post("/big", key=k2)
    assert big.status_code == 200 and len(big.content) == 10000  # over the cap: not stored
    assert key_state(db, k2) is None


def test_crashed_server_key_is_taken_over_after_recovery(db, server, effects, tmp_path):
    """The server is SIGKILLed after its claim, before its effect: retries
    get 409 until the recovery window ends, then one retry does the work."""
    # a recovery window long enough for the second server to start first,
    # also on a loaded machine
    s, k = server(T_SLOW="60", T_RECOVERY="8"), key()
    threading.Thread(target=lambda: pytest.raises(httpx.HTTPError, s.post, "/slow", key=k),
                     daemon=True).start()
    wait_until(lambda: key_state(db, k) == "in_progress", 10, "the claim")
    claimed = time.monotonic()
    s.stop(signal.SIGKILL)
    s2 = server(T_RECOVERY="8")
    codes = []
    while True:
        r = s2.post("/slow", key=k)
        codes.append(r.status_code)
        if r.status_code != 409:
            break
        assert r.headers["retry-after"] == "1" and time.monotonic() - claimed < 20
        time.sleep(0.3)
    assert codes[0] == 409 and codes[-1] == 201, codes
    assert time.monotonic() - claimed > 7.5
    assert s2.post("/slow", key=k).headers["idempotent-replayed"] == "true"
    assert effects(k) == ["slow"]


def test_importing_skiplock_needs_no_starlette():
    code = ("import sys, skiplock, skiplock.asgi\n"
            "assert not any(m.split('.')[0] in ('starlette', 'fastapi') for m in sys.modules)\n")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "src")))


@pytest.fixture
def charges(db):
    db.execute("DROP TABLE IF EXISTS charges; CREATE TABLE charges (id bigserial PRIMARY KEY, "
               "amount bigint NOT NULL, currency text NOT NULL)")
    yield lambda: db.execute("SELECT id, amount, currency FROM charges").fetchall()
    db.execute("DROP TABLE charges")


def test_charge_retried_after_a_dropped_connection_charges_once(db, charges, tmp_path):
    """With examples/charges_app.py: the POST's connection is
    dropped after the charge committed, before the client read a byte; the
    retry with the same key replays the response, and there is one charge."""
    s = Server(os.path.join(EXAMPLES, "charges_app.py"), tmp_path / "charges.log")
    try:
        k = key()
        request = (f"POST /charges HTTP/1.1\r\nhost: 127.0.0.1\r\nidempotency-key: {k}\r\n"
                   f"content-type: application/json\r\ncontent-length: {len(BODY)}\r\n\r\n"
                   ).encode() + BODY
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(request)
        wait_until(lambda: len(charges()) == 1, 10, "the charge to commit")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        sock.close()  # a reset: the response is lost
        [(charge_id, amount, currency)] = charges()
        expected = json.dumps({"id": charge_id, "amount": 1250, "currency": "usd"},
                              separators=(",", ":")).encode()
        retries = [s.post("/charges", key=k) for _ in range(2)]
        for r in retries:
            assert (r.status_code, r.content) == (201, expected)
            assert r.headers["idempotent-replayed"] == "true"
            assert r.headers["content-type"] == "application/json"
        assert charges() == [(charge_id, 1250, "usd")]

        k2 = key()  # an undisturbed charge: the first response and its replay are the same
        first, again = s.post("/charges", key=k2), s.post("/charges", key=k2)
        assert first.status_code == 201 and (again.status_code, again.content) == \
            (201, first.content)
        assert len(charges()) == 2
        assert s.post("/charges").status_code == 400  # this app requires the key
        assert s.post("/charges", body=b'{"amount": -1, "currency": "usd"}',
                      key=key()).status_code == 422  # FastAPI's validation, stored as such
        assert idle_in_transaction(db) == 0
    finally:
        s.stop()
