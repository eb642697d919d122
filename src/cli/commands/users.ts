import type { Command } from 'commander';
import { invalidInput } from '../../catalogue/errors.js';
import { checkNewUserName } from '../../catalogue/names.js';
import { withStore } from '../context.js';
import { examples } from '../help.js';
import { isoDate, printRows, say } from '../output.js';

export function registerUserCommands(program: Command): void {
  const users = program
    .command('users')
    .description('manage users')
    .addHelpText('after', examples('plantstore users add alice', 'plantstore users list --json'));

  users
    .command('add <name>')
    .description('add a user')
    .option('--admin', 'the user sees every plant', false)
    .addHelpText('after', examples('plantstore users add alice', 'plantstore users add root --admin'))
    .action(async (name: string, opts: { admin: boolean }, cmd: Command) => {
      // Checked before the store opens, which may create the database: a refused name leaves no file behind.
      checkNewUserName(name);
      await withStore(cmd, ({ users }) => users.add(name, opts.admin), { create: true });
      say(`added user ${name}${opts.admin ? ' (admin)' : ''}`);
    });

  users
    .command('set-admin <name> <on|off>')
    .description('make a user an admin, or not')
    .addHelpText('after', examples('plantstore users set-admin alice on', 'plantstore users set-admin alice off'))
    .action(async (name: string, flag: string, _opts: unknown, cmd: Command) => {
      if (flag !== 'on' && flag !== 'off') throw invalidInput(`expected "on" or "off", not "${flag}"`);
      const changed = await withStore(cmd, ({ users }) => users.setAdmin(name, flag === 'on'));
      if (flag === 'on') say(changed ? `${name} is now an admin` : `${name} was already an admin`);
      else say(changed ? `${name} is no longer an admin` : `${name} was already not an admin`);
    });

  users
    .command('list')
    .description('list users')
    .option('--json', 'print a JSON array', false)
    .addHelpText('after', examples('plantstore users list', "plantstore users list --json | jq -r '.[] | select(.admin) | .name'"))
    .action(async (opts: { json: boolean }, cmd: Command) => {
      const rows = await withStore(cmd, ({ users }) => users.list());
      printRows(
        rows,
        [
          { header: 'name', value: (u) => u.name },
          { header: 'admin', value: (u) => (u.admin ? 'yes' : 'no') },
          { header: 'created', value: (u) => isoDate(u.createdAt) },
        ],
        opts.json,
      );
    });

  users
    .command('remove <name>')
    .description('remove a user, with their tokens, grants and memberships')
    .option('--with-plants', 'also remove the plants the user owns', false)
    .addHelpText('after', examples('plantstore users remove bob', 'plantstore users remove bob --with-plants'))
    .action(async (name: string, opts: { withPlants: boolean }, cmd: Command) => {
      await withStore(cmd, ({ users }) => users.remove(name, { withPlants: opts.withPlants }));
      say(`removed user ${name}`);
    });
}
