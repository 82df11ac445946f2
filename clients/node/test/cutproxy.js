// The project's fault-injecting TCP proxy (docs/testing-cutproxy.md) in
// front of the test database: startProxy(url) -> { url, ctl, stop }.
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { waitFor } from './helpers.js';

const BIN = process.env.SKL_CUTPROXY;

export async function startProxy(url) {
  if (!BIN) throw new Error('SKL_CUTPROXY is not set: run under CTest (tests/CMakeLists.txt sets it)');
  const u = new URL(url);
  const dir = mkdtempSync(join(tmpdir(), 'skl-node-cut.'));
  const proc = spawn(BIN, ['--listen', '127.0.0.1:0', '--upstream', `${u.hostname}:${u.port}`,
    '--control', join(dir, 'ctl'), '--port-file', join(dir, 'port'), '--ttl', '300'], { stdio: ['ignore', 'ignore', 'ignore'] });
  const port = await waitFor('the cut proxy is up', 5000, () => {
    try { return readFileSync(join(dir, 'port'), 'utf8').trim(); } catch { return null; }
  });
  u.host = `127.0.0.1:${port}`;
  u.searchParams.set('sslmode', 'disable');
  const ctl = async (...cmd) => (await promisify(execFile)(BIN, ['ctl', join(dir, 'ctl'), ...cmd])).stdout.trim();
  const stop = () => {
    proc.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  };
  return { url: u.toString(), ctl, stop };
}
