#!/usr/bin/env node
// npx skiplock init [--url URL]: installs the schema (src/cli.js).
import { main } from '../src/cli.js';

process.exitCode = await main(process.argv.slice(2));
