import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pino from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { lazyChildLogger } from '../../src/logger.js';

/** A pino logger at `level` writing into `lines`, and how many children it made. */
function parentLogger(level: string, lines: string[]): { logger: FastifyBaseLogger; children: () => number } {
  const logger = pino(
    { level },
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        lines.push(chunk.toString());
        callback();
      },
    }),
  );
  let children = 0;
  const child = logger.child.bind(logger);
  logger.child = ((...args: Parameters<typeof child>) => {
    children++;
    return child(...args);
  }) as typeof logger.child;
  return { logger: logger, children: () => children };
}

test("a request's logger makes its child on the first call that logs, and none for calls below the level", () => {
  const lines: string[] = [];
  const parent = parentLogger('warn', lines);
  const log = lazyChildLogger(parent.logger, { reqId: 'req-1' }, {});
  log.info('incoming request');
  log.debug('detail');
  log.silent('nothing');
  assert.equal(parent.children(), 0, 'no child for calls below the level');
  assert.equal(lines.length, 0);
  log.warn('slow client');
  log.info('still below the level');
  assert.equal(parent.children(), 1);
  assert.equal(lines.length, 1);
  const { msg, reqId, level } = JSON.parse(lines[0]!) as { msg: string; reqId: string; level: number };
  assert.deepEqual({ msg, reqId, level }, { msg: 'slow client', reqId: 'req-1', level: 40 });
});

test("a request's logger follows a route's own level, and a silent logger never logs", () => {
  const lines: string[] = [];
  const parent = parentLogger('warn', lines);
  lazyChildLogger(parent.logger, { reqId: 'req-2' }, { level: 'debug' }).info('logged at the route level');
  assert.equal(lines.length, 1);
  assert.equal(JSON.parse(lines[0]!).reqId, 'req-2');
  const silent = parentLogger('silent', lines);
  lazyChildLogger(silent.logger, { reqId: 'req-3' }, {}).fatal('never');
  assert.equal(silent.children(), 0);
  assert.equal(lines.length, 1);
});
