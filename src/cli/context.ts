import type { Command } from 'commander';
import { loadConfig, type Config, type ConfigInput } from '../config.js';
import type { AdminStore, BulkStore, CredentialStore, Store, WebhookStore } from '../store/store.js';

/** The flags given to a command (the program's `--db` with the command's own). */
export function inputFrom(command: Command, extra: Omit<ConfigInput, 'db'> = {}): ConfigInput {
  const { db } = command.optsWithGlobals<{ db?: string }>();
  return { db, ...extra };
}

/** The global `--db` flag (or PLANTSTORE_DB) and the rest of the config, validated once. */
export function configFrom(command: Command, extra: Omit<ConfigInput, 'db'> = {}): Config {
  return loadConfig(inputFrom(command, extra), process.env);
}

// The storage layer (Kysely, both drivers) is loaded only by commands that open the database, so --help,
// --version and argument errors answer without paying for it.
export const loadStore = () => import('../store/open-store.js');

/**
 * Opens the store for one command and always closes it, even when the command fails. Only a command that
 * creates data (`create`) may create the database: any other one, given a path where there is none (a typo in
 * `--db`), says so instead of leaving a new empty database there.
 */
async function withStore<T>(command: Command, run: (store: Store) => Promise<T>, { create = false } = {}): Promise<T> {
  const config = configFrom(command);
  const store = await (await loadStore()).openStore(config.store, { create, oneShot: true });
  try {
    return await run(store);
  } finally {
    await store.close();
  }
}

type Options = { create?: boolean };

// Each command is given the role it uses (see store/store.ts).

/** Users, groups, plants, grants and tokens, one at a time. */
export const withAdmin = <T>(command: Command, run: (admin: AdminStore) => Promise<T>, options?: Options): Promise<T> =>
  withStore(command, run, options);

/** Tokens, named by their id or found by their hash. */
export const withTokens = <T>(command: Command, run: (store: AdminStore & Pick<CredentialStore, 'findToken'>) => Promise<T>): Promise<T> =>
  withStore(command, run);

/** The whole catalogue: import, export, counts. */
export const withBulk = <T>(command: Command, run: (bulk: BulkStore) => Promise<T>, options?: Options): Promise<T> =>
  withStore(command, run, options);

/** Webhook endpoints and deliveries. */
export const withWebhooks = <T>(command: Command, run: (webhooks: WebhookStore['webhooks']) => Promise<T>, options?: Options): Promise<T> =>
  withStore(command, (store) => run(store.webhooks), options);
