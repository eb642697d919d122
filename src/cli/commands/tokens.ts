import type { Command } from 'commander';
import { generateToken, tokenState } from '../../catalogue/tokens.js';
import { invalidInput } from '../../catalogue/errors.js';
import { parseDuration } from '../duration.js';
import { parseId } from '../../catalogue/plant-ids.js';
import { withAdmin } from '../context.js';
import { examples } from '../help.js';
import { isoDate, printRows, say } from '../output.js';

export function registerTokenCommands(program: Command): void {
  const tokens = program
    .command('tokens')
    .description('issue, list and revoke bearer tokens')
    .addHelpText('after', examples('TOKEN=$(plantstore tokens create alice --expires-in 30d)', 'plantstore tokens list --user alice'));

  tokens
    .command('create <user>')
    .description('issue a bearer token for a user; prints the token alone (it is shown only this once)')
    .option('--expires-in <duration>', 'lifetime, e.g. 90s, 15m, 12h, 30d, 2w (default: no expiry)')
    .option('--label <text>', 'a note to recognise the token by')
    .addHelpText(
      'after',
      examples(
        'TOKEN=$(plantstore tokens create alice --expires-in 30d --label laptop)',
        'plantstore tokens create ci-bot --expires-in 12h',
      ),
    )
    .action(async (user: string, opts: { expiresIn?: string; label?: string }, cmd: Command) => {
      const lifetime = opts.expiresIn === undefined ? undefined : parseDuration(opts.expiresIn);
      if (lifetime === 0)
        throw invalidInput(
          `invalid --expires-in "${opts.expiresIn}": a token must live longer than 0; leave --expires-in out for no expiry`,
        );
      const expiresAt = lifetime === undefined ? undefined : new Date(Date.now() + lifetime);
      const { token, hash } = generateToken();
      const info = await withAdmin(cmd, (admin) =>
        admin.addToken({ user, hash, ...(opts.label === undefined ? {} : { label: opts.label }), ...(expiresAt ? { expiresAt } : {}) }),
      );
      process.stdout.write(`${token}\n`);
      say(
        `created token ${info.id} for ${user}${expiresAt ? `, expiring ${expiresAt.toISOString()}` : ''}; store it now, it cannot be shown again`,
      );
    });

  tokens
    .command('list')
    .description('list tokens (never their values)')
    .option('--user <user>', 'only tokens of this user')
    .option('--json', 'print a JSON array', false)
    .addHelpText(
      'after',
      examples('plantstore tokens list', 'plantstore tokens list --user alice --json | jq \'.[] | select(.state == "active") | .id\''),
    )
    .action(async (opts: { user?: string; json: boolean }, cmd: Command) => {
      const rows = await withAdmin(cmd, (admin) => admin.listTokens(opts.user === undefined ? {} : { user: opts.user }));
      const now = Date.now();
      const state = (t: (typeof rows)[number]) =>
        tokenState({ revokedAt: t.revokedAt?.getTime() ?? null, expiresAt: t.expiresAt?.getTime() ?? null }, now);
      printRows(
        rows.map((t) => ({ ...t, state: state(t) })),
        [
          { header: 'id', value: (t) => String(t.id) },
          { header: 'user', value: (t) => t.user },
          { header: 'label', value: (t) => t.label ?? '-' },
          { header: 'state', value: (t) => t.state },
          { header: 'created', value: (t) => isoDate(t.createdAt) },
          { header: 'expires', value: (t) => isoDate(t.expiresAt) },
        ],
        opts.json,
      );
    });

  tokens
    .command('revoke <id>')
    .description('revoke a token; the next request with it is refused')
    .addHelpText('after', examples('plantstore tokens revoke 7'))
    .action(async (id: string, _opts: unknown, cmd: Command) => {
      const revoked = await withAdmin(cmd, (admin) => admin.revokeToken(parseId('token id', id)));
      say(revoked ? `revoked token ${id}` : `token ${id} was already revoked`);
    });
}
