import { parseArgs } from 'node:util';
import BetterSqlite3 from 'better-sqlite3';

// The limit a SQLite write is measured against: the same plant rows, inserted by this process alone into the same
// schema (its triggers included) at the same durability (WAL, synchronous=FULL), a thousand rows a transaction, for
// the given seconds. The same rows: owned in turn by `--owners` users from id `--first-owner`, as the service's
// creates are by the tokens in rotation (one owner alone would append to one place of the owner index, which many
// owners do not). Prints {"rows","seconds"}; the caller reads this process's CPU time from /proc.

const { values: args } = parseArgs({
  options: {
    db: { type: 'string' },
    seconds: { type: 'string', default: '5' },
    first: { type: 'string', default: '1' },
    'first-owner': { type: 'string', default: '1' },
    owners: { type: 'string', default: '1' },
  },
});

const db = new BetterSqlite3(args.db, { fileMustExist: true });
db.pragma('journal_mode = WAL');
db.pragma('synchronous = FULL');
db.pragma('foreign_keys = ON');
db.pragma('busy_timeout = 5000');
const insert = db.prepare('INSERT INTO plants (api_id, name, tag, owner_id, is_public, created_at) VALUES (?, ?, NULL, ?, 0, ?)');
const [firstOwner, owners, first] = [Number(args['first-owner']), Number(args.owners), Number(args.first)];
const batch = db.transaction((from: number, count: number) => {
  const now = Date.now();
  for (let id = from; id < from + count; id++) insert.run(id, `Written #${id}`, firstOwner + ((id - first) % owners), now);
});

process.stdout.write('writing\n');
const started = performance.now();
const until = started + Number(args.seconds) * 1000;
let next = Number(args.first);
while (performance.now() < until) {
  batch(next, 1000);
  next += 1000;
}
const seconds = (performance.now() - started) / 1000;
db.close();
process.stdout.write(`${JSON.stringify({ rows: next - Number(args.first), seconds })}\n`);
