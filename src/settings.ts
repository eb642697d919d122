import { DomainError, invalidInput } from './catalogue/errors.js';
import { isPostgresUrl } from './store/open-store.js';
import { CORS_METHODS, CORS_READABLE_HEADERS, CORS_REQUEST_HEADERS } from './http/cors.js';

/**
 * Every setting of the service, once: its flag, its environment variable, its default, how its text is read,
 * and what it means. `Config` (config.ts), the options of `serve`, `demo` and `doctor`, and the README's
 * configuration tables (README.md, docs/identity-providers.md) are all derived from this table; a test compares them.
 *
 * A flag wins over its variable, which wins over the default. Every setting has a flag except the JWT secret
 * itself, which would show in the process list (its file has one).
 */
export interface Setting<T, Into extends readonly string[] = readonly string[]> {
  /** `--port <port>`; the option's key in `ConfigInput` is its camel-cased name (`port`). */
  readonly flag: string | undefined;
  readonly env: string;
  /** Text read as if given, when neither the flag nor the variable is; undefined: not set. */
  readonly default: string | undefined;
  /** The default as the README's table shows it, when it is not the default text in backquotes. */
  readonly shownDefault?: string;
  /** One line for `--help`. */
  readonly summary: string;
  /** The README's "Meaning" column (Markdown). */
  readonly meaning: string;
  /** The README table the setting is listed in. */
  readonly table: 'service' | 'jwt';
  /**
   * Where its value goes in `Config` (config.ts), as dotted paths: `app.listings.perProcess`. Empty for a setting
   * that config.ts reads together with others (the metrics listener, the JWT settings); config.ts checks at compile
   * time that each path is a slot of the value's type and that every slot is filled.
   */
  readonly into: Into;
  /** Reads the text (undefined when not set and no default); throws an invalid-input error naming what is wrong. */
  readonly parse: (text: string | undefined) => T;
}

// Readers of a setting's text. `what` names the setting in error messages, until readSettings names it as given.

/** A setting's text that its reader refuses, and why: readSettings says it again under the name the user typed. */
class RefusedSetting extends DomainError {
  constructor(
    what: string,
    readonly text: string,
    readonly reason: string,
  ) {
    super('invalid_input', text === '' ? `invalid ${what}: ${reason}` : `invalid ${what} "${text}": ${reason}`);
  }
}

const refuse = (what: string, text: string | undefined, reason: string) => new RefusedSetting(what, text ?? '', reason);

function wholeNumber(what: string, min: number, max: number): (text: string | undefined) => number {
  return (text) => {
    const value = (text ?? '').trim();
    if (!/^[0-9]+$/.test(value) || Number(value) < min || Number(value) > max) {
      throw refuse(what, text, `expected a whole number from ${min} to ${max}`);
    }
    return Number(value);
  };
}

function optionalWholeNumber(what: string, min: number, max: number): (text: string | undefined) => number | undefined {
  const read = wholeNumber(what, min, max);
  return (text) => (text === undefined || text === '' ? undefined : read(text));
}

function seconds(what: string, max: number): (text: string | undefined) => number {
  return (text) => {
    const value = (text ?? '').trim();
    if (!/^[0-9]+$/.test(value) || Number(value) > max) throw refuse(what, text, `expected whole seconds from 0 to ${max}`);
    return Number(value);
  };
}

function boolean(what: string): (text: string | undefined) => boolean {
  return (text) => {
    const value = (text ?? '').trim().toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(value)) return true;
    if (['0', 'false', 'no', 'off'].includes(value)) return false;
    throw refuse(what, text, 'expected true or false');
  };
}

function oneOf<const T extends string>(what: string, values: readonly T[], { lowerCase = false } = {}): (text: string | undefined) => T {
  return (text) => {
    const value = lowerCase ? (text ?? '').trim().toLowerCase() : (text ?? '');
    if (!(values as readonly string[]).includes(value))
      throw refuse(what, text, `expected ${values.join(', ').replace(/, ([^,]*)$/, ' or $1')}`);
    return value as T;
  };
}

function nonEmpty(what: string): (text: string | undefined) => string {
  return (text) => {
    if ((text ?? '').trim() === '') throw refuse(what, '', 'must not be empty');
    return text!;
  };
}

/** Any text, or undefined when unset or empty. */
const optionalText = (text: string | undefined): string | undefined => (text === undefined || text === '' ? undefined : text);

/** Comma-separated values, trimmed, empty ones dropped. */
const commaList = (text: string | undefined): string[] =>
  (text ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

const setting = <T, const Into extends readonly string[]>(s: Setting<T, Into>): Setting<T, Into> => s;

export const SETTINGS = {
  db: setting({
    flag: '--db <path-or-url>',
    env: 'PLANTSTORE_DB',
    default: './data/plantstore.db',
    summary: 'SQLite database file or postgres:// URL',
    meaning:
      'A SQLite file (created and migrated on first use) or a `postgres://` URL (migrated on start). A `?schema=NAME` parameter on the URL puts Plant Store in a schema of its own.',
    table: 'service',
    into: ['store.db'],
    parse: (text) => {
      const db = nonEmpty('database: PLANTSTORE_DB / --db')(text);
      // Another scheme's URL is a typo or another database, never a SQLite file to create under that name. Only
      // the scheme is shown: the rest may hold a password.
      const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(db)?.[1];
      if (scheme !== undefined && !isPostgresUrl(db)) {
        throw invalidInput(`invalid database: PLANTSTORE_DB / --db is a SQLite file or a postgres:// URL, not a ${scheme}:// URL`);
      }
      return db;
    },
  }),
  readDb: setting({
    flag: '--read-db <url>',
    env: 'PLANTSTORE_READ_DB',
    default: undefined,
    shownDefault: 'none',
    summary: 'PostgreSQL read replica for listings',
    meaning: 'PostgreSQL read replica for listings (see Deployment).',
    table: 'service',
    into: ['store.readDb'],
    parse: (text) => {
      if (text !== undefined && text !== '' && !isPostgresUrl(text)) {
        throw invalidInput('invalid read database: PLANTSTORE_READ_DB / --read-db must be a postgres:// URL');
      }
      return optionalText(text);
    },
  }),
  workers: setting({
    flag: '--workers <n>',
    env: 'PLANTSTORE_WORKERS',
    default: '1',
    summary: 'HTTP worker processes sharing the port; dead ones are replaced',
    meaning:
      '`serve` forks N HTTP worker processes sharing the port; dead workers are replaced, but if one dies before any has listened (a port taken), `serve` stops with exit 1.',
    table: 'service',
    into: ['server.workers'],
    parse: wholeNumber('workers', 1, 256),
  }),
  pgPoolSize: setting({
    flag: '--pg-pool-size <n>',
    env: 'PLANTSTORE_PG_POOL_SIZE',
    default: '10',
    summary: 'PostgreSQL connections per pool (a process has two: listings, and the rest)',
    meaning: 'PostgreSQL connections per pool; each process (each worker) has two pools, one for listings and one for the rest.',
    table: 'service',
    into: ['store.poolSize'],
    parse: wholeNumber('pool size', 1, 1000),
  }),
  pgStatementTimeoutMs: setting({
    flag: '--pg-statement-timeout-ms <ms>',
    env: 'PLANTSTORE_PG_STATEMENT_TIMEOUT_MS',
    default: '5000',
    summary: 'PostgreSQL statement timeout',
    meaning:
      'PostgreSQL statement timeout; a query that runs longer fails with `503`, as does one on a connection that has not answered for 2 s past it. `import` and `export` run without it (one long statement each, by design).',
    table: 'service',
    into: ['store.statementTimeoutMs'],
    parse: wholeNumber('statement timeout', 1, 3_600_000),
  }),
  host: setting({
    flag: '--host <host>',
    env: 'PLANTSTORE_HOST',
    default: '127.0.0.1',
    summary: 'address to listen on',
    meaning: 'Address `serve` listens on (`0.0.0.0` for all interfaces).',
    table: 'service',
    into: ['server.host'],
    parse: nonEmpty('host'),
  }),
  port: setting({
    flag: '--port <port>',
    env: 'PLANTSTORE_PORT',
    default: '8080',
    summary: 'port to listen on',
    meaning: 'Port `serve` listens on.',
    table: 'service',
    into: ['server.port'],
    parse: wholeNumber('port', 0, 65535),
  }),
  logLevel: setting({
    flag: '--log-level <level>',
    env: 'PLANTSTORE_LOG_LEVEL',
    default: 'info',
    summary: 'fatal, error, warn, info, debug, trace or silent',
    meaning: '`fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`.',
    table: 'service',
    into: ['server.logLevel', 'app.logLevel'],
    parse: oneOf('log level', LOG_LEVELS),
  }),
  logRequests: setting({
    flag: '--log-requests <bool>',
    env: 'PLANTSTORE_LOG_REQUESTS',
    default: 'true',
    summary: 'one log line per request and response',
    meaning: 'One JSON log line per request and response (never headers).',
    table: 'service',
    into: ['app.logRequests'],
    parse: boolean('request logging'),
  }),
  shutdownGraceSeconds: setting({
    flag: '--shutdown-grace-seconds <s>',
    env: 'PLANTSTORE_SHUTDOWN_GRACE_SECONDS',
    default: '10',
    summary: 'time to finish in-flight requests on SIGTERM, SIGINT or SIGHUP',
    meaning:
      'On SIGTERM, SIGINT or SIGHUP: time to finish in-flight requests before exiting (with status 0; 1 when requests were still open at its end, with `--workers` too). Another stop signal meanwhile changes nothing; SIGKILL ends it at once.',
    table: 'service',
    into: ['server.shutdownGraceSeconds'],
    parse: wholeNumber('shutdown grace', 0, 3600),
  }),
  cache: setting({
    flag: '--cache <bool>',
    env: 'PLANTSTORE_CACHE',
    default: 'true',
    summary: 'in-memory caches of token checks, JWT users and pages',
    meaning:
      'In-memory caches of token checks, JWT users and pages of listings; a committed change drops only the entries it can affect (see [Consistency and caching](docs/deployment.md#consistency-and-caching)).',
    table: 'service',
    into: ['app.cache'],
    parse: boolean('cache'),
  }),
  corsOrigins: setting({
    flag: '--cors-origins <list>',
    env: 'PLANTSTORE_CORS_ORIGINS',
    default: '',
    shownDefault: 'none (CORS off)',
    summary: 'comma-separated browser origins allowed cross-origin, or *',
    meaning: `Comma-separated browser origins allowed to call the API from another origin (\`https://app.example,http://localhost:3000\`), or \`*\` for any. Exact origins only: scheme, host and port, no path. Allowed origins get ${codeList(CORS_METHODS)} (preflights with ${codeList(CORS_REQUEST_HEADERS)}), and can read ${codeList(CORS_READABLE_HEADERS)}; without this setting no \`Access-Control-*\` header is ever sent.`,
    table: 'service',
    into: ['app.corsOrigins'],
    parse: corsOrigins,
  }),
  rateLimit: setting({
    flag: '--rate-limit <n/window>',
    env: 'PLANTSTORE_RATE_LIMIT',
    // 500 requests a second per token, sustained: no interactive or batch client comes near it, nor do the
    // benchmark's tokens, whose rounds alternate with the ceiling's; yet one leaked or runaway token cannot take
    // the service.
    default: '30000/1m',
    summary: 'requests per token per window, e.g. 30000/1m, or off',
    meaning:
      'Requests per window per token: `<requests>/<window>` with a window in `ms`, `s`, `m` or `h` (`100/10s`), or `off`. See [Limits](#limits-and-rate-limiting).',
    table: 'service',
    into: ['app.rateLimit'],
    parse: (text) => parseRateLimit(text ?? ''),
  }),
  writeRateLimit: setting({
    flag: '--write-rate-limit <n/window>',
    env: 'PLANTSTORE_WRITE_RATE_LIMIT',
    // Ten creates, changes or deletes a second per user, sustained: more than a person or an application's own users
    // make, while a runaway client adds at most 864,000 plants a day; bulk loads go through `import`.
    default: '600/1m',
    summary:
      'writes (creates, changes, deletes, access changes) per user per window, e.g. 600/1m, or off; a malformed one counts for nothing',
    meaning:
      "Writes per window per user, every token and JWT of the user together, on top of the per-token limit: `<requests>/<window>` as for `--rate-limit`, or `off`. A write is an authenticated `POST /plants`, `PATCH /plants/{id}`, `DELETE /plants/{id}`, `PUT /plants/{id}/access`, or `PUT` or `DELETE` of `/plants/{id}/access/users/{name}` or `…/groups/{name}`; it counts whatever it then answers (`403`, `404`, `409`, `412`, `422`). One refused as malformed (any `400`: an id, query or body not of the operation's schema, a name or tag the rules refuse, a malformed `If-Match`; or `401`, the per-token `429`, `406`, `413`, `415`, a create's `412`) counts for nothing, as does every read. Past it, `429` (42903) with `Retry-After`. See [Limits](#limits-and-rate-limiting).",
    table: 'service',
    into: ['app.writeRateLimit'],
    parse: (text) => parseRateLimit(text ?? ''),
  }),
  redisUrl: setting({
    flag: '--redis-url <url>',
    env: 'PLANTSTORE_REDIS_URL',
    default: undefined,
    shownDefault: 'none',
    summary: 'Redis holding the rate-limit counters shared by all instances',
    meaning:
      '`redis://` or `rediss://` URL, `redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DATABASE]`, without query parameters: rate-limit counters shared by every instance and worker. `DATABASE` is a number, 0 to 15 on a server with the default `databases 16`; one the server refuses is logged as an error and the counters count as away (see [Limits](#limits-and-rate-limiting)). Without it, each process counts on its own.',
    table: 'service',
    into: ['app.redisUrl'],
    parse: redisUrl,
  }),
  redisKeyPrefix: setting({
    flag: '--redis-key-prefix <prefix>',
    env: 'PLANTSTORE_REDIS_KEY_PREFIX',
    default: 'plantstore:ratelimit:',
    summary: 'prefix of the counter keys in Redis',
    meaning: 'Prefix of the counter keys in Redis.',
    table: 'service',
    into: ['app.redisKeyPrefix'],
    parse: (text) => text ?? '',
  }),
  maxHeaderBytes: setting({
    flag: '--max-header-bytes <n>',
    env: 'PLANTSTORE_MAX_HEADER_BYTES',
    default: '16384',
    summary: 'request line plus headers; more is a 431',
    meaning: 'Request line plus headers; more is a `431`.',
    table: 'service',
    into: ['app.http.maxHeaderBytes'],
    parse: wholeNumber('maximum header size', 1024, 1_048_576),
  }),
  maxUrlBytes: setting({
    flag: '--max-url-bytes <n>',
    env: 'PLANTSTORE_MAX_URL_BYTES',
    default: '8192',
    summary: 'request target (path and query); more is a 414',
    meaning:
      'Request target (path and query); more is a `414`. At most the header limit, which counts the request line too (a larger value is refused at start).',
    table: 'service',
    into: ['app.http.maxUrlBytes'],
    parse: wholeNumber('maximum URL size', 64, 1_048_576),
  }),
  headersTimeoutMs: setting({
    flag: '--headers-timeout-ms <ms>',
    env: 'PLANTSTORE_HEADERS_TIMEOUT_MS',
    default: '10000',
    summary: 'time to receive the request line and headers',
    meaning: 'Time to receive the request line and headers (slow-header clients); then `408` and the connection closes.',
    table: 'service',
    into: ['app.http.headersTimeoutMs'],
    parse: wholeNumber('headers timeout', 1, 3_600_000),
  }),
  requestTimeoutMs: setting({
    flag: '--request-timeout-ms <ms>',
    env: 'PLANTSTORE_REQUEST_TIMEOUT_MS',
    default: '30000',
    summary: 'time to receive a whole request',
    meaning: 'Time to receive a whole request; at least the headers timeout.',
    table: 'service',
    into: ['app.http.requestTimeoutMs'],
    parse: wholeNumber('request timeout', 1, 3_600_000),
  }),
  keepAliveTimeoutMs: setting({
    flag: '--keep-alive-timeout-ms <ms>',
    env: 'PLANTSTORE_KEEP_ALIVE_TIMEOUT_MS',
    default: '72000',
    summary: 'idle time of a keep-alive connection',
    meaning: 'Idle keep-alive connections are closed after this (longer than the 60 s idle timeout of common load balancers).',
    table: 'service',
    into: ['app.http.keepAliveTimeoutMs'],
    parse: wholeNumber('keep-alive timeout', 1, 3_600_000),
  }),
  maxConnections: setting({
    flag: '--max-connections <n>',
    env: 'PLANTSTORE_MAX_CONNECTIONS',
    default: '10000',
    summary: 'open connections per process',
    meaning: 'Open connections per process (per worker); connections beyond it are closed as soon as they arrive.',
    table: 'service',
    into: ['app.http.maxConnections'],
    parse: wholeNumber('maximum connections', 1, 1_000_000),
  }),
  maxListings: setting({
    flag: '--max-listings <n>',
    env: 'PLANTSTORE_MAX_LISTINGS',
    default: '16',
    summary: 'full listings streamed at once per process (then 503)',
    meaning: 'Full listings (no `limit`, or above 1000) streamed at once per process; more get `503` with `Retry-After`.',
    table: 'service',
    into: ['app.listings.perProcess'],
    parse: wholeNumber('maximum listings', 1, 100_000),
  }),
  maxListingsPerUser: setting({
    flag: '--max-listings-per-user <n>',
    env: 'PLANTSTORE_MAX_LISTINGS_PER_USER',
    default: '4',
    summary: 'full listings streamed at once for one user (then 429)',
    meaning:
      'Full listings streamed at once for one user (all their tokens) by one serving process (each worker and instance counts its own); more get `429` with `Retry-After`.',
    table: 'service',
    into: ['app.listings.perUser'],
    parse: wholeNumber('maximum listings per user', 1, 100_000),
  }),
  listingMinRate: setting({
    flag: '--listing-min-rate <bytes/s>',
    env: 'PLANTSTORE_LISTING_MIN_RATE',
    default: '1024',
    summary: "slowest full listing's client served, in bytes a second",
    meaning: "Bytes a second a full listing's client must take, averaged over the window below, or it is cut off.",
    table: 'service',
    into: ['app.listings.minBytesPerSecond'],
    parse: wholeNumber('listing minimum rate', 0, 1_000_000_000),
  }),
  listingRateWindow: setting({
    flag: '--listing-rate-window <s>',
    env: 'PLANTSTORE_LISTING_RATE_WINDOW',
    default: '30',
    summary: "seconds over which a full listing's client's rate is judged",
    meaning: "Seconds over which a full listing's client's rate is judged.",
    table: 'service',
    into: ['app.listings.rateWindowSeconds'],
    parse: wholeNumber('listing rate window', 1, 3600),
  }),
  webhookLease: setting({
    flag: '--webhook-lease <s>',
    env: 'PLANTSTORE_WEBHOOK_LEASE',
    default: '60',
    summary: 'seconds a process holds a webhook delivery it is sending',
    meaning:
      'Seconds a process holds a webhook delivery it is sending (more than the 15 s a receiver has to answer); if the ' +
      'process dies, another sends it once this has passed.',
    table: 'service',
    into: ['app.webhookLeaseSeconds'],
    parse: wholeNumber('webhook lease', 16, 86_400),
  }),
  webhookAllowPrivate: setting({
    flag: '--webhook-allow-private [bool]',
    env: 'PLANTSTORE_WEBHOOK_ALLOW_PRIVATE',
    default: 'false',
    summary: 'send webhooks to loopback and private addresses too',
    meaning:
      'Send webhooks to receivers at loopback, private and other non-public addresses too (receivers inside your own ' +
      'network); link-local and cloud metadata addresses stay refused. Also read by `webhooks add`.',
    table: 'service',
    into: ['app.webhookAllowPrivate'],
    parse: boolean('private webhook receivers'),
  }),
  metricsPort: setting({
    flag: '--metrics-port <port>',
    env: 'PLANTSTORE_METRICS_PORT',
    default: undefined,
    shownDefault: 'off',
    summary: 'serve Prometheus /metrics on this admin port; off when unset',
    meaning: 'Serve Prometheus metrics at `/metrics` on this separate admin port (see [Metrics](docs/deployment.md#metrics)).',
    table: 'service',
    into: [],
    parse: optionalWholeNumber('metrics port', 0, 65535),
  }),
  metricsHost: setting({
    flag: '--metrics-host <host>',
    env: 'PLANTSTORE_METRICS_HOST',
    default: '127.0.0.1',
    summary: 'address of the metrics listener',
    meaning:
      'Address of the metrics listener. On the HTTP port, it must not share an address with `--host`, however written: `localhost` is `127.0.0.1` and `::1`, and `0.0.0.0` or `::` shares every address.',
    table: 'service',
    into: [],
    parse: nonEmpty('metrics host'),
  }),

  jwksUrl: setting({
    flag: '--jwks-url <url>',
    env: 'PLANTSTORE_JWKS_URL',
    default: undefined,
    shownDefault: 'none',
    summary: "provider's JSON Web Key Set",
    meaning: "The provider's JSON Web Key Set (RS/PS/ES/EdDSA keys).",
    table: 'jwt',
    into: [],
    parse: optionalText,
  }),
  jwtPublicKey: setting({
    flag: '--jwt-public-key <pem-or-file>',
    env: 'PLANTSTORE_JWT_PUBLIC_KEY',
    default: undefined,
    shownDefault: 'none',
    summary: 'PEM public key for RS/PS/ES/EdDSA tokens',
    meaning: 'Instead: one PEM public key (or certificate), as text or a file path. Its type fixes the algorithms.',
    table: 'jwt',
    into: [],
    parse: optionalText,
  }),
  jwtSecretFile: setting({
    flag: '--jwt-secret-file <file>',
    env: 'PLANTSTORE_JWT_SECRET_FILE',
    default: undefined,
    shownDefault: 'none',
    summary: 'file holding the HS256/384/512 secret',
    meaning: 'Instead: a file holding an HMAC secret (UTF-8, at least 32 bytes; HS384/HS512 need 48/64; one trailing newline is ignored).',
    table: 'jwt',
    into: [],
    parse: optionalText,
  }),
  jwtSecret: setting({
    flag: undefined,
    env: 'PLANTSTORE_JWT_SECRET',
    default: undefined,
    shownDefault: 'none',
    summary: 'the HMAC secret itself',
    meaning: 'Or the HMAC secret itself, when no secret file is given. It has no flag, so that it never shows in the process list.',
    table: 'jwt',
    into: [],
    parse: optionalText,
  }),
  jwtIssuer: setting({
    flag: '--jwt-issuer <iss>',
    env: 'PLANTSTORE_JWT_ISSUER',
    default: undefined,
    shownDefault: 'required',
    summary: 'required issuer, comma-separated if several',
    meaning: 'Accepted `iss` (comma-separated for several).',
    table: 'jwt',
    into: [],
    parse: commaList,
  }),
  jwtAudience: setting({
    flag: '--jwt-audience <aud>',
    env: 'PLANTSTORE_JWT_AUDIENCE',
    default: undefined,
    shownDefault: 'required',
    summary: 'required audience, comma-separated if several',
    meaning: 'Accepted `aud` (comma-separated); the token must name one.',
    table: 'jwt',
    into: [],
    parse: commaList,
  }),
  jwtUserClaim: setting({
    flag: '--jwt-user-claim <claim>',
    env: 'PLANTSTORE_JWT_USER_CLAIM',
    default: 'sub',
    summary: 'claim naming the user',
    meaning: 'Claim whose value is the Plant Store user name (`preferred_username`, `email`…).',
    table: 'jwt',
    into: [],
    parse: (text) => nonEmpty('JWT user claim')(text).trim(),
  }),
  jwtGroupsClaim: setting({
    flag: '--jwt-groups-claim <claim>',
    env: 'PLANTSTORE_JWT_GROUPS_CLAIM',
    default: undefined,
    shownDefault: 'none',
    summary: 'claim listing group names',
    meaning:
      'Claim listing group names (an array; a single string, as some providers send one group, is that one name); they count for access exactly like stored memberships, for that request. A dotted name is a path (`realm_access.roles`) unless a claim has that exact name.',
    table: 'jwt',
    into: [],
    parse: (text) => optionalText(text?.trim()),
  }),
  jwtAlgorithms: setting({
    flag: '--jwt-algorithms <list>',
    env: 'PLANTSTORE_JWT_ALGORITHMS',
    default: undefined,
    shownDefault: 'all the key can verify',
    summary: 'accepted algorithms',
    meaning: 'Narrow the allow-list, e.g. `RS256`.',
    table: 'jwt',
    into: [],
    parse: commaList,
  }),
  jwtClockTolerance: setting({
    flag: '--jwt-clock-tolerance <s>',
    env: 'PLANTSTORE_JWT_CLOCK_TOLERANCE',
    default: '30',
    summary: 'seconds of clock skew allowed for exp/nbf',
    meaning: 'Seconds of clock skew allowed for `exp` and `nbf` (at most 300).',
    table: 'jwt',
    into: [],
    parse: seconds('JWT clock tolerance', 300),
  }),
  jwtUnknownUsers: setting({
    flag: '--jwt-unknown-users <mode>',
    env: 'PLANTSTORE_JWT_UNKNOWN_USERS',
    default: 'reject',
    summary: 'reject or provision subjects with no user',
    meaning:
      "A subject with no Plant Store user: `reject` (401, code 40112) or `provision` (created as an ordinary user with no grants: it sees public plants and what its groups claim gives). A name that looks like an existing user's is refused (401, 40111; see below).",
    table: 'jwt',
    into: [],
    parse: oneOf('unknown JWT users', ['reject', 'provision']),
  }),
  jwtAdmins: setting({
    flag: '--jwt-admins <mode>',
    env: 'PLANTSTORE_JWT_ADMINS',
    default: 'deny',
    summary: 'allow or deny admin rights to JWTs naming an admin',
    meaning: 'A JWT naming a Plant Store admin acts as an ordinary user (`deny`) or as the admin (`allow`).',
    table: 'jwt',
    into: [],
    parse: oneOf('JWT admins', ['allow', 'deny'], { lowerCase: true }),
  }),
  jwksCooldown: setting({
    flag: '--jwks-cooldown <s>',
    env: 'PLANTSTORE_JWKS_COOLDOWN',
    default: '30',
    summary: 'seconds between JWKS fetches caused by an unknown kid',
    meaning: 'Seconds between JWKS fetches caused by an unknown `kid` or after a failed fetch.',
    table: 'jwt',
    into: [],
    parse: seconds('JWKS cooldown', 3600),
  }),
  jwksRefresh: setting({
    flag: '--jwks-refresh <s>',
    env: 'PLANTSTORE_JWKS_REFRESH',
    default: '300',
    summary: 'background JWKS refresh period (0: never)',
    meaning: 'Background JWKS refresh period in seconds, so keys the provider withdraws stop being trusted (0: never).',
    table: 'jwt',
    into: [],
    parse: seconds('JWKS refresh', 86_400),
  }),
} as const;

export type SettingName = keyof typeof SETTINGS;

/** Each setting's value, as its parser reads it. */
export type SettingValues = { [K in SettingName]: ReturnType<(typeof SETTINGS)[K]['parse']> };

/** Loose input, as commander gives the flags: a flag's text (numbers and booleans are accepted as text). */
export type ConfigInput = { [K in SettingName]?: string | number | boolean | undefined };

/**
 * Reads every setting: the flag's text, else the variable's, else the default, through the setting's parser. A
 * text refused is named as it was given: `--cache "maybe"` for the flag, `PLANTSTORE_CACHE "maybe"` for the variable.
 */
export function readSettings(input: ConfigInput, env: NodeJS.ProcessEnv): SettingValues {
  const values: Record<string, unknown> = {};
  for (const name of Object.keys(SETTINGS) as SettingName[]) values[name] = readSetting(name, input[name], env);
  return values as SettingValues;
}

/**
 * Reads one setting as readSettings does, for a command that takes it alone (`webhooks add` its
 * `--webhook-allow-private`): a text refused is named by the flag or the variable it came from.
 */
export function readSetting<K extends SettingName>(name: K, given: ConfigInput[K], env: NodeJS.ProcessEnv): SettingValues[K] {
  const s: Setting<unknown> = SETTINGS[name];
  try {
    return s.parse(given !== undefined ? String(given) : (env[s.env] ?? s.default)) as SettingValues[K];
  } catch (err) {
    const source = given !== undefined ? s.flag?.split(' ')[0] : env[s.env] !== undefined ? s.env : undefined;
    if (!(err instanceof RefusedSetting) || source === undefined) throw err;
    throw refuse(source, err.text, err.reason);
  }
}

// Readers with rules of their own.

export interface RateLimitConfig {
  max: number;
  windowMs: number;
}

const WINDOW_UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const;

/** `30000/1m`, `100/10s`, `20/500ms` (a missing window count means 1: `30000/m`), or `off`. */
export function parseRateLimit(text: string): RateLimitConfig | undefined {
  const value = text.trim().toLowerCase();
  if (['off', 'false', 'none', '0'].includes(value)) return undefined;
  const match = /^([1-9][0-9]{0,8}) *\/ *([1-9][0-9]{0,6})? *(ms|s|m|h)$/.exec(value);
  const windowMs = match ? Number(match[2] ?? 1) * WINDOW_UNIT_MS[match[3] as keyof typeof WINDOW_UNIT_MS] : 0;
  if (!match || windowMs > 86_400_000) {
    throw refuse('rate limit', text, 'expected <requests>/<window> (e.g. 30000/1m, 100/10s) or off');
  }
  return { max: Number(match[1]), windowMs };
}

/** The highest database number a Redis server can have: its `databases` setting is at most 2^31 - 1. */
const MAX_REDIS_DATABASE = 2_147_483_646;

/**
 * A Redis URL checked whole, as ioredis will read it, so that no part of it fails later inside a connection: ioredis
 * sends a path that is not a number as `SELECT NaN` (an uncaught error once serving), throws on a port out of range
 * or a malformed %-escape in the password, and reads query parameters as client options over the service's own
 * (offline queue, timeouts). Whether the server has the database is for the server to say (doctor asks it).
 */
function redisUrl(text: string | undefined): string | undefined {
  const value = (text ?? '').trim();
  if (value === '') return undefined;
  // Everything before the last @ is hidden: it may hold a password, %-escaped or not.
  const refused = (reason: string) => refuse('Redis URL', value.replace(/^([a-z][a-z0-9+.-]*:\/\/)?.*@/is, '$1***@'), reason);
  if (!/^rediss?:\/\//i.test(value)) throw refused('expected a redis:// or rediss:// URL');
  // Host and port are read before the URL is parsed: the URL parser refuses a missing host or a port out of range
  // without saying which.
  const authority = /^[a-z]+:\/\/([^/?#]*)/i.exec(value)![1]!;
  const [, host, port] = /^(\[[^\]]*\]|[^:]*)(?::(.*))?$/.exec(authority.slice(authority.lastIndexOf('@') + 1)) ?? [];
  if (host === '') throw refused('the host is missing');
  if (port !== undefined && port !== '' && (!/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)) {
    throw refused('the port must be a whole number from 1 to 65535');
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw refused('expected redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DATABASE]');
  }
  if (url.search !== '' || url.hash !== '') throw refused('expected no ?query or #fragment: ioredis reads them as client options');
  try {
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
  } catch {
    throw refused('the user name or password has a malformed %-escape');
  }
  const database = /^\/([0-9]+)$/.exec(url.pathname)?.[1];
  if (!['', '/'].includes(url.pathname) && (database === undefined || Number(database) > MAX_REDIS_DATABASE)) {
    throw refused(
      `the path must be a database number: a whole number from 0 to ${MAX_REDIS_DATABASE} (0 to 15 on a server with the default "databases 16")`,
    );
  }
  // ioredis turns TLS on only for "rediss://" in lower case.
  return value.replace(/^rediss?:/i, (scheme) => scheme.toLowerCase());
}

/** Exact origins only (scheme, host, optional port; no path), so an allow-list entry cannot match more than it says. */
function corsOrigins(text: string | undefined): string[] {
  const list = commaList(text);
  for (const origin of list) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (
      origin !== '*' &&
      (parsed === undefined || !/^https?:$/.test(parsed.protocol) || parsed.origin !== origin || origin.includes('*'))
    ) {
      throw refuse(
        'CORS origin',
        origin,
        'expected an origin like https://app.example or http://localhost:3000 (no path, no trailing slash), or *',
      );
    }
  }
  return [...new Set(list)];
}

/** The README's table of one kind of setting, as Markdown rows (the test compares the README with this). */
export function settingsTable(table: Setting<unknown>['table']): string[] {
  const rows = ['| Flag | Environment | Default | Meaning |', '|---|---|---|---|'];
  for (const s of Object.values(SETTINGS) as Array<Setting<unknown>>) {
    if (s.table !== table) continue;
    const flag = s.flag === undefined ? '| |' : `| \`${s.flag.split(' ')[0]}\` |`;
    const shown = s.shownDefault ?? `\`${s.default}\``;
    rows.push(`${flag} \`${s.env}\` | ${shown} | ${s.meaning} |`);
  }
  return rows;
}

/** `A`, `B` and `C`: a list of names as the settings' meanings write them. */
function codeList(names: readonly string[]): string {
  const quoted = names.map((name) => `\`${name}\``);
  return quoted.length < 2 ? quoted.join('') : `${quoted.slice(0, -1).join(', ')} and ${quoted.at(-1)}`;
}
