// The package's command, `npx skiplock init [--url URL]`: init() for apps
// that have this package and no C binary.  Exit 0 when the schema is
// installed and current, 1 when that failed, 2 for bad usage; a failure is
// one line on stderr.
import { parseArgs } from 'node:util';
import { init } from './init.js';

const USAGE = `usage: npx skiplock init [--url URL]

Installs the skiplock schema in the database, or upgrades it to the newest
step this package knows, with the installer the package bundles (what the
C binary's \`skiplock init\` does).  Safe to run again, and beside other
installers, direct or through PgBouncer in transaction mode.

  --url URL    the database (default: $DATABASE_URL)
  -h, --help   this text
`;

class UsageError extends Error {}

const OPTIONS = { url: { type: 'string' }, help: { type: 'boolean', short: 'h' } };

function parse(argv, env) {
  let values;
  let positionals;
  try {
    ({ values, positionals } = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true }));
  } catch (err) {
    throw new UsageError(err.message);
  }
  if (values.help) return { help: true };
  const [command, ...rest] = positionals;
  if (command === undefined) throw new UsageError('no command: the command is init');
  if (command !== 'init') throw new UsageError(`unknown command "${command}": this package's command is init`);
  if (rest.length > 0) throw new UsageError(`init takes no argument "${rest[0]}"`);
  const url = values.url || env.DATABASE_URL;
  if (!url) throw new UsageError('no database: give --url URL or set DATABASE_URL');
  return { url };
}

const oneLine = (err) => err.message.replace(/\s*\n\s*/g, ' ');

/** Runs the command line argv; resolves to the exit status. */
export async function main(argv, { env = process.env, stdout = process.stdout, stderr = process.stderr } = {}) {
  let args;
  try {
    args = parse(argv, env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    stderr.write(`skiplock: ${oneLine(err)} (see npx skiplock --help)\n`);
    return 2;
  }
  if (args.help) {
    stdout.write(USAGE);
    return 0;
  }
  try {
    stdout.write(`skiplock init: the schema is at step ${await init(args.url)}\n`);
    return 0;
  } catch (err) {
    stderr.write(`skiplock init: ${oneLine(err)}\n`);
    return err instanceof TypeError ? 2 : 1; // TypeError: a malformed --url
  }
}
