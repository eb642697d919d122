import type { Command } from 'commander';
import { loadConfig, type Config, type ConfigInput } from '../config.js';
import type { Store } from '../store/store.js';

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
 * Opens the store for one command and always closes it, even when the command fails; the command takes the roles
 * it uses (see store/store.ts). Only a command that creates data (`create`) may create the database: any other one,
 * given a path where there is none (a typo in `--db`), says so instead of leaving a new empty database there.
 */
export async function withStore<T>(command: Command, run: (store: Store) => Promise<T>, { create = false } = {}): Promise<T> {
  const config = configFrom(command);
  const store = await (await loadStore()).openStore(config.store, { create, oneShot: true });
  try {
    return await run(store);
  } finally {
    await store.close();
  }
}
