import type { Command } from 'commander';
import type { ConfigInput } from '../../config.js';
import { examples } from '../help.js';
import { addServeOptions } from './server.js';

export function registerDoctorCommand(program: Command): void {
  addServeOptions(program.command('doctor'))
    .description(
      'check the configuration, ports, identity provider, Redis, database, schema, webhooks and rows the service cannot serve; exit 1 if anything fails',
    )
    .option('--json', 'print the checks as a JSON array', false)
    .addHelpText(
      'after',
      examples(
        'plantstore doctor',
        'PLANTSTORE_DB=postgres://plantstore@db.internal/plantstore plantstore doctor --workers 4',
        'plantstore doctor --json | jq \'.[] | select(.status != "ok")\'',
      ) +
        '\nEach line is ok, warn, fail or skip, then what was checked and, when not ok, what to do.' +
        '\nIt takes the flags of serve, so it checks the configuration serve would run with; it never changes the database.\n',
    )
    .action(async (opts: Omit<ConfigInput, 'db'> & { json: boolean }, cmd: Command) => {
      const { json, ...flags } = opts;
      // The checks load both database drivers; only doctor pays for that.
      const { printChecks, runChecks } = await import('../doctor/run.js');
      const checks = await runChecks(cmd, flags);
      if (json) process.stdout.write(`${JSON.stringify(checks, null, 2)}\n`);
      else printChecks(checks);
      if (checks.some((c) => c.status === 'fail')) process.exitCode = 1;
    });
}
