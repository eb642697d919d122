import type { Command } from 'commander';
import { loadConfig, type Config, type ConfigInput } from '../config.js';
import { invalidInput } from '../errors.js';
import { openStore } from '../store/open-store.js';
import type { Store } from '../store/store.js';

/** The global `--db` flag (or PLANTSTORE_DB) and the rest of the config, validated once. */
export function configFrom(command: Command, extra: Omit<ConfigInput, 'db'> = {}): Config {
  const { db } = command.optsWithGlobals<{ db?: string }>();
  return loadConfig({ db, ...extra }, process.env);
}

/** Opens the store for one command and always closes it, even when the command fails. */
export async function withStore<T>(command: Command, run: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(configFrom(command));
  try {
    return await run(store);
  } finally {
    await store.close();
  }
}

export function parseId(what: string, text: string): number {
  if (!/^[1-9][0-9]{0,15}$/.test(text)) throw invalidInput(`invalid ${what} "${text}": expected a positive whole number`);
  return Number(text);
}
