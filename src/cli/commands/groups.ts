import type { Command } from 'commander';
import { checkNewGroupName } from '../../catalogue/names.js';
import { withStore } from '../context.js';
import { examples } from '../help.js';
import { printRows, say } from '../output.js';

export function registerGroupCommands(program: Command): void {
  const groups = program
    .command('groups')
    .description('manage groups of users')
    .addHelpText('after', examples('plantstore groups add gardeners', 'plantstore groups add-member gardeners alice bob'));

  groups
    .command('add <name>')
    .description('add a group')
    .addHelpText('after', examples('plantstore groups add gardeners'))
    .action(async (name: string, _opts: unknown, cmd: Command) => {
      // Checked before the store opens, which may create the database: a refused name leaves no file behind.
      checkNewGroupName(name);
      await withStore(cmd, ({ groups }) => groups.add(name), { create: true });
      say(`added group ${name}`);
    });

  groups
    .command('remove <name>')
    .description('remove a group (its members and grants go with it)')
    .addHelpText('after', examples('plantstore groups remove gardeners'))
    .action(async (name: string, _opts: unknown, cmd: Command) => {
      await withStore(cmd, ({ groups }) => groups.remove(name));
      say(`removed group ${name}`);
    });

  groups
    .command('add-member <group> <users...>')
    .description('add users to a group: all of them, or none if one is not found')
    .addHelpText('after', examples('plantstore groups add-member gardeners alice bob'))
    .action(async (group: string, users: string[], _opts: unknown, cmd: Command) => {
      const added = await withStore(cmd, ({ groups }) => groups.addMembers(group, users));
      users.forEach((user, i) => say(added[i] ? `added ${user} to group ${group}` : `${user} was already in group ${group}`));
    });

  groups
    .command('remove-member <group> <user>')
    .description('remove a user from a group')
    .addHelpText('after', examples('plantstore groups remove-member gardeners bob'))
    .action(async (group: string, user: string, _opts: unknown, cmd: Command) => {
      const removed = await withStore(cmd, ({ groups }) => groups.removeMember(group, user));
      say(removed ? `removed ${user} from group ${group}` : `${user} was not in group ${group}`);
    });

  groups
    .command('list')
    .description('list groups and their members')
    .option('--json', 'print a JSON array', false)
    .addHelpText('after', examples('plantstore groups list', 'plantstore groups list --json'))
    .action(async (opts: { json: boolean }, cmd: Command) => {
      const rows = await withStore(cmd, ({ groups }) => groups.list());
      printRows(
        rows,
        [
          { header: 'name', value: (g) => g.name },
          { header: 'members', value: (g) => g.members.map(memberInList).join(', ') },
        ],
        opts.json,
      );
    });
}

/**
 * A member as the members column shows it: a name holding a comma, or starting with a quote, as a JSON string, so
 * that the column splits back into the names it lists.
 */
const memberInList = (name: string): string => (name.includes(',') || name.startsWith('"') ? JSON.stringify(name) : name);
