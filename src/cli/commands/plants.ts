import type { Command } from 'commander';
import { OPERATOR } from '../../catalogue/access-rule.js';
import { notFound } from '../../catalogue/errors.js';
import { parseId, parsePlantId } from '../../catalogue/plant-ids.js';
import { withStore } from '../context.js';
import { examples } from '../help.js';
import { printRows, say } from '../output.js';

export function registerPlantCommands(program: Command): void {
  const plants = program
    .command('plants')
    .description('manage plants')
    .addHelpText(
      'after',
      examples(
        'plantstore plants add --name Fern --owner alice',
        'plantstore plants list --owner alice',
        'plantstore plants set-public 42',
      ),
    );

  plants
    .command('add')
    .description('add a plant; prints its id (the id of DELETE /plants/{id})')
    .requiredOption('--name <name>', 'the name of the plant')
    .option(
      '--id <id>',
      "its id, 1 to 2^53 - 1 (default: one more than the largest id ever used, deleted plants included, so it is never a deleted plant's)",
    )
    .requiredOption('--owner <user>', 'the user who owns it')
    .option('--tag <tag>', 'tag that specifies the type of the plant')
    .option('--public', 'every user sees it', false)
    .addHelpText(
      'after',
      examples(
        'plantstore plants add --name "Monstera deliciosa" --tag tropical --owner alice --public',
        'ID=$(plantstore plants add --name Fern --owner bob)',
      ),
    )
    .action(async (opts: { id?: string; name: string; owner: string; tag?: string; public: boolean }, cmd: Command) => {
      const id = opts.id === undefined ? {} : { id: parseId('plant id', opts.id) };
      const { outcome, id: added } = await withStore(cmd, ({ plants }) =>
        plants.create(OPERATOR, {
          ...id,
          name: opts.name,
          owner: opts.owner,
          public: opts.public,
          ...(opts.tag === undefined ? {} : { tag: opts.tag }),
        }),
      );
      process.stdout.write(`${added}\n`);
      say(
        outcome === 'created'
          ? `added plant ${added} (${opts.name}) for ${opts.owner}`
          : `plant ${added} (${opts.name}) of ${opts.owner} was already there`,
      );
    });

  plants
    .command('list')
    .description('list plants in catalogue order')
    .option('--owner <user>', 'only plants of this owner')
    .option('--json', 'print a JSON array', false)
    .addHelpText('after', examples('plantstore plants list', 'plantstore plants list --owner alice --json'))
    .action(async (opts: { owner?: string; json: boolean }, cmd: Command) => {
      const rows = await withStore(cmd, ({ plants }) => plants.list(opts.owner === undefined ? {} : { owner: opts.owner }));
      printRows(
        rows,
        [
          { header: 'id', value: (p) => String(p.id) },
          { header: 'name', value: (p) => p.name },
          { header: 'tag', value: (p) => p.tag ?? '-' },
          { header: 'owner', value: (p) => p.owner },
          { header: 'public', value: (p) => (p.public ? 'yes' : 'no') },
        ],
        opts.json,
      );
    });

  for (const [command, isPublic] of [
    ['set-public', true],
    ['set-private', false],
  ] as const) {
    plants
      .command(`${command} <id>`)
      .description(
        isPublic ? 'make a plant public: every user sees it' : 'make a plant private: only its owner, admins and its grantees see it',
      )
      .addHelpText('after', examples(`plantstore plants ${command} 42`))
      .action(async (id: string, _opts: unknown, cmd: Command) => {
        const changed = await withStore(cmd, ({ grants }) => grants.setPublic(parsePlantId(id), isPublic));
        const state = isPublic ? 'public' : 'private';
        say(changed ? `plant ${id} is now ${state}` : `plant ${id} was already ${state}`);
      });
  }

  plants
    .command('remove <id>')
    .description('remove a plant and its grants')
    .addHelpText('after', examples('plantstore plants remove 42'))
    .action(async (id: string, _opts: unknown, cmd: Command) => {
      const outcome = await withStore(cmd, ({ plants }) => plants.delete(OPERATOR, parsePlantId(id)));
      if (outcome !== 'deleted') throw notFound(`no plant with id ${id}`);
      say(`removed plant ${id}`);
    });
}
