#!/usr/bin/env node
// bench/stream/noop.mjs — the benchmark's trivial streaming handler in Node
// (docs/protocol.md, "The streaming handler"): parses each job line and
// answers "ok" at once.  bench/run: skl-bench-drain --mode stream.
import { createInterface } from "node:readline";

for await (const line of createInterface({ input: process.stdin })) {
  const job = JSON.parse(line);
  process.stdout.write(JSON.stringify({ id: job.id, outcome: "ok" }) + "\n");
}
