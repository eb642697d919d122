import type { onResponseHookHandler } from 'fastify';
import { AggregatorRegistry, collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import type { CacheCounter } from '../cache/scoped-cache.js';
import type { Health, HotQuery } from '../store/store.js';
import type { AttemptOutcome, WebhookOutbox } from '../store/webhook-outbox.js';
import { VERSION } from '../version.js';
import { HotHistogram } from './histogram.js';

/** Every outcome of a webhook delivery attempt, each exported from the start. */
const WEBHOOK_OUTCOMES = ['delivered', 'retry', 'failed', 'gone'] as const satisfies ReadonlyArray<AttemptOutcome['kind']>;

/**
 * The route label of requests that matched no route (unknown paths, 405s) and of the answers given before routing:
 * never the raw URL.
 */
export const UNMATCHED_ROUTE = '(unmatched)';

/** The method label of answers to HTTP that was never read as a request (malformed, oversized or too slow). */
const UNKNOWN_METHOD = '(unknown)';

/**
 * A route's label: its pattern without the rules its parameters carry (`/plants/:id(^.+$)/access` is
 * `/plants/:id/access`), so that a label reads as the path it stands for and stays when a rule changes.
 */
const routeLabel = (pattern: string): string => pattern.replace(/(:\w+)\((?:[^()]|\([^()]*\))*\)/g, '$1');

/** Seconds; the service answers most requests well under a millisecond, so the low end is finely split. */
const HTTP_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const QUERY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5];
/**
 * Every hot-path query the store times, each exported from the start. A record, not a list: a query the store
 * adds (HotQuery) does not compile until it is named here, where an unnamed one would fail its request.
 */
const HOT_QUERIES: Record<HotQuery, true> = {
  ping: true,
  find_token: true,
  find_token_with_page: true,
  find_user: true,
  visible_plants: true,
  all_plants: true,
  filtered_plants: true,
};

type Inc = { inc(value?: number): void };
type Observe = { observe(value: number): void };

/**
 * Per-request counts are plain numbers, handed to prom-client only when scraped (its `collect`): a labelled
 * prom-client increment builds a label-hash string every time, which the hot path should not pay for.
 */
class StatusCounts {
  /** Responses by status code. */
  readonly counts = new Map<number, number>();

  count(status: number): void {
    this.counts.set(status, (this.counts.get(status) ?? 0) + 1);
  }
}

/** The counts of one method and route pattern, with its duration series. */
class RouteSeries extends StatusCounts {
  constructor(
    /** The route label (routeLabel). */
    readonly route: string,
    readonly duration: Observe,
  ) {
    super();
  }
}

class CacheTally implements CacheCounter {
  hits = 0;
  misses = 0;
  hit(): void {
    this.hits++;
  }
  miss(): void {
    this.misses++;
  }
}

/**
 * Every Prometheus metric of one process, in a registry of its own (so several apps in one process, as in
 * the tests, never share counters). Only created when metrics are on; with them off nothing here is loaded.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly durations: HotHistogram<'method' | 'route'>;
  private readonly routes = new Map<string, Map<string, RouteSeries>>();
  /** Answers no onResponse hook sees (answeredWithoutHooks), by method and status. */
  private readonly unhooked = new Map<string, StatusCounts>();
  private readonly refusals: Map<string, Inc>;
  readonly caches = { tokens: new CacheTally(), users: new CacheTally(), pages: new CacheTally() };
  private readonly webhookOutcomes: Map<string, Inc>;

  /** `refusalReasons`: every reason authentication can refuse a request for, each exported from the start. */
  constructor(
    private readonly store: { health: Health; webhooks: Pick<WebhookOutbox, 'backlog'> },
    refusalReasons: readonly string[],
  ) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });

    new Gauge({
      name: 'plantstore_info',
      help: 'Always 1; the labels say which version runs on which storage backend',
      labelNames: ['version', 'backend'],
      registers,
      // Every worker says the same 1: summed over `--workers N`, it would say N.
      aggregator: 'first',
    }).set({ version: VERSION, backend: store.health.backend }, 1);

    const { routes, unhooked } = this;
    new Counter({
      name: 'plantstore_http_requests_total',
      help: 'HTTP responses sent, by method, route pattern and status code',
      labelNames: ['method', 'route', 'status'],
      registers,
      collect() {
        this.reset();
        for (const [method, byRoute] of routes) {
          for (const { route, counts } of byRoute.values()) {
            for (const [status, count] of counts) this.inc({ method, route, status: String(status) }, count);
          }
        }
        for (const [method, { counts }] of unhooked) {
          for (const [status, count] of counts) this.inc({ method, route: UNMATCHED_ROUTE, status: String(status) }, count);
        }
      },
    });
    this.durations = new HotHistogram(
      'plantstore_http_request_duration_seconds',
      'Time from receiving a request to having sent the response, by method and route pattern',
      HTTP_BUCKETS,
      this.registry,
    );

    const refused = new Counter({
      name: 'plantstore_auth_failures_total',
      help: 'Requests refused by bearer authentication, by reason',
      labelNames: ['reason'],
      registers,
    });
    // Every reason is exported from the start (at 0), so rate() and alerts work before the first failure.
    this.refusals = new Map(
      refusalReasons.map((reason) => {
        refused.labels(reason).inc(0);
        return [reason, refused.labels(reason)];
      }),
    );

    this.cacheCounters(registers);
    this.queryDurations();
    if (store.health.poolStats().length > 0) this.poolGauges(registers);
    this.webhookOutcomes = this.webhookMetrics(registers);
  }

  /** Hits and misses of each answer cache, read from its tally when scraped. */
  private cacheCounters(registers: Registry[]): void {
    const caches = Object.entries({ token: this.caches.tokens, jwt_user: this.caches.users, page: this.caches.pages });
    const cacheCounter = (name: string, help: string, read: (tally: CacheTally) => number) =>
      new Counter({
        name,
        help,
        labelNames: ['cache'],
        registers,
        collect() {
          this.reset();
          for (const [cache, tally] of caches) this.inc({ cache }, read(tally));
        },
      });
    cacheCounter('plantstore_cache_hits_total', 'Cache lookups answered from memory, by cache', (t) => t.hits);
    cacheCounter('plantstore_cache_misses_total', 'Cache lookups that went to the database, by cache', (t) => t.misses);
  }

  /** The store reports each hot-path query's duration from now on. */
  private queryDurations(): void {
    const queries = new HotHistogram<'query'>(
      'plantstore_db_query_duration_seconds',
      'Duration of the hot-path database queries (token and user look-ups, listings, pings), by query',
      QUERY_BUCKETS,
      this.registry,
    );
    const byQuery = {} as Record<HotQuery, Observe>;
    for (const query of Object.keys(HOT_QUERIES) as HotQuery[]) byQuery[query] = queries.labels({ query });
    this.store.health.timeQueries((query, seconds) => byQuery[query].observe(seconds));
  }

  /** Pool sizes are read when scraped, not tracked per query: they cost nothing between scrapes. */
  private poolGauges(registers: Registry[]): void {
    const { store } = this;
    const gauge = (name: string, help: string, read: (s: ReturnType<Health['poolStats']>[number]) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['pool'],
        registers,
        collect() {
          for (const stats of store.health.poolStats()) this.set({ pool: stats.pool }, read(stats));
        },
      });
    gauge('plantstore_db_pool_connections', 'PostgreSQL connections open in the pool (busy or idle), by pool', (s) => s.total);
    gauge('plantstore_db_pool_idle_connections', 'PostgreSQL connections open and idle in the pool, by pool', (s) => s.idle);
    gauge('plantstore_db_pool_waiting_requests', 'Queries waiting for a free PostgreSQL connection, by pool', (s) => s.waiting);
  }

  /**
   * Webhook deliveries by outcome (this process's attempts), and the outbox's backlog, read when scraped. The
   * backlog is the database's, the same for every worker: summed over workers it would count N times.
   */
  private webhookMetrics(registers: Registry[]): Map<string, Inc> {
    const attempts = new Counter({
      name: 'plantstore_webhook_deliveries_total',
      help: 'Webhook delivery attempts by this process, by outcome (delivered, retry, failed, gone)',
      labelNames: ['outcome'],
      registers,
    });
    const outcomes = new Map<string, Inc>(WEBHOOK_OUTCOMES.map((outcome) => [outcome, attempts.labels({ outcome })]));
    const readFailures = new Counter({
      name: 'plantstore_webhook_backlog_read_failures_total',
      help: 'Scrapes by this process that could not read the webhook backlog (its two gauges then have no sample)',
      registers,
      // Waits for this scrape's read, so that its failure shows in the same scrape as the gauges it leaves out.
      async collect() {
        await readBacklog();
      },
    });
    const { store } = this;
    let reading: Promise<{ pending: number; oldestCreatedAt?: number } | undefined> | undefined;
    // One query per scrape for both gauges. A failed read fails only them, and is counted once: a rejection would
    // fail the whole scrape, every other series with it, for as long as the database is away.
    const readBacklog = () =>
      (reading ??= store.webhooks
        .backlog()
        .catch(() => {
          readFailures.inc();
          return undefined;
        })
        .finally(() => setTimeout(() => (reading = undefined), 0)));
    // Without a fresh read a gauge has no sample, not its last value: that backlog is no longer known to hold, that
    // age would stand still, and a missing series is what Prometheus (and an alert on it) takes for unknown.
    new Gauge({
      name: 'plantstore_webhook_backlog',
      help: 'Webhook deliveries waiting to be sent or retried (all processes)',
      aggregator: 'max',
      registers,
      async collect() {
        const backlog = await readBacklog();
        if (backlog === undefined) this.remove();
        else this.set(backlog.pending);
      },
    });
    new Gauge({
      name: 'plantstore_webhook_oldest_pending_seconds',
      help: 'Age of the oldest event with a delivery waiting, in seconds (0 with none)',
      aggregator: 'max',
      registers,
      async collect() {
        const backlog = await readBacklog();
        if (backlog === undefined) this.remove();
        else this.set(backlog.oldestCreatedAt === undefined ? 0 : Math.max(0, (Date.now() - backlog.oldestCreatedAt) / 1000));
      },
    });
    return outcomes;
  }

  webhookAttempt = (outcome: string): void => {
    this.webhookOutcomes.get(outcome)?.inc();
  };

  authRefused = (reason: string): void => {
    this.refusals.get(reason)?.inc();
  };

  /** The one onResponse hook, callback style: counts and times each response under its route pattern. */
  onResponse: onResponseHookHandler = (request, reply, done) => {
    const series = this.series(request.method, request.routeOptions.url ?? UNMATCHED_ROUTE);
    series.count(reply.statusCode);
    series.duration.observe(reply.elapsedTime / 1000);
    done();
  };

  /**
   * Counts an answer no onResponse hook sees (written straight to the socket, or the router's refusal) under the
   * unmatched route, as no route gave it. Not timed: most have no request whose start the server saw.
   */
  answeredWithoutHooks = (method: string | undefined, status: number): void => {
    const label = method ?? UNKNOWN_METHOD;
    let counts = this.unhooked.get(label);
    if (!counts) this.unhooked.set(label, (counts = new StatusCounts()));
    counts.count(status);
  };

  /** The series of a method and route pattern, made once (its label worked out then, not per request). */
  private series(method: string, pattern: string): RouteSeries {
    let byRoute = this.routes.get(method);
    if (!byRoute) this.routes.set(method, (byRoute = new Map<string, RouteSeries>()));
    let series = byRoute.get(pattern);
    if (!series) {
      const route = routeLabel(pattern);
      byRoute.set(pattern, (series = new RouteSeries(route, this.durations.labels({ method, route }))));
    }
    return series;
  }

  /** The exposition text, for the admin listener of a single process. */
  async scrape(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  /** In a `serve --workers` worker: from now on the primary's scrapes get this registry (see `answerPrimaryScrapes`). */
  reportToPrimary(): void {
    answerPrimaryScrapes();
    AggregatorRegistry.setRegistries([this.registry]);
  }

  /** Stops timing the store's queries (the store outlives the app in tests and the CLI). */
  close(): void {
    this.store.health.timeQueries(undefined);
  }
}

/**
 * In a `serve --workers` worker, first thing: answer the primary's scrapes, with nothing until the app's
 * registry exists. The primary waits for every connected worker, so a worker that is still starting and
 * did not answer would fail the whole scrape.
 */
let answering = false;
export function answerPrimaryScrapes(): void {
  if (answering) return;
  answering = true;
  AggregatorRegistry.setRegistries([]);
  // Constructing one installs prom-client's worker-side message listener (once per process).
  new AggregatorRegistry();
}
