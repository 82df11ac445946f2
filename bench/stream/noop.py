#!/usr/bin/env python3
# bench/stream/noop.py — the benchmark's trivial streaming handler in Python
# (docs/protocol.md, "The streaming handler"): parses each job line and
# answers "ok" at once.  bench/run: skl-bench-drain --mode stream.
import json
import sys

out = sys.stdout
for line in sys.stdin:
    job = json.loads(line)
    out.write(json.dumps({"id": job["id"], "outcome": "ok"}) + "\n")
    out.flush()
