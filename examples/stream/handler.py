#!/usr/bin/env python3
# A streaming handler (docs/protocol.md, "The streaming handler"): run with
#   skiplock worker --stream 'greet=python3 examples/stream/handler.py'
# One job per line on stdin; one outcome per line on stdout; logs on stderr.
import json, sys

def handle(payload):
    if not isinstance(payload.get("name"), str):
        return {"outcome": "discard", "error": "payload has no name"}
    return {"outcome": "ok", "result": {"greeting": "hello, " + payload["name"]}}

for line in sys.stdin:
    job = json.loads(line)
    print(f"job {job['id']} attempt {job['attempt']}", file=sys.stderr, flush=True)
    print(json.dumps({"id": job["id"], **handle(job["payload"])}), flush=True)
