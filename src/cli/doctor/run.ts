import type { Command } from 'commander';
import { loadConfig, type Config, type ConfigInput } from '../../config.js';
import { fail, type Check } from './check.js';
import { jwtChecks } from './jwt.js';
import { listenChecks } from './listen.js';
import { postgresChecks, withoutPassword } from './postgres.js';
import { sqliteChecks } from './sqlite.js';

const isPostgresUrl = (db: string): boolean => /^postgres(ql)?:\/\//i.test(db);

function configCheck(config: Config): Check {
  const db = isPostgresUrl(config.db) ? withoutPassword(config.db) : config.db;
  return {
    check: 'config',
    status: 'ok',
    detail:
      `db ${db}${config.readDb ? `, read replica ${withoutPassword(config.readDb)}` : ''}; listen ${config.host}:${config.port}; ` +
      `${config.workers} worker(s); log level ${config.logLevel}; cache ${config.cache ? 'on' : 'off'}`,
  };
}

/** Every check, in order; a check that cannot run because an earlier one failed is reported as skipped. */
export async function runChecks(command: Command, flags: Omit<ConfigInput, 'db'>): Promise<Check[]> {
  const { db } = command.optsWithGlobals<{ db?: string }>();
  let config: Config;
  try {
    config = loadConfig({ db, ...flags }, process.env);
  } catch (err) {
    return [fail('config', (err as Error).message, 'correct the flag or the PLANTSTORE_* environment variable it names')];
  }
  const checks = [configCheck(config), ...(await listenChecks(config)), ...(await jwtChecks(config.jwt))];
  checks.push(...(isPostgresUrl(config.db) ? await postgresChecks(config) : await sqliteChecks(config.db)));
  return checks;
}

export function printChecks(checks: Check[]): void {
  const width = Math.max(...checks.map((c) => c.check.length));
  for (const c of checks) {
    // One line per check; control characters from paths or server messages are not passed to the terminal.
    const line = `${c.status.padEnd(4)}  ${c.check.padEnd(width)}  ${c.detail}${c.fix ? ` -> ${c.fix}` : ''}`;
    process.stdout.write(`${line.replace(/[\u0000-\u001f\u007f]/g, '?')}\n`);
  }
  const count = (status: Check['status']) => checks.filter((c) => c.status === status).length;
  process.stdout.write(`${count('ok')} ok, ${count('warn')} warning(s), ${count('fail')} failure(s)\n`);
}
