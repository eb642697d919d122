#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { DomainError } from '../catalogue/errors.js';
import { forTerminal } from './output.js';
import { sqliteWriteFailure } from '../store/sqlite/sqlite-errors.js';
import { postgresWaitFailure } from '../store/postgres/postgres-errors.js';
import { registerCatalogueCommands } from './commands/catalogue.js';
import { registerDoctorCommand } from './commands/doctor.js';
import { registerGrantCommands } from './commands/grants.js';
import { registerGroupCommands } from './commands/groups.js';
import { registerPlantCommands } from './commands/plants.js';
import { registerServerCommands } from './commands/server.js';
import { registerTokenCommands } from './commands/tokens.js';
import { registerUserCommands } from './commands/users.js';
import { registerWebhookCommands } from './commands/webhooks.js';
import { examples, settingHelp } from './help.js';
import { SETTINGS } from '../settings.js';
import { VERSION } from '../version.js';

export function buildCli(): Command {
  const program = new Command('plantstore')
    .description('Plant Store: serve GET /plants and manage its users, groups, plants, grants and tokens')
    .version(VERSION)
    .option(SETTINGS.db.flag!, settingHelp(SETTINGS.db))
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText(
      'after',
      examples(
        'plantstore doctor',
        'plantstore users add alice && TOKEN=$(plantstore tokens create alice)',
        'plantstore --db postgres://plantstore@db.internal/plantstore serve --workers 4',
        'plantstore users --help',
      ),
    )
    .exitOverride()
    // Help and the version, read by `| head`, end as a command's output does.
    .configureOutput({
      writeOut: (text) => {
        endQuietlyWhenStdoutCloses();
        process.stdout.write(text);
      },
    })
    .hook('preAction', (_program, command) => {
      if (command.name() !== 'serve' && command.name() !== 'demo') endQuietlyWhenStdoutCloses();
    });
  registerServerCommands(program);
  registerUserCommands(program);
  registerGroupCommands(program);
  registerPlantCommands(program);
  registerGrantCommands(program);
  registerTokenCommands(program);
  registerCatalogueCommands(program);
  registerWebhookCommands(program);
  registerDoctorCommand(program);
  return program;
}

/**
 * A reader of stdout that goes away (`plantstore export | head -3`) ends the command at once and quietly, with
 * the status of a process killed by SIGPIPE (141), as it ends Unix tools. Any other failure to write stdout (a
 * full disk) ends it at once too, reported as every other failure is. Not for `serve`, which logs to stdout and
 * keeps serving when nobody reads its log.
 */
function endQuietlyWhenStdoutCloses(): void {
  if (process.stdout.listenerCount('error') > 0) return;
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(141);
    // Thrown from the listener, it would escape main() as an uncaught exception, with its stack.
    reportFailure(err);
    process.exit(1);
  });
}

/** Every failure is one line on stderr and a non-zero exit; stack traces only with PLANTSTORE_DEBUG=1. */
function reportFailure(err: unknown): void {
  if (process.env.PLANTSTORE_DEBUG === '1') console.error(err);
  const cause = (err as { cause?: unknown } | undefined)?.cause;
  // A write the store found the database unavailable for says why in its cause, in the words a command that meets
  // the database directly shows ("database is locked", the statement timeout's line).
  const shown = err instanceof DomainError && err.kind === 'unavailable' && cause instanceof Error ? cause : err;
  const message =
    sqliteWriteFailure(shown) ??
    sqliteWriteFailure(cause) ??
    postgresWaitFailure(shown) ??
    (shown instanceof DomainError || shown instanceof Error ? shown.message : String(shown));
  // The message may echo what was given (a name, a line of a file): shown whole on its one line, never
  // interpreted by the terminal.
  process.stderr.write(`plantstore: ${forTerminal(message)}\n`);
  process.exitCode = 1;
}

/**
 * `help users add` as `users add --help`: Commander's help command reads one word after it, so it showed the help
 * of `users`. The global options (`--db X`) may come first.
 */
export function helpOfPath(argv: readonly string[]): string[] {
  const [node, script, ...args] = argv;
  let first = 0;
  while (first < args.length && args[first]!.startsWith('-')) first += args[first] === '--db' ? 2 : 1;
  if (args[first] !== 'help' || args.length - first < 3) return [...argv];
  return [node!, script!, ...args.slice(0, first), ...args.slice(first + 1), '--help'];
}

async function main(): Promise<void> {
  try {
    await buildCli().parseAsync(helpOfPath(process.argv));
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander already printed its message (or help / version); keep its exit code.
      process.exitCode = err.exitCode;
      return;
    }
    reportFailure(err);
  }
}

await main();
