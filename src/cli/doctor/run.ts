import type { Command } from 'commander';
import { loadConfig, type Config, type ConfigInput } from '../../config.js';
import { isPostgresUrl } from '../../store/open-store.js';
import { fail, type Check } from './check.js';
import { jwtChecks } from './jwt.js';
import { listenChecks } from './listen.js';
import { postgresChecks, withoutPassword } from './postgres.js';
import { redisChecks } from './redis.js';
import { sqliteChecks } from './sqlite.js';

function configCheck({ store, server, app }: Config): Check {
  const db = isPostgresUrl(store.db) ? withoutPassword(store.db) : store.db;
  return {
    check: 'config',
    status: 'ok',
    detail:
      `db ${db}${store.readDb ? `, read replica ${withoutPassword(store.readDb)}` : ''}; listen ${server.host}:${server.port}; ` +
      `${server.workers} worker(s); log level ${app.logLevel}; cache ${app.cache ? 'on' : 'off'}`,
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
  const checks = [
    configCheck(config),
    ...(await listenChecks(config.server)),
    ...(await jwtChecks(config.app.jwt)),
    ...(await redisChecks(
      config.app.redisUrl,
      config.app.redisKeyPrefix,
      config.app.rateLimit !== undefined || config.app.writeRateLimit !== undefined,
    )),
  ];
  const { store } = config;
  const allowPrivate = config.app.webhookAllowPrivate;
  checks.push(
    ...(isPostgresUrl(store.db)
      ? await postgresChecks(store, config.server.workers, allowPrivate)
      : await sqliteChecks(store.db, allowPrivate)),
  );
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
