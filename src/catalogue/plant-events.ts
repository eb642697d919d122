import { createHash } from 'node:crypto';

/**
 * The events of a plant's life that webhooks deliver, and how an endpoint's choice of them is stored (migration
 * 0016): NULL for the original webhook (new plants alone, each sent as the `NewPlant` it was), else the types it
 * chose as `,type,…,`, commas around each, so that one type is found with LIKE on both databases.
 */

/** The event types, in the order the document lists them. */
export const EVENT_TYPES = ['plant.created', 'plant.updated', 'plant.deleted'] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** What an endpoint registered without a choice receives: the original webhook. */
export const ORIGINAL_EVENTS: readonly EventType[] = ['plant.created'];

export const isEventType = (text: string): text is EventType => (EVENT_TYPES as readonly string[]).includes(text);

/** A plant as an event carries it: a created or updated plant whole, a deleted one as it last was. */
export interface EventPlant {
  id: number;
  name: string;
  tag?: string;
}

/** One event as a delivery sends it. */
export interface DeliveredEvent {
  /** The event's row id: increasing, for one plant, in the order its changes committed. */
  sequence: number;
  type: EventType;
  plant: EventPlant;
  /** When the change committed (epoch ms). */
  createdAt: number;
  /** Whether the endpoint chose its event types: the envelope; otherwise the original body. */
  envelope: boolean;
}

/** The stored form of an endpoint's choice: null for the original webhook, else `,type,…,`. */
export function storedEvents(types: readonly EventType[] | undefined): string | null {
  if (types === undefined) return null;
  return `,${EVENT_TYPES.filter((t) => types.includes(t)).join(',')},`;
}

/** An endpoint's choice as stored, read back. */
export function eventsOf(stored: string | null): { types: EventType[]; envelope: boolean } {
  if (stored === null) return { types: [...ORIGINAL_EVENTS], envelope: false };
  return { types: stored.split(',').filter(isEventType), envelope: true };
}

/**
 * The `webhook-id` of an event as an endpoint receives it: the event's own message id in the original body, and in
 * the envelope another, drawn from it, so that one id never names two bodies. Two endpoints at one URL, one of each
 * kind (as while an endpoint's types change by adding another), would otherwise send a receiver that skips the ids
 * it has seen one of the two bodies only. The same on every attempt and in every process.
 */
export function deliveredMessageId(messageId: string, envelope: boolean): string {
  if (!envelope) return messageId;
  return `msg_${createHash('sha256').update(`${messageId}.envelope`).digest('hex').slice(0, 32)}`;
}
