import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

/** A new endpoint secret in the Standard Webhooks form: `whsec_` and 24 random bytes in base64. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/**
 * The `webhook-signature` header: `v1,<base64 HMAC-SHA256 of id.timestamp.body>` for each secret, space
 * separated, so that during a rotation a receiver that knows either secret verifies the delivery.
 */
export function signatureHeader(secrets: readonly string[], msgId: string, timestamp: Date, body: string): string {
  return secrets.map((secret) => new Webhook(secret).sign(msgId, timestamp, body)).join(' ');
}
