"""Leases (skiplock.lease, lease_sync): acquire, hold, fence, release;
held elsewhere; lost; and the faults: terminated backends during renewal,
a partition, a holder paused past its ttl."""

import asyncio
import threading
import time
import uuid

import psycopg
import pytest

import skiplock
from conftest import (URL, async_wait_until, expire_lease, idle_in_transaction, kill_backends,
                      lease_row)


def steal(db, name):
    """Another owner takes the lease, as after its holder paused past the ttl."""
    expire_lease(db, name)
    assert db.execute("SELECT skiplock.lease_acquire(%s, 'thief', interval '30 s')",
                      [name]).fetchone()[0]


def fresh(prefix="t-lease"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def ledger(db):
    db.execute("DROP TABLE IF EXISTS public.t_fenced; "
               "CREATE TABLE public.t_fenced (n serial PRIMARY KEY, fencing bigint NOT NULL)")
    yield lambda: [r[0] for r in db.execute("SELECT fencing FROM public.t_fenced ORDER BY n")]
    db.execute("DROP TABLE public.t_fenced")


async def fenced_write(lease, fencing=None):
    """One fenced insert on a connection of the mode's URL."""
    async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
        async with conn.transaction():
            await lease.fence(conn)
            await conn.execute("INSERT INTO public.t_fenced (fencing) VALUES (%s)",
                               [fencing or lease.fencing])


def test_acquire_fence_release(db, ledger):
    name = fresh()

    async def main():
        async with skiplock.lease(URL, name, ttl=5) as lease:
            assert lease.fencing >= 1 and not lease.lost.is_set()
            assert lease_row(db, name) == (lease.owner, lease.fencing, True)
            await fenced_write(lease)
            return lease
    lease = asyncio.run(main())
    owner, fencing, live = lease_row(db, name)
    assert (owner, fencing, live) == (lease.owner, lease.fencing, False)  # released on exit
    assert ledger() == [lease.fencing]
    assert idle_in_transaction(db) == 0

    async def again():
        async with skiplock.lease(URL, name, ttl=5) as second:
            return second.fencing
    assert asyncio.run(again()) == fencing + 1  # tokens only grow


def test_released_on_exception(db):
    name = fresh()

    async def main():
        async with skiplock.lease(URL, name, ttl=5):
            raise KeyError("boom")
    with pytest.raises(KeyError):
        asyncio.run(main())
    assert lease_row(db, name)[2] is False


def test_held_elsewhere_is_an_error_at_once_or_after_wait(db):
    name = fresh()

    async def main():
        async with skiplock.lease(URL, name, ttl=5, owner="first") as first:
            t0 = time.monotonic()
            with pytest.raises(skiplock.LeaseHeldError) as e:
                async with skiplock.lease(URL, name, ttl=5, owner="second"):
                    pytest.fail("acquired a held lease")
            assert time.monotonic() - t0 < 2
            assert e.value.holder == "first" and 0 < e.value.expires_in <= 5
            assert "held by first" in str(e.value)
            t0 = time.monotonic()
            with pytest.raises(skiplock.LeaseHeldError):
                async with skiplock.lease(URL, name, ttl=5, wait=0.6):
                    pass
            assert 0.5 < time.monotonic() - t0 < 3
            return first.fencing
    token = asyncio.run(main())
    assert lease_row(db, name)[1] == token  # the failed tries took nothing


def test_waiter_takes_over_when_released(db):
    name = fresh()

    async def main():
        first = skiplock.lease(URL, name, ttl=5)
        held = await first.__aenter__()
        waiter = asyncio.ensure_future(skiplock.run_singleton(
            URL, name, lambda lease: asyncio.sleep(0, lease.fencing), ttl=5, wait=10))
        await asyncio.sleep(0.5)
        assert not waiter.done()
        await first.__aexit__(None, None, None)
        result = await waiter
        assert result.ran and result.value == held.fencing + 1
    asyncio.run(main())


def test_bad_input_writes_nothing(db):
    before = db.execute("SELECT count(*) FROM skiplock.leases").fetchone()[0]
    for kwargs, err in [({"name": "x" * 257}, ValueError), ({"name": ""}, ValueError),
                        ({"name": 7}, ValueError), ({"ttl": 0}, ValueError),
                        ({"ttl": -1}, ValueError), ({"ttl": 0.1}, ValueError),
                        ({"ttl": "60"}, TypeError), ({"owner": "o" * 257}, ValueError),
                        ({"wait": -1}, ValueError)]:
        args = {"name": "t-bad", "ttl": 5, **kwargs}
        name = args.pop("name")
        with pytest.raises(err):
            skiplock.lease(URL, name, **args)
        with pytest.raises(err):
            skiplock.lease_sync(URL, name, **args)
    with pytest.raises(TypeError):
        skiplock.lease(42, "t-bad")
    assert db.execute("SELECT count(*) FROM skiplock.leases").fetchone()[0] == before


def test_sync_lease(db, ledger):
    name = fresh()
    with skiplock.lease_sync(URL, name, ttl=1.5) as lease:
        with psycopg.connect(URL, prepare_threshold=None) as conn:
            with conn.transaction():
                lease.fence(conn)
                conn.execute("INSERT INTO public.t_fenced (fencing) VALUES (%s)",
                             [lease.fencing])
        assert not lease.lost.wait(2.0)  # renewed in the background past its ttl
        lease.check()
        assert lease_row(db, name) == (lease.owner, lease.fencing, True)
    assert lease_row(db, name)[2] is False
    assert ledger() == [lease.fencing]
    assert threading.active_count() == 1 or not any(
        t.name.startswith("skiplock-lease") for t in threading.enumerate())


def test_sync_lease_lost_sets_the_event(db):
    name = fresh()
    with pytest.raises(skiplock.LeaseLostError) as e:
        with skiplock.lease_sync(URL, name, ttl=3) as lease:
            steal(db, name)
            assert lease.lost.wait(3), "the loss was not noticed"
            with pytest.raises(skiplock.LeaseLostError):
                lease.check()
    assert "matched no row" in e.value.reason
    assert lease_row(db, name)[0] == "thief"


def test_lost_lease_cancels_the_body_and_is_fenced(db, ledger):
    """Taken while held (its holder paused past the ttl, as expire_lease
    makes it look): the renewal matches no row, the body is cancelled, the
    block raises LeaseLostError, and the old token's writes are refused."""
    name = fresh()

    async def main():
        async with skiplock.lease(URL, name, ttl=0.9) as lease:
            steal(db, name)
            try:
                await asyncio.sleep(5)
            finally:
                with pytest.raises(skiplock.FencedError) as fenced:
                    await fenced_write(lease)
                assert fenced.value.sqlstate == "SK001"
        pytest.fail("the body was not cancelled")
    t0 = time.monotonic()
    with pytest.raises(skiplock.LeaseLostError):
        asyncio.run(main())
    assert time.monotonic() - t0 < 3
    assert ledger() == []


def test_paused_holder_is_fenced_out(db, ledger):
    """A holder whose whole process freezes (here its event loop, blocked
    like a long GC pause) past its ttl: another replica takes the lease
    meanwhile, and the stale holder's fenced write is refused with SK001,
    nothing written."""
    name = fresh()
    taken = []

    def replica():
        def work(lease):
            with psycopg.connect(URL, prepare_threshold=None) as conn:
                with conn.transaction():
                    lease.fence(conn)
                    conn.execute("INSERT INTO public.t_fenced (fencing) VALUES (%s)",
                                 [lease.fencing])
            return lease.fencing
        taken.append(skiplock.run_singleton_sync(URL, name, work, ttl=5, wait=10))

    async def main():
        async with skiplock.lease(URL, name, ttl=0.6, cancel=False) as lease:
            other = threading.Thread(target=replica)
            other.start()
            time.sleep(2.0)  # the freeze: no renewal runs
            other.join()
            with pytest.raises(skiplock.FencedError):
                await fenced_write(lease)
            with pytest.raises(skiplock.LeaseLostError):
                lease.check()
            return lease.fencing
    with pytest.raises(skiplock.LeaseLostError):
        asyncio.run(main())
    assert taken[0].ran
    assert ledger() == [taken[0].value]  # only the new holder's write


def test_terminated_backends_during_renewal_keep_a_live_lease(db):
    """Every backend but ours is terminated every 0.15 s for 5 s while a
    lease of ttl 3 s is held: renewals fail and reconnect, the lease is
    never counted lost and never changes hands."""
    name = fresh()

    async def main():
        async with skiplock.lease(URL, name, ttl=3) as lease:
            killed, end = 0, time.monotonic() + 5
            while time.monotonic() < end:
                killed += await asyncio.to_thread(kill_backends, db)
                await asyncio.sleep(0.15)
            assert not lease.lost.is_set(), lease.reason
            owner, fencing, live = lease_row(db, name)
            assert (owner, fencing, live) == (lease.owner, lease.fencing, True)
            renewed = db.execute("SELECT renewed_at - acquired_at FROM skiplock.leases "
                                 "WHERE name = %s", [name]).fetchone()[0]
            assert renewed.total_seconds() > 3
            return killed
    assert asyncio.run(main()) >= 3  # the renewal connection, again and again
    assert lease_row(db, name)[2] is False


def test_terminated_backends_do_not_keep_a_dead_lease(db):
    """The same faults while the lease is taken from under its holder: the
    holder finds out within about ttl/3 plus the retries."""
    name = fresh()

    async def main():
        async with skiplock.lease(URL, name, ttl=1.2, cancel=False) as lease:
            stop = asyncio.Event()

            async def killer():
                while not stop.is_set():
                    await asyncio.to_thread(kill_backends, db)
                    await asyncio.sleep(0.15)
            task = asyncio.ensure_future(killer())
            await asyncio.sleep(0.5)
            steal(db, name)
            t0 = time.monotonic()
            await async_wait_until(lease.lost.is_set, 3, "the loss")
            stop.set()
            await task
            assert time.monotonic() - t0 < 2.0
            assert lease_row(db, name)[0] == "thief"
    with pytest.raises(skiplock.LeaseLostError):
        asyncio.run(main())


def test_partition_loses_the_lease_before_it_expires(db, cutproxy):
    """No answer from the database (a silent partition): the holder counts
    the lease lost and cancels its body while the lease is still live in
    the database, so no other holder can have started yet."""
    name = fresh()
    seen = {}

    async def main():
        async with skiplock.lease(cutproxy.url, name, ttl=1.5) as lease:
            cutproxy.ctl("mode", "blackhole")
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen["live"] = lease_row(db, name)[2]
                seen["lost"] = lease.lost.is_set()
                raise
    t0 = time.monotonic()
    with pytest.raises(skiplock.LeaseLostError) as e:
        asyncio.run(main())
    assert time.monotonic() - t0 < 3
    assert seen["live"] is True, "the body ran on after the lease could have expired"
    assert seen["lost"] is True
    assert "no renewal succeeded" in e.value.reason
    cutproxy.ctl("mode", "pass")


def test_a_connection_factory_source(db, ledger):
    """source= a function returning an async context manager of a
    connection (the shape of psycopg_pool's pool.connection): each call
    borrows one, here a connection that is not autocommit."""
    import contextlib
    name, borrowed = fresh(), []

    @contextlib.asynccontextmanager
    async def connection():
        async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
            borrowed.append(conn.autocommit)
            yield conn

    async def main():
        async with skiplock.lease(connection, name, ttl=0.9) as lease:
            await asyncio.sleep(1.2)  # renewed on borrowed connections
            await fenced_write(lease)
            return lease
    lease = asyncio.run(main())
    assert not lease.lost.is_set() and ledger() == [lease.fencing]
    assert lease_row(db, name)[2] is False  # released
    assert len(borrowed) >= 4 and not any(borrowed)  # acquire, renewals, release
    assert idle_in_transaction(db) == 0
