import { Redis } from 'ioredis';
import { refusedDatabase } from '../../http/rate-limit-counters.js';
import { fail, ok, reason, skip, warn, type Check } from './check.js';
import { withoutPassword } from './postgres.js';

/**
 * Whether the Redis that holds the shared rate-limit counters (requests and writes) answers, and can run the counters' script. serve
 * starts without it and serves without rate limits while it cannot reach it, so only this check says so beforehand.
 */
export async function redisChecks(url: string | undefined, prefix: string, limited: boolean): Promise<Check[]> {
  if (url === undefined) return [skip('redis', 'not configured: each process keeps its own rate-limit counters')];
  const where = withoutPassword(url);
  if (!limited) {
    return [
      warn(
        'redis',
        `${where} is configured, but both rate limits are off: nothing uses it`,
        'set --rate-limit or --write-rate-limit, or drop --redis-url',
      ),
    ];
  }
  const fix = 'check --redis-url / PLANTSTORE_REDIS_URL and that this host can reach Redis: serve runs without rate limits while it cannot';
  let redis: Redis | undefined;
  // connect() rejects with "Connection is closed" alone; the cause (ECONNREFUSED, WRONGPASS) comes as an event.
  let cause: unknown;
  try {
    // Inside the try: whatever ioredis throws on a URL is a failed check, never a crash of doctor.
    redis = new Redis(url, {
      lazyConnect: true,
      connectTimeout: 3_000,
      commandTimeout: 3_000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    redis.on('error', (err) => {
      cause ??= err;
    });
    await redis.connect();
    // A refused SELECT comes as an event only, before 'ready', and the connection goes on in database 0.
    const database = refusedDatabase(cause);
    if (database !== undefined) {
      return [
        fail(
          'redis',
          `cannot use Redis at ${where}: it refuses database ${database} (${reason(cause)})`,
          'use a database number the server has (0 to 15 with the default "databases 16") in --redis-url / PLANTSTORE_REDIS_URL: serve runs without rate limits while it refuses it',
        ),
      ];
    }
    const version = /^redis_version:(.+)$/m.exec(await redis.info('server'))?.[1]?.trim() ?? 'unknown version';
    // The counters are a Lua script: a server or user without EVAL could not count a request.
    await redis.eval('return 1', 0);
    return [ok('redis', `${where} answers (Redis ${version}); rate-limit counters under the prefix "${prefix}"`)];
  } catch (err) {
    return [fail('redis', `cannot use Redis at ${where}: ${reason(cause ?? err)}`, fix)];
  } finally {
    redis?.disconnect();
  }
}
