#!/usr/bin/env node
// A streaming handler (docs/protocol.md, "The streaming handler"): run with
//   skiplock worker --stream 'greet=node examples/stream/handler.mjs' --stream-inflight 16
// One job per line on stdin; outcomes on stdout in any order; logs on stderr.
import { createInterface } from "node:readline";
async function handle({ name }) {
  if (typeof name !== "string") return { outcome: "discard", error: "payload has no name" };
  return { outcome: "ok", result: { greeting: `hello, ${name}` } };
}

for await (const line of createInterface({ input: process.stdin })) {
  const job = JSON.parse(line);
  console.error(`job ${job.id} attempt ${job.attempt}`);
  handle(job.payload).then((a) => process.stdout.write(JSON.stringify({ id: job.id, ...a }) + "\n"));
}
