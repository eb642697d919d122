import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

/** A new endpoint secret in the Standard Webhooks form: `whsec_` and 24 random bytes in base64. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** Signers by secret: a signer decodes its secret once, not once per delivery. Endpoints are few; rotations rare. */
const signers = new Map<string, Webhook>();
const MAX_SIGNERS = 1_000;

function signer(secret: string): Webhook {
  let webhook = signers.get(secret);
  if (webhook === undefined) {
    if (signers.size >= MAX_SIGNERS) signers.clear();
    webhook = new Webhook(secret);
    signers.set(secret, webhook);
  }
  return webhook;
}

/**
 * The `webhook-signature` header: `v1,<base64 HMAC-SHA256 of id.timestamp.body>` for each secret, space
 * separated, so that during a rotation a receiver that knows either secret verifies the delivery.
 */
export function signatureHeader(secrets: readonly string[], msgId: string, timestamp: Date, body: string): string {
  return secrets.map((secret) => signer(secret).sign(msgId, timestamp, body)).join(' ');
}
