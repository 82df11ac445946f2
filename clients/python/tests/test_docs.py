"""The guide's code for periodic jobs, leases and idempotent endpoints is
the examples' code (which test_cron.py, test_singleton.py and test_asgi.py
run): every line of its blocks that names an example is in that example."""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
GUIDE = os.path.join(HERE, "..", "..", "..", "docs", "clients", "python.md")
EXAMPLES = os.path.join(HERE, "..", "examples")


def blocks(section):
    text = open(GUIDE).read()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, re.S)


def test_guide_blocks_are_the_examples():
    for section, example, marker in [
            ("Periodic jobs", "periodic_jobs.py", "SCHEDULES"),
            ("Leases and singletons", "nightly_reconcile.py", "async def reconcile"),
            ("Idempotent endpoints", "charges_app.py", "IdempotencyMiddleware, claim_of")]:
        source = open(os.path.join(EXAMPLES, example)).read()
        [block] = [b for b in blocks(section) if marker in b]
        lines = [ln for ln in block.splitlines() if ln.strip() and ln.strip() != "..."]
        missing = [ln for ln in lines if ln not in source.splitlines()]
        assert not missing, f"{example} lacks these lines of the guide: {missing}"
