import type { Command } from 'commander';
import { generateToken, hashToken, TOKEN_PREFIX, tokenState } from '../../catalogue/tokens.js';
import { invalidInput, notFound } from '../../catalogue/errors.js';
import { parseDuration } from '../duration.js';
import { parseId } from '../../catalogue/plant-ids.js';
import { withStore } from '../context.js';
import { examples } from '../help.js';
import { isoDate, optionalText, printRows, refuseSecretToNowhere, say, showSecretOrUndo } from '../output.js';
import type { Credentials } from '../../store/store.js';

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
      refuseSecretToNowhere('token');
      const { token, hash } = generateToken();
      await withStore(cmd, async ({ tokens }) => {
        // One reading of the clock, once the store is open: the token lives exactly as long as asked.
        const createdAt = new Date();
        const expiresAt = lifetime === undefined ? undefined : new Date(createdAt.getTime() + lifetime);
        const info = await tokens.add({
          user,
          hash,
          createdAt,
          ...(opts.label === undefined ? {} : { label: opts.label }),
          ...(expiresAt ? { expiresAt } : {}),
        });
        await showSecretOrUndo(token, 'token', {
          run: () => tokens.revoke(info.id),
          done: `token ${info.id} is revoked, as nobody has it: create another`,
          byHand: `revoke token ${info.id} ("plantstore tokens revoke ${info.id}"), nobody has it`,
        });
        say(
          `created token ${info.id} for ${user}${expiresAt ? `, expiring ${expiresAt.toISOString()}` : ''}; store it now, it cannot be shown again`,
        );
      });
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
      const rows = await withStore(cmd, ({ tokens }) => tokens.list(opts.user === undefined ? {} : { user: opts.user }));
      const now = Date.now();
      const state = (t: (typeof rows)[number]) =>
        tokenState({ revokedAt: t.revokedAt?.getTime() ?? null, expiresAt: t.expiresAt?.getTime() ?? null }, now);
      printRows(
        rows.map((t) => ({ ...t, state: state(t) })),
        [
          { header: 'id', value: (t) => String(t.id) },
          { header: 'user', value: (t) => t.user },
          { header: 'label', value: (t) => optionalText(t.label) },
          { header: 'state', value: (t) => t.state },
          { header: 'created', value: (t) => isoDate(t.createdAt) },
          { header: 'expires', value: (t) => isoDate(t.expiresAt) },
        ],
        opts.json,
      );
    });

  tokens
    .command('revoke <id-or-token>')
    .description('revoke a token, named by its id (tokens list) or given itself; the next request with it is refused')
    .addHelpText('after', examples('plantstore tokens revoke 7', 'plantstore tokens revoke "$TOKEN"'))
    .action(async (given: string, _opts: unknown, cmd: Command) => {
      const { id, revoked } = await withStore(cmd, async ({ credentials, tokens }) => {
        const id = given.startsWith(TOKEN_PREFIX) ? await tokenIdOf(credentials, given) : tokenId(given);
        return { id, revoked: await tokens.revoke(id) };
      });
      say(revoked ? `revoked token ${id}` : `token ${id} was already revoked`);
    });
}

/** A token's id as typed; what is not one is not repeated in the error: it may be a secret pasted by mistake. */
function tokenId(given: string): number {
  if (!/^[0-9]+$/.test(given)) {
    throw invalidInput(`invalid token: give its id (tokens list shows them) or the token itself, which starts with ${TOKEN_PREFIX}`);
  }
  return parseId('token id', given);
}

/** The id of a token given itself, found by its hash; the token is never echoed. */
async function tokenIdOf(credentials: Pick<Credentials, 'findToken'>, token: string): Promise<number> {
  const found = await credentials.findToken(hashToken(token));
  if (found === undefined) throw notFound(`the token given is not one of this database's (${TOKEN_PREFIX}… not shown)`);
  return found.tokenId;
}
