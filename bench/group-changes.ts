import { openStore } from '../src/store/open-store.js';

// A process of its own that joins users to a group and takes them out again through the Store, as the CLI or
// another instance would, printing how long each change took as JSON: the large-groups rows of the bench
// (bench/large-groups.ts) run it beside a serving process, whose other users they measure meanwhile.
//   node --import tsx bench/group-changes.ts DB GROUP USER...

const [db, group, ...users] = process.argv.slice(2);
if (!db || !group || users.length === 0) throw new Error('usage: group-changes.ts DB GROUP USER...');

const store = await openStore({ db });
const timings: { join: number[]; leave: number[]; failures: string[] } = { join: [], leave: [], failures: [] };
const timed = async (into: number[], change: () => Promise<unknown>) => {
  const started = performance.now();
  try {
    await change();
    into.push(performance.now() - started);
  } catch (err) {
    timings.failures.push(`${(err as Error).message} after ${Math.round(performance.now() - started)} ms`);
  }
};
try {
  for (const user of users) {
    await timed(timings.join, () => store.groups.addMember(group, user));
    await timed(timings.leave, () => store.groups.removeMember(group, user));
  }
} finally {
  await store.close();
}
process.stdout.write(`${JSON.stringify(timings)}\n`);
