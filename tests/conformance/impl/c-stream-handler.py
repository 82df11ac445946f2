#!/usr/bin/env python3
# The conf.* handlers of ../README.md as one streaming handler
# (docs/protocol.md, "The streaming handler"): jobs as JSON lines on stdin,
# a thread each, outcomes as JSON lines on stdout.  Needs python3-psycopg.
import json, os, sys, threading, time
import psycopg

out = threading.Lock()

def answer(job, outcome, **fields):
    with out:
        print(json.dumps({"id": job["id"], "outcome": outcome, **fields}), flush=True)

def effect(job):  # the fenced effect; SK001 (or any error) fails the attempt
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, prepare_threshold=None) as c:
        c.execute("SELECT conformance.effect(%s, %s, %s, %s::jsonb)", (job["id"], job["fencing"],
                  os.environ["CONFORMANCE_OWNER"], json.dumps(job["payload"])))

def run(job):
    kind, attempt, p = job["kind"], job["attempt"], job["payload"]
    result = {"kind": kind, "attempt": attempt}
    if kind == "conf.retry" and attempt < p["until"]:
        return answer(job, "retry", error=f"conf.retry attempt {attempt}")
    if kind == "conf.fail":
        return answer(job, "fail", error=f"conf.fail attempt {attempt}")
    if kind == "conf.discard":
        return answer(job, "discard", error=f"conf.discard attempt {attempt}")
    if kind == "conf.sleep" or (kind == "conf.hang" and attempt == 1):
        time.sleep(p["ms"] / 1000)
    if kind == "conf.hang" and attempt == 1:
        return answer(job, "ok", result=result)  # a stale attempt: no effect
    try:
        effect(job)
    except Exception as e:
        return answer(job, "fail", error=f"effect refused: {e}")
    answer(job, "ok", result=result)

for line in sys.stdin:
    threading.Thread(target=run, args=(json.loads(line),), daemon=True).start()
