import type { Command } from 'commander';
import { OPERATOR } from '../../catalogue/access-rule.js';
import { invalidInput, notFound } from '../../catalogue/errors.js';
import { checkTagFilter } from '../../catalogue/names.js';
import type { PlantChange } from '../../catalogue/plant-fields.js';
import { parseId, parsePlantId } from '../../catalogue/plant-ids.js';
import type { PlantInfo } from '../../store/store.js';
import { withStore } from '../context.js';
import { examples } from '../help.js';
import { optionalText, printRecord, printRows, say, showSecretOrUndo, type Column } from '../output.js';

/** A plant as `list`, `show` and `update` print it. */
const PLANT_COLUMNS: Column<PlantInfo>[] = [
  { header: 'id', value: (p) => String(p.id) },
  { header: 'name', value: (p) => p.name },
  { header: 'tag', value: (p) => optionalText(p.tag) },
  { header: 'owner', value: (p) => p.owner },
  { header: 'public', value: (p) => (p.public ? 'yes' : 'no') },
];

/** The change `update`'s flags ask for: `--no-tag` sets the tag to false, which removes it (a merge patch's null). */
function plantChange(opts: { name?: string; tag?: string | false }): PlantChange {
  if (opts.name === undefined && opts.tag === undefined) throw invalidInput('give at least one of --name, --tag or --no-tag');
  return {
    ...(opts.name === undefined ? {} : { name: opts.name }),
    ...(opts.tag === undefined ? {} : { tag: opts.tag === false ? null : opts.tag }),
  };
}

export function registerPlantCommands(program: Command): void {
  const plants = program
    .command('plants')
    .description('manage plants')
    .addHelpText(
      'after',
      examples(
        'plantstore plants add --name Fern --owner alice',
        'plantstore plants list --owner alice --tag tropical',
        'plantstore plants show 42',
        'plantstore plants update 42 --name "Boston fern" --no-tag',
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
      const { outcome, id: added } = await withStore(cmd, async ({ plants }) => {
        const created = await plants.create(OPERATOR, {
          ...id,
          name: opts.name,
          owner: opts.owner,
          public: opts.public,
          ...(opts.tag === undefined ? {} : { tag: opts.tag }),
        });
        // A script reads the id to use the plant (`ID=$(plantstore plants add …)`): one it never got is taken
        // back, so that its retry, given no id, adds no second plant. One that was already there stays.
        if (created.outcome === 'created')
          await showSecretOrUndo(String(created.id), 'plant id', {
            run: () => plants.delete(OPERATOR, created.id),
            done: `plant ${created.id} is removed again: add it once more`,
            byHand: `plant ${created.id} was added ("plantstore plants remove ${created.id}" takes it away)`,
          });
        else process.stdout.write(`${created.id}\n`);
        return created;
      });
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
    .option('--tag <tag>', 'only plants with this tag')
    .option('--json', 'print a JSON array', false)
    .addHelpText(
      'after',
      examples('plantstore plants list', 'plantstore plants list --owner alice --json', 'plantstore plants list --tag tropical'),
    )
    .action(async (opts: { owner?: string; tag?: string; json: boolean }, cmd: Command) => {
      if (opts.tag !== undefined) checkTagFilter(opts.tag);
      const filter = { ...(opts.owner === undefined ? {} : { owner: opts.owner }), ...(opts.tag === undefined ? {} : { tag: opts.tag }) };
      const rows = await withStore(cmd, ({ plants }) => plants.list(filter));
      printRows(rows, PLANT_COLUMNS, opts.json);
    });

  plants
    .command('show <id>')
    .description('print one plant as the operator sees it: its id, name, tag, owner and public flag')
    .option('--json', 'print a JSON object', false)
    .addHelpText('after', examples('plantstore plants show 42', "plantstore plants show 42 --json | jq -r '.owner'"))
    .action(async (id: string, opts: { json: boolean }, cmd: Command) => {
      const [plant] = await withStore(cmd, ({ plants }) => plants.list({ id: parsePlantId(id) }));
      if (plant === undefined) throw notFound(`no plant with id ${id}`);
      printRecord(plant, PLANT_COLUMNS, opts.json);
    });

  // `--tag` and `--no-tag` set one value, the last one given winning: only their parsing tells that both were given.
  const tagFlags = new Set<string>();
  plants
    .command('update <id>')
    .description('change the name or tag of a plant (as PATCH /plants/{id} does); prints the plant as changed')
    .option('--name <name>', 'its new name')
    .option('--tag <tag>', 'its new tag')
    .option('--no-tag', 'remove its tag')
    .option('--json', 'print a JSON object', false)
    .on('option:tag', () => tagFlags.add('--tag'))
    .on('option:no-tag', () => tagFlags.add('--no-tag'))
    .addHelpText(
      'after',
      examples(
        'plantstore plants update 42 --name "Boston fern"',
        'plantstore plants update 42 --tag fern',
        'plantstore plants update 42 --no-tag',
      ),
    )
    .action(async (id: string, opts: { name?: string; tag?: string | false; json: boolean }, cmd: Command) => {
      if (tagFlags.size > 1) throw invalidInput('give --tag or --no-tag, not both');
      const change = plantChange(opts);
      const plantId = parsePlantId(id);
      const { before, written } = await withStore(cmd, async ({ plants }) => {
        // The owner and public flag, which a change keeps, are shown beside the fields it leaves.
        const [before] = await plants.list({ id: plantId });
        return { before, written: before === undefined ? undefined : await plants.update(OPERATOR, plantId, change) };
      });
      if (before === undefined || written === undefined || !('plant' in written)) throw notFound(`no plant with id ${id}`);
      const { owner, public: isPublic, createdAt } = before;
      printRecord({ ...written.plant, owner, public: isPublic, createdAt }, PLANT_COLUMNS, opts.json);
      say(
        written.outcome === 'changed'
          ? `changed plant ${id} (${written.plant.name})`
          : `plant ${id} (${written.plant.name}) was already as asked`,
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
