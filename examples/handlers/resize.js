#!/usr/bin/env node
// resize.js — a command handler in Node: the payload on stdin, the job in
// SKIPLOCK_* variables, the outcome in the exit status.
//
//   skiplock worker --handler 'resize=node examples/handlers/resize.js'
//
// exit 0: completed (stdout, when JSON, is kept as the job's result);
// 65: bad payload, discard; 75: try again later; anything else: failed.
'use strict';
let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  let job;
  try {
    job = JSON.parse(input);
  } catch (e) {
    console.error(`payload is not JSON: ${e.message}`);
    process.exit(65);
  }
  if (!Number.isInteger(job.width) || job.width <= 0) {
    console.error('payload needs a positive integer "width"');
    process.exit(65);
  }
  if (job.flaky && process.env.SKIPLOCK_ATTEMPT === '1') {
    console.error('image store busy');
    process.exit(75);
  }
  const result = {
    image: job.image,
    width: job.width,
    height: Math.round(job.width * 0.75),
    job: Number(process.env.SKIPLOCK_JOB_ID),
    attempt: Number(process.env.SKIPLOCK_ATTEMPT),
  };
  process.stdout.write(JSON.stringify(result));
});
