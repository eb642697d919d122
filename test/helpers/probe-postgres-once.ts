// Probes PostgreSQL once for the whole test run, then runs the command given (the test runner) with the answer in
// PLANTSTORE_TEST_PG_PROBE, which every test file reads instead of probing again: a busy machine that answers one
// probe late then skips only as a whole, never one suite among others that used the same server.
import { spawn } from 'node:child_process';
import { postgresUnavailableReason, PG_PROBE_ENV, PG_REACHABLE } from './postgres.js';

const [command, ...args] = process.argv.slice(2);
if (command === undefined) {
  console.error('usage: probe-postgres-once.ts COMMAND [ARG...]');
  process.exit(2);
}
const reason = await postgresUnavailableReason();
const child = spawn(command, args, {
  stdio: 'inherit',
  env: { ...process.env, [PG_PROBE_ENV]: reason ?? PG_REACHABLE },
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
child.on('exit', (code, signal) => process.exit(code ?? (signal === null ? 1 : 128)));
