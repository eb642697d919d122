import { Option, type Command } from 'commander';
import { invalidInput, notFound } from '../../catalogue/errors.js';
import { EVENT_TYPES, isEventType, type EventType } from '../../catalogue/plant-events.js';
import { newWebhookSecret } from '../../webhooks/signing.js';
import { parseDuration } from '../duration.js';
import { parseId } from '../../catalogue/plant-ids.js';
import { readSetting, SETTINGS } from '../../settings.js';
import { urlRefusal } from '../../webhooks/endpoint-address.js';
import { withStore } from '../context.js';
import { examples } from '../help.js';
import { isoDate, printRows, refuseSecretToNowhere, say, showSecretOrUndo, showSecretThenKeep } from '../output.js';

/**
 * Only http(s) URLs with a host: what a delivery can be sent to; and not, as written, a private or link-local address
 * (one that resolves to such an address is refused when a delivery connects).
 */
function parseEndpointUrl(text: string, allowPrivate: boolean): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw invalidInput(`invalid webhook URL "${text}"`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw invalidInput(`a webhook URL must be http or https, not ${url.protocol}`);
  if (url.username !== '' || url.password !== '')
    throw invalidInput('a webhook URL must not carry credentials; the signature authenticates');
  // Nothing listens on port 0, and a fragment is never sent: either is a mistake in the URL.
  if (url.port === '0') throw invalidInput(`a webhook URL needs a port other than 0 (${url.toString()})`);
  if (url.hash !== '' || url.href.endsWith('#')) throw invalidInput(`a webhook URL must not have a fragment (#…): it is never sent`);
  const refused = urlRefusal(url, allowPrivate);
  if (refused !== undefined) throw invalidInput(`refused webhook URL ${url.toString()}: ${refused}`);
  return url.toString();
}

/**
 * The event types an endpoint chooses (`--events plant.created,plant.updated`): each one of EVENT_TYPES, at least
 * one, so that an endpoint registered with the option always receives something, in the envelope.
 */
function parseEventTypes(text: string): EventType[] {
  const valid = `the event types are ${EVENT_TYPES.join(', ')}`;
  const names = text
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  if (names.length === 0) throw invalidInput(`--events names no event type; ${valid}`);
  const unknown = names.filter((name) => !isEventType(name));
  if (unknown.length > 0)
    throw invalidInput(`unknown event type${unknown.length === 1 ? '' : 's'} ${unknown.map((n) => `"${n}"`).join(', ')}; ${valid}`);
  return EVENT_TYPES.filter((type) => names.includes(type));
}

/** How an endpoint receives its events: in the envelope (it chose them), or as the original webhook's NewPlant. */
const bodyOf = (e: { envelope: boolean }): string => (e.envelope ? 'envelope' : 'NewPlant');

export function registerWebhookCommands(program: Command): void {
  const webhooks = program
    .command('webhooks')
    .description('register endpoints that receive the new-plant webhook or the plant events they choose, and follow their deliveries')
    .addHelpText(
      'after',
      examples(
        'SECRET=$(plantstore webhooks add https://example.com/hooks/plants)',
        'SECRET=$(plantstore webhooks add https://example.com/hooks/mirror --events plant.created,plant.updated,plant.deleted)',
        'plantstore webhooks deliveries',
      ),
    );

  webhooks
    .command('add <url>')
    .description('register an endpoint; prints its signing secret (whsec_…) alone, shown only this once')
    .addHelpText(
      'after',
      examples(
        'SECRET=$(plantstore webhooks add https://example.com/hooks/plants)',
        'SECRET=$(plantstore webhooks add https://example.com/hooks/mirror --events plant.created,plant.updated,plant.deleted)',
        'SECRET=$(plantstore webhooks add http://10.0.0.7:3000/hooks --webhook-allow-private)',
      ),
    )
    .option(
      '--events <types>',
      `the event types it receives, comma-separated, each in the Standard Webhooks envelope: ${EVENT_TYPES.join(', ')} ` +
        '(without: new plants alone, each as the NewPlant it was)',
    )
    .option(SETTINGS.webhookAllowPrivate.flag!, `${SETTINGS.webhookAllowPrivate.summary} (env ${SETTINGS.webhookAllowPrivate.env})`)
    .action(async (text: string, opts: { events?: string; webhookAllowPrivate?: string | boolean }, cmd: Command) => {
      const url = parseEndpointUrl(text, readSetting('webhookAllowPrivate', opts.webhookAllowPrivate, process.env));
      const events = opts.events === undefined ? undefined : parseEventTypes(opts.events);
      refuseSecretToNowhere('secret');
      const secret = newWebhookSecret();
      await withStore(
        cmd,
        async ({ webhooks }) => {
          const endpoint = await webhooks.addEndpoint(url, secret, events);
          await showSecretOrUndo(secret, 'secret', {
            run: () => webhooks.removeEndpoint(endpoint.id),
            done: `webhook endpoint ${endpoint.id} is removed, as nobody has its secret: add it again`,
            byHand: `remove webhook endpoint ${endpoint.id} ("plantstore webhooks remove ${endpoint.id}"), nobody has its secret`,
          });
          say(
            `added webhook endpoint ${endpoint.id} for ${url} (${endpoint.types.join(',')}, as ${bodyOf(endpoint)}); ` +
              'store the secret now, it cannot be shown again',
          );
          // Deliberate while an endpoint's types change (a new endpoint beside the old one), a mistake otherwise.
          const sameUrl = (await webhooks.listEndpoints()).filter((other) => other.url === endpoint.url && other.id !== endpoint.id);
          if (sameUrl.length > 0)
            say(
              `note: ${sameUrl.map((other) => `endpoint ${other.id}`).join(', ')} ${sameUrl.length === 1 ? 'has' : 'have'} this URL too: ` +
                'its receiver gets the deliveries of each, signed with its own secret',
            );
        },
        { create: true },
      );
    });

  webhooks
    .command('list')
    .description('list endpoints and the event types each receives (never their secrets)')
    .addHelpText('after', examples('plantstore webhooks list', 'plantstore webhooks list --json'))
    .option('--json', 'print a JSON array', false)
    .action(async (opts: { json: boolean }, cmd: Command) => {
      const endpoints = await withStore(cmd, ({ webhooks }) => webhooks.listEndpoints());
      const rows = endpoints.map((e) => ({ ...e, state: e.disabledAt ? ('disabled' as const) : ('enabled' as const) }));
      printRows(
        rows,
        [
          { header: 'id', value: (e) => String(e.id) },
          { header: 'url', value: (e) => e.url },
          { header: 'events', value: (e) => e.types.join(',') },
          { header: 'body', value: bodyOf },
          { header: 'state', value: (e) => (e.disabledAt ? `disabled: ${e.disabledReason ?? ''}` : 'enabled') },
          { header: 'created', value: (e) => isoDate(e.createdAt) },
          { header: 'old secret until', value: (e) => isoDate(e.previousSecretUntil) },
        ],
        opts.json,
      );
    });

  webhooks
    .command('remove <id>')
    .description('remove an endpoint and its deliveries')
    .addHelpText('after', examples('plantstore webhooks remove 3'))
    .action(async (id: string, _opts: unknown, cmd: Command) => {
      await withStore(cmd, ({ webhooks }) => webhooks.removeEndpoint(parseId('endpoint id', id)));
      say(`removed webhook endpoint ${id}`);
    });

  webhooks
    .command('rotate-secret <id>')
    .description('give an endpoint a new secret; prints it alone. Deliveries are signed with both until --overlap ends')
    .addHelpText(
      'after',
      examples(
        'SECRET=$(plantstore webhooks rotate-secret 3)',
        'plantstore webhooks rotate-secret 3 --overlap 7d',
        'plantstore webhooks rotate-secret 3 --overlap 0',
      ),
    )
    .addOption(new Option('--overlap <duration>', 'how long the old secret signs too (0: it stops now)').default('24h', '24h'))
    .action(async (id: string, opts: { overlap: string }, cmd: Command) => {
      const endpointId = parseId('endpoint id', id);
      refuseSecretToNowhere('secret');
      const secret = newWebhookSecret();
      const overlap = parseDuration(opts.overlap);
      const until = Date.now() + overlap;
      const ended = await withStore(cmd, async ({ webhooks }) => {
        // Named before the secret is printed, so that a mistyped id prints no secret.
        const endpoint = (await webhooks.listEndpoints()).find((e) => e.id === endpointId);
        if (endpoint === undefined) throw notFound(`no webhook endpoint with id ${endpointId}`);
        await showSecretThenKeep(
          secret,
          'secret',
          () => webhooks.rotateSecret(endpointId, secret, until),
          `webhook endpoint ${endpointId} keeps its secret`,
        );
        return endpoint.previousSecretUntil;
      });
      // Two secrets sign at most: the one an earlier rotation left signing stops now, earlier than it was told.
      if (ended !== undefined) {
        say(`the secret replaced before, which was to sign until ${ended.toISOString()}, no longer signs`);
      }
      say(
        overlap === 0
          ? `rotated the secret of webhook endpoint ${id}; the old one no longer signs`
          : `rotated the secret of webhook endpoint ${id}; the old one also signs until ${new Date(until).toISOString()}`,
      );
    });

  webhooks
    .command('enable <id>')
    .description('enable an endpoint disabled after answering 410 Gone')
    .addHelpText('after', examples('plantstore webhooks enable 3'))
    .action(async (id: string, _opts: unknown, cmd: Command) => {
      const enabled = await withStore(cmd, ({ webhooks }) => webhooks.enableEndpoint(parseId('endpoint id', id)));
      say(enabled ? `enabled webhook endpoint ${id}` : `webhook endpoint ${id} was already enabled`);
    });

  webhooks
    .command('deliveries')
    .description('recent deliveries, newest first: event, status, attempts, next retry, last answer')
    .addHelpText('after', examples('plantstore webhooks deliveries', 'plantstore webhooks deliveries --endpoint 3 --limit 10 --json'))
    .option('--endpoint <id>', 'only deliveries to this endpoint')
    .addOption(new Option('--limit <n>', 'at most this many').default('50', '50'))
    .option('--json', 'print a JSON array', false)
    .action(async (opts: { endpoint?: string; limit: string; json: boolean }, cmd: Command) => {
      const filter = {
        limit: parseId('limit', opts.limit),
        ...(opts.endpoint === undefined ? {} : { endpointId: parseId('endpoint id', opts.endpoint) }),
      };
      const rows = await withStore(cmd, ({ webhooks }) => webhooks.listDeliveries(filter));
      printRows(
        rows,
        [
          { header: 'webhook-id', value: (d) => d.messageId },
          { header: 'endpoint', value: (d) => String(d.endpointId) },
          { header: 'event', value: (d) => d.type },
          { header: 'plant', value: (d) => String(d.plantId) },
          { header: 'status', value: (d) => d.status },
          { header: 'attempts', value: (d) => String(d.attempts) },
          { header: 'next attempt', value: (d) => isoDate(d.nextAttemptAt) },
          { header: 'last answer', value: (d) => (d.lastStatus !== undefined ? String(d.lastStatus) : (d.lastError ?? '-')) },
        ],
        opts.json,
      );
    });

  webhooks
    .command('retry')
    .description(
      'send now the deliveries that failed or wait for a later attempt (all, or of one endpoint); ' +
        "a disabled endpoint's wait for webhooks enable",
    )
    .addHelpText('after', examples('plantstore webhooks retry', 'plantstore webhooks retry --endpoint 3'))
    .option('--endpoint <id>', 'only deliveries to this endpoint')
    .action(async (opts: { endpoint?: string }, cmd: Command) => {
      const endpointId = opts.endpoint === undefined ? undefined : parseId('endpoint id', opts.endpoint);
      const { due, held, disabled } = await withStore(cmd, async ({ webhooks }) => {
        const { due, held } = await webhooks.retry(endpointId === undefined ? {} : { endpointId });
        // A disabled endpoint's deliveries are due again, but no dispatcher claims them before `webhooks enable`.
        const disabled = (await webhooks.listEndpoints())
          .filter((e) => e.disabledAt !== undefined && (endpointId === undefined || e.id === endpointId))
          .map((e) => e.id);
        return { due, held, disabled };
      });
      const deliveries = (n: number) => `${n} deliver${n === 1 ? 'y' : 'ies'} (failed or waiting for a later attempt)`;
      if (endpointId !== undefined && disabled.length > 0)
        say(
          `${deliveries(held + due)} of webhook endpoint ${endpointId} ${held + due === 1 ? 'is' : 'are'} due again, but it is disabled (it answered 410 Gone): ` +
            `nothing is sent to it until "plantstore webhooks enable ${endpointId}"`,
        );
      else if (held === 0) say(`${deliveries(due)} will be sent now`);
      else
        say(
          `${deliveries(due)} will be sent now; ${held} more ${held === 1 ? 'is' : 'are'} due again for disabled webhook ` +
            `endpoint${disabled.length === 1 ? '' : 's'} ${disabled.join(', ')} (answered 410 Gone), ` +
            'sent once "plantstore webhooks enable ID" enables one',
        );
    });
}
