import type { Command } from 'commander';
import { invalidInput } from '../../catalogue/errors.js';
import { generateToken } from '../../catalogue/tokens.js';
import { recordBatch } from '../../import-format/records.js';
import type { Store } from '../../store/store.js';
import type { ConfigInput } from '../../config.js';
import { SETTINGS, type Setting, type SettingName } from '../../settings.js';
import { configFrom, inputFrom, loadStore, withStore } from '../context.js';
import { DEMO_RECORDS, DEMO_USERS } from '../demo-data.js';
import { examples, settingHelp } from '../help.js';
import { say } from '../output.js';

// The HTTP stack is loaded only by the commands that serve, so the other commands start quickly.
const loadServer = () => import('../../server.js');

/**
 * What `migrate` did, from the migrations it applied: a new schema, an upgrade or nothing. `known` is every
 * migration this version has, loaded by migrate alone: a static import would load the migrations and kysely at every
 * command's start.
 */
function migrationSummary(migrated: readonly string[], known: readonly string[]): string {
  if (migrated.length === 0) return 'database schema is up to date';
  if (migrated.length === known.length) return `created the database schema (${migrated.length} migrations, latest ${migrated.at(-1)})`;
  return `applied ${migrated.length} migration${migrated.length === 1 ? '' : 's'} (${migrated.join(', ')}): database schema is up to date`;
}

type ServeOptions = Omit<ConfigInput, 'db'>;

/**
 * The flags that shape the running service, from the settings table (`--db` is the program's own); `doctor`
 * takes them too, to check what `serve` would use.
 */
export function addServeOptions(command: Command): Command {
  const settings = Object.entries(SETTINGS) as Array<[SettingName, Setting<unknown>]>;
  for (const table of ['service', 'jwt'] as const) {
    if (table === 'jwt') command.optionsGroup('JWT bearer tokens from an identity provider (see docs/identity-providers.md):');
    for (const [name, s] of settings) {
      if (s.table === table && s.flag !== undefined && name !== 'db') command.option(s.flag, settingHelp(s));
    }
  }
  return command;
}

/** The label of the tokens the demo issues: a later run revokes them before issuing new ones. */
const DEMO_LABEL = 'demo';

/**
 * Loads the demo catalogue once (a second run keeps it), revokes the tokens an earlier run issued (so running it
 * again does not pile up valid tokens), and issues fresh 7-day tokens; prints how to try it.
 */
async function seedDemo(store: Pick<Store, 'users' | 'tokens' | 'bulk'>, baseUrl: string): Promise<void> {
  const existing = new Set((await store.users.list()).map((u) => u.name));
  if (!DEMO_USERS.every((u) => existing.has(u.name))) await store.bulk.importRecords(recordBatch(DEMO_RECORDS));
  let revoked = 0;
  for (const token of await store.tokens.list({})) {
    if (token.label === DEMO_LABEL && token.revokedAt === undefined && (await store.tokens.revoke(token.id))) revoked++;
  }
  if (revoked > 0) say(`revoked ${revoked} token(s) of an earlier demo run`);
  const lines = ['', 'Plant Store demo. Tokens (valid 7 days):', ''];
  const curls: string[] = [];
  for (const user of DEMO_USERS) {
    const { token, hash } = generateToken();
    await store.tokens.add({ user: user.name, hash, label: DEMO_LABEL, expiresAt: new Date(Date.now() + 7 * 86_400_000) });
    lines.push(`  ${user.name.padEnd(6)} ${user.note}`, `         ${token}`);
    curls.push(`curl -s -H 'Authorization: Bearer ${token}' '${baseUrl}/plants?limit=5'   # as ${user.name}`);
  }
  lines.push('', 'Try:', '', ...curls.map((c) => `  ${c}`), `  curl -s '${baseUrl}/plants'   # no token: 401`, '');
  lines.push(`API reference: ${baseUrl}/docs   OpenAPI document: ${baseUrl}/openapi.json`, '');
  process.stdout.write(`${lines.join('\n')}\n`);
}

export function registerServerCommands(program: Command): void {
  addServeOptions(program.command('serve'))
    .description('run the HTTP service')
    .addHelpText(
      'after',
      '\nExamples:\n  plantstore serve\n  PLANTSTORE_DB=/var/lib/plantstore/plants.db plantstore serve --host 0.0.0.0 --port 8080' +
        '\n  plantstore --db postgres://plantstore@db.internal/plantstore serve --host 0.0.0.0 --workers 4' +
        '\n  plantstore serve --jwks-url https://idp.example/realms/plants/protocol/openid-connect/certs \\' +
        '\n      --jwt-issuer https://idp.example/realms/plants --jwt-audience plantstore --jwt-groups-claim groups\n',
    )
    .action(async (opts: ServeOptions, cmd: Command) => {
      const config = configFrom(cmd, opts);
      const { runServer, runCluster } = await loadServer();
      await (config.server.workers > 1 ? runCluster(config, inputFrom(cmd, opts)) : runServer(config));
    });

  program
    .command('migrate')
    .description('create the database or bring its schema up to date (serve and every command also do this)')
    .addHelpText('after', examples('plantstore migrate', 'plantstore --db postgres://plantstore@db.internal/plantstore migrate'))
    .action(async (_opts: unknown, cmd: Command) => {
      const migrated = await withStore(cmd, async ({ migrated }) => migrated, { create: true });
      const { knownMigrationNames } = await import('../../store/migrations/index.js');
      process.stderr.write(`${migrationSummary(migrated, knownMigrationNames())}\n`);
    });

  addServeOptions(program.command('demo'))
    .description('load demo users, groups and plants, issue tokens and print ready-to-paste curl commands')
    .option('--serve', 'then run the service', false)
    .addHelpText('after', examples('plantstore demo --db ./data/demo.db --serve', 'plantstore demo --db ./data/demo.db --port 9000'))
    .action(async (opts: ServeOptions & { serve: boolean }, cmd: Command) => {
      const given = configFrom(cmd, opts);
      // Before anything is written: a demo that cannot serve must not replace the tokens of one that does.
      const listenable = opts.serve
        ? await (await import('../doctor/listen.js')).listenablePort(given.server.host, given.server.port)
        : given.server.port;
      if (typeof listenable !== 'number')
        throw invalidInput(`cannot serve the demo: ${listenable.why}; ${listenable.fix} (--port, PLANTSTORE_PORT). Nothing was changed`);
      // Port 0 is any free port: the one found free is served, so that the URLs printed before the server starts
      // name the port it listens on.
      const config = { ...given, server: { ...given.server, port: listenable } };
      const store = await (await loadStore()).openStore(config.store);
      const { host: listen, port, workers } = config.server;
      const host = listen === '0.0.0.0' || listen === '::' ? '127.0.0.1' : listen;
      try {
        await seedDemo(store, `http://${host.includes(':') ? `[${host}]` : host}:${port}`);
      } catch (err) {
        await store.close();
        throw err;
      }
      if (!opts.serve) await store.close();
      else if (workers > 1)
        await store.close().then(async () => (await loadServer()).runCluster(config, inputFrom(cmd, { ...opts, port })));
      else await (await loadServer()).runServer(config, store);
    });
}
