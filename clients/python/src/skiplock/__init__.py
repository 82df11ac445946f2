"""skiplock for Python: jobs on PostgreSQL through the skiplock SQL protocol.

    import skiplock
    with conn.transaction():
        conn.execute("INSERT INTO orders ...")
        skiplock.enqueue(conn, "email.receipt", {"order": 42})

    worker = skiplock.Worker(url, {"email.receipt": send_receipt}, concurrency=16)
    worker.run_forever()          # or: await worker.start() ... await worker.stop()

The schema is installed by `skiplock init`; docs/clients/python.md is the guide.
"""

from .errors import (MIN_SCHEMA, FencedError, PermanentError, SkiplockError, TransientError,
                     classify, is_transient)
from .job import Discard, Job, JobContext, Retry
from .pooler import url_looks_pooled
from .protocol import complete, enqueue, fail, job_complete, job_fence
from ._slots import Stats
from .worker import Worker

__version__ = "0.2.0"

__all__ = [
    "MIN_SCHEMA", "Discard", "FencedError", "Job", "JobContext", "PermanentError", "Retry",
    "SkiplockError",
    "Stats", "TransientError", "Worker", "classify", "complete", "enqueue", "fail",
    "is_transient", "job_complete", "job_fence", "url_looks_pooled",
]
