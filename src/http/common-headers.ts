import { VERSION } from '../version.js';

/** The media type of every JSON answer, errors included. */
export const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * The media types a change of a plant (`PATCH`) is taken in: JSON Merge Patch's own, and plain JSON, which many
 * clients send; as a 415 of a `PATCH` lists them in `Accept-Patch` (RFC 5789 §2.2).
 */
export const MERGE_PATCH_TYPE = 'application/merge-patch+json';
export const PATCH_TYPES = `${MERGE_PATCH_TYPE}, application/json`;

/** Sent on every response (also the admin listener's), so a client or a log can tell which release answered. */
export const VERSION_HEADER = 'Plantstore-Version';

/**
 * The headers every answer carries, errors and answers written straight to the socket included: which release
 * answered, no content sniffing, and nothing kept by a shared cache (errors and per-user answers must never
 * be; only the docs' static files say otherwise, and set their own).
 */
export const COMMON_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
  [VERSION_HEADER.toLowerCase()]: VERSION,
});
