import { Redis } from 'ioredis';

/** The Redis the tests use: a local one, or PLANTSTORE_TEST_REDIS_URL. */
export const REDIS_URL = process.env.PLANTSTORE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** Why the Redis tests cannot run (a skip reason), or false when Redis answers; in CI, Redis is required. */
export async function redisUnavailableReason(): Promise<string | false> {
  const probe = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 2000, retryStrategy: () => null });
  probe.on('error', () => {});
  try {
    await probe.connect();
    await probe.ping();
    return false;
  } catch (err) {
    const reason = `Redis not reachable at ${REDIS_URL}: ${(err as Error).message}`;
    if (process.env.CI === 'true') throw new Error(`CI=true requires Redis: ${reason}`);
    return `skipped: ${reason}`;
  } finally {
    probe.disconnect();
  }
}

/**
 * The test Redis's URL with a database number the server does not have: its `databases` setting (the first number
 * past the last database), or 16, the default, where CONFIG is not allowed.
 */
export async function urlOfMissingDatabase(): Promise<string> {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 0 });
  let databases = 16;
  try {
    const [, value] = (await redis.config('GET', 'databases')) as [string, string];
    databases = Number(value);
  } catch {
    // CONFIG is refused on many managed servers: the default then.
  } finally {
    redis.disconnect();
  }
  const url = new URL(REDIS_URL);
  url.pathname = `/${databases}`;
  return url.toString();
}
