import type { DeliveredEvent } from '../catalogue/plant-events.js';

/**
 * What a delivery sends. An endpoint registered without a choice of events (and every endpoint registered before
 * there was one) receives new plants alone, each as the original document's `NewPlant`, byte for byte as ever. An
 * endpoint that chose its event types receives each in the envelope the Standard Webhooks specification
 * recommends, `{"type", "timestamp", "data"}`, with `sequence`, which is larger for every later change of the
 * same plant: events may arrive out of order, so a receiver keeps, per plant id, the event of the largest sequence.
 */
export function eventBody(event: DeliveredEvent): string {
  if (!event.envelope) return JSON.stringify(event.plant);
  const { type, sequence, plant: data } = event;
  return JSON.stringify({ type, timestamp: new Date(event.createdAt).toISOString(), sequence, data });
}
