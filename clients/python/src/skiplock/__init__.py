"""skiplock for Python: jobs on PostgreSQL through the skiplock SQL protocol.

    import skiplock
    with conn.transaction():
        conn.execute("INSERT INTO orders ...")
        skiplock.enqueue(conn, "email.receipt", {"order": 42})

    # dependencies: ship runs after both parents finished; a batch with a callback
    ship = skiplock.enqueue(conn, "order.ship", {}, depends_on=[pay_id, pack_id])
    ids = skiplock.enqueue_batch(conn, "img.resize", payloads, "album.ready")
    skiplock.waits_for(conn, ship)   # 'dependencies: 2 of 2 parent(s) not finished'

    worker = skiplock.Worker(url, {"email.receipt": send_receipt}, concurrency=16)
    worker.run_forever()          # or: await worker.start() ... await worker.stop()

    # periodic jobs: every worker fires the due schedules (cron=False: not this one)
    worker = skiplock.Worker(url, {"report.daily": build_report},
                             schedules=[{"name": "daily-report", "expression": "0 6 * * *",
                                         "zone": "Europe/Berlin", "kind": "report.daily"}])

    async with skiplock.lease(url, "nightly-report", ttl=60) as lease:
        ...                       # lease.fence(conn) in the transaction that writes

    claim = skiplock.idempotent(conn, key, skiplock.fingerprint("POST", "/charges", body))

The idempotency middleware for ASGI apps is skiplock.asgi (it needs nothing
more than this package; FastAPI and Starlette apps take it as they are).

The schema is installed by the package: skiplock.init(url) (init_sync for
sync code) or `python -m skiplock init --url URL`.  docs/clients/python.md
is the guide.
"""

from .errors import (MIN_SCHEMA, FencedError, LeaseHeldError, LeaseLostError, PermanentError,
                     SkiplockError, TransientError, classify, is_transient)
from .idem import IdemClaim, fingerprint, idempotent
from .job import Discard, Job, JobContext, Retry
from .leases import Lease, lease, lease_sync
from .pooler import url_looks_pooled
from .protocol import (complete, enqueue, enqueue_batch, enqueue_many, fail, job_complete,
                       job_fence, lease_fence, waits_for)
from .typed import typed
from .singleton import SingletonResult, run_singleton, run_singleton_sync
from ._cron import CronTick
from ._install import init, init_sync
from ._slots import Stats
from .schedules import Declared, Schedule, declare_schedules
from .worker import Worker

__version__ = "0.2.0"

__all__ = [
    "MIN_SCHEMA", "CronTick", "Declared", "Discard", "FencedError", "IdemClaim", "Job",
    "JobContext", "Lease", "LeaseHeldError", "LeaseLostError", "PermanentError", "Retry",
    "Schedule", "SingletonResult", "SkiplockError", "Stats", "TransientError", "Worker",
    "classify", "complete", "declare_schedules", "enqueue", "enqueue_batch", "enqueue_many",
    "fail", "fingerprint", "idempotent", "init", "init_sync", "is_transient", "job_complete",
    "job_fence", "lease", "lease_fence", "lease_sync", "run_singleton", "run_singleton_sync",
    "typed", "url_looks_pooled", "waits_for",
]
