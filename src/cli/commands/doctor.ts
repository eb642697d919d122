import type { Command } from 'commander';
import { loadConfig, type Config, type ConfigInput } from '../../config.js';
import { isPostgresUrl } from '../../store/open-store.js';
import { fail, type Check } from '../doctor/check.js';
import { jwtChecks } from '../doctor/jwt.js';
import { postgresChecks, redactUrl } from '../doctor/postgres.js';
import { sqliteChecks } from '../doctor/sqlite.js';
import { examples } from '../help.js';
import { addServeOptions } from './server.js';

function configCheck(config: Config): Check {
  const db = isPostgresUrl(config.db) ? redactUrl(config.db) : config.db;
  return {
    check: 'config',
    status: 'ok',
    detail:
      `db ${db}${config.readDb ? `, read replica ${redactUrl(config.readDb)}` : ''}; listen ${config.host}:${config.port}; ` +
      `${config.workers} worker(s); log level ${config.logLevel}; cache ${config.cache ? 'on' : 'off'}`,
  };
}

/** Every check, in order; a check that cannot run because an earlier one failed is reported as skipped. */
async function runChecks(command: Command, flags: Omit<ConfigInput, 'db'>): Promise<Check[]> {
  const { db } = command.optsWithGlobals<{ db?: string }>();
  let config: Config;
  try {
    config = loadConfig({ db, ...flags }, process.env);
  } catch (err) {
    return [fail('config', (err as Error).message, 'correct the flag or the PLANTSTORE_* environment variable it names')];
  }
  const checks = [configCheck(config), ...(await jwtChecks(config.jwt))];
  checks.push(...(isPostgresUrl(config.db) ? await postgresChecks(config) : await sqliteChecks(config.db)));
  return checks;
}

function printChecks(checks: Check[]): void {
  const width = Math.max(...checks.map((c) => c.check.length));
  for (const c of checks) {
    // One line per check; control characters from paths or server messages are not passed to the terminal.
    const line = `${c.status.padEnd(4)}  ${c.check.padEnd(width)}  ${c.detail}${c.fix ? ` -> ${c.fix}` : ''}`;
    process.stdout.write(`${line.replace(/[\u0000-\u001f\u007f]/g, '?')}\n`);
  }
  const count = (status: Check['status']) => checks.filter((c) => c.status === status).length;
  process.stdout.write(`${count('ok')} ok, ${count('warn')} warning(s), ${count('fail')} failure(s)\n`);
}

export function registerDoctorCommand(program: Command): void {
  addServeOptions(program.command('doctor'))
    .description('check the configuration, database, schema and identity provider; exit 1 if anything fails')
    .option('--json', 'print the checks as a JSON array', false)
    .addHelpText(
      'after',
      examples(
        'plantstore doctor',
        'PLANTSTORE_DB=postgres://plantstore@db.internal/plantstore plantstore doctor --workers 4',
        "plantstore doctor --json | jq '.[] | select(.status != \"ok\")'",
      ) +
        '\nEach line is ok, warn, fail or skip, then what was checked and, when not ok, what to do.' +
        '\nIt takes the flags of serve, so it checks the configuration serve would run with; it never changes the database.\n',
    )
    .action(async (opts: Omit<ConfigInput, 'db'> & { json: boolean }, cmd: Command) => {
      const { json, ...flags } = opts;
      const checks = await runChecks(cmd, flags);
      if (json) process.stdout.write(`${JSON.stringify(checks, null, 2)}\n`);
      else printChecks(checks);
      if (checks.some((c) => c.status === 'fail')) process.exitCode = 1;
    });
}
