import type { Command } from 'commander';
import { invalidInput } from '../../catalogue/errors.js';
import { granteeText } from '../../catalogue/names.js';
import type { Grantee } from '../../store/store.js';
import { parsePlantId } from '../../catalogue/plant-ids.js';
import { withStore } from '../context.js';
import { examples } from '../help.js';
import { printRows, say } from '../output.js';

const describe = (g: Grantee): string => ('user' in g ? `user ${g.user}` : `group ${g.group}`);

function grantee(opts: { user?: string; group?: string }): Grantee {
  if ((opts.user === undefined) === (opts.group === undefined)) throw invalidInput('give exactly one of --user or --group');
  return opts.user !== undefined ? { user: opts.user } : { group: opts.group! };
}

export function registerGrantCommands(program: Command): void {
  const grants = program
    .command('grants')
    .description('share plants with users and groups')
    .addHelpText('after', examples('plantstore grants add 42 --group gardeners', 'plantstore grants list --plant 42'));

  grants
    .command('add <plant-id>')
    .description('share a plant with a user or a group')
    .option('--user <user>', 'the user to share with')
    .option('--group <group>', 'the group to share with')
    .addHelpText('after', examples('plantstore grants add 42 --user bob', 'plantstore grants add 42 --group gardeners'))
    .action(async (id: string, opts: { user?: string; group?: string }, cmd: Command) => {
      const to = grantee(opts);
      const added = await withStore(cmd, ({ grants }) => grants.add(parsePlantId(id), to));
      say(added ? `shared plant ${id} with ${describe(to)}` : `plant ${id} was already shared with ${describe(to)}`);
    });

  grants
    .command('remove <plant-id>')
    .description('stop sharing a plant with a user or a group')
    .option('--user <user>', 'the user')
    .option('--group <group>', 'the group')
    .addHelpText('after', examples('plantstore grants remove 42 --user bob', 'plantstore grants remove 42 --group gardeners'))
    .action(async (id: string, opts: { user?: string; group?: string }, cmd: Command) => {
      const from = grantee(opts);
      const removed = await withStore(cmd, ({ grants }) => grants.remove(parsePlantId(id), from));
      say(removed ? `stopped sharing plant ${id} with ${describe(from)}` : `plant ${id} was not shared with ${describe(from)}`);
    });

  grants
    .command('list')
    .description('list grants')
    .option('--plant <id>', 'only grants of this plant')
    .option('--json', 'print a JSON array', false)
    .addHelpText('after', examples('plantstore grants list', 'plantstore grants list --plant 42 --json'))
    .action(async (opts: { plant?: string; json: boolean }, cmd: Command) => {
      const filter = opts.plant === undefined ? {} : { plantId: parsePlantId(opts.plant) };
      const rows = await withStore(cmd, ({ grants }) => grants.list(filter));
      printRows(
        rows,
        [
          { header: 'plant', value: (g) => String(g.plantId) },
          { header: 'name', value: (g) => g.plantName },
          { header: 'grantee', value: (g) => granteeText(g.grantee, { marked: true }) },
        ],
        opts.json,
      );
    });
}
