/**
 * The error-code catalogue: every error response has the contract's Error body `{ error, message }`, where
 * `error` is one of these stable codes. A code is the HTTP status times 100 plus a sequence number, so
 * `Math.floor(error / 100)` is always the status it was sent with. Codes are never reused or renumbered.
 */
export const errorCatalogue = {
  invalid_parameter: { code: 40001, status: 400, summary: 'A query or path parameter has an invalid value.' },
  repeated_parameter: { code: 40002, status: 400, summary: 'A query parameter that takes one value was given more than once.' },
  bad_request: { code: 40003, status: 400, summary: 'The request is malformed (bad URL encoding, bad body, bad headers).' },
  unknown_parameter: {
    code: 40004,
    status: 400,
    summary: 'The request has a query parameter the operation does not take (the message names it).',
  },
  invalid_body: {
    code: 40005,
    status: 400,
    summary: 'The request body is not what the operation takes (not JSON, a missing, mistyped or unknown field); the message names it.',
  },
  missing_credentials: { code: 40101, status: 401, summary: 'No bearer token was sent (no Authorization header, or another scheme).' },
  invalid_token: { code: 40102, status: 401, summary: 'The bearer token is malformed or unknown.' },
  expired_token: { code: 40103, status: 401, summary: 'The bearer token has expired.' },
  revoked_token: { code: 40104, status: 401, summary: 'The bearer token has been revoked.' },
  token_not_yet_valid: { code: 40105, status: 401, summary: 'The JWT is not valid yet (`nbf` is in the future).' },
  token_wrong_issuer: { code: 40106, status: 401, summary: 'The JWT was issued by an issuer this service does not trust (`iss`).' },
  token_wrong_audience: { code: 40107, status: 401, summary: 'The JWT is meant for another service (`aud`).' },
  token_bad_signature: { code: 40108, status: 401, summary: 'The JWT signature does not verify.' },
  token_algorithm_not_allowed: {
    code: 40109,
    status: 401,
    summary: 'The JWT is signed with an algorithm this service does not accept (e.g. `none`).',
  },
  token_unknown_key: { code: 40110, status: 401, summary: 'The JWT names a signing key (`kid`) the identity provider does not publish.' },
  token_invalid_claims: {
    code: 40111,
    status: 401,
    summary: 'The JWT lacks a required claim (`exp`, the user claim) or has one of the wrong type.',
  },
  token_unknown_user: { code: 40112, status: 401, summary: 'The JWT names a user this service does not know (and provisioning is off).' },
  not_owner: {
    code: 40301,
    status: 403,
    summary:
      'The caller can see the plant but may not change it, delete it, or see and change who has access to it: only its owner or an admin may.',
  },
  not_found: { code: 40401, status: 404, summary: 'No such path.' },
  plant_not_found: { code: 40402, status: 404, summary: 'No plant with this id that the caller can see.' },
  user_not_found: { code: 40403, status: 404, summary: 'No user with this name (a plant is shared only with users that exist).' },
  group_not_found: {
    code: 40404,
    status: 404,
    summary: 'No group with this name (a plant is shared only with groups that exist: an operator creates them).',
  },
  method_not_allowed: { code: 40501, status: 405, summary: 'The path exists but not for this method; see the Allow header.' },
  not_acceptable: { code: 40601, status: 406, summary: 'The Accept header rules out application/json.' },
  request_timeout: { code: 40801, status: 408, summary: 'The client took too long to send the request.' },
  plant_id_taken: {
    code: 40901,
    status: 409,
    summary: "The id is another plant's (a plant of another user, or with another name or tag); choose another id.",
  },
  access_changed: {
    code: 41201,
    status: 412,
    summary: "The plant's access changed since the version the If-Match header names; read it again (its ETag) and retry.",
  },
  plant_changed: {
    code: 41202,
    status: 412,
    summary: 'The plant changed since the version the If-Match header names; read it again (its ETag) and retry.',
  },
  static_file_changed: {
    code: 41203,
    status: 412,
    summary: 'A static file of the `/docs` page is not at the version an If-Match or If-Unmodified-Since header names.',
  },
  plant_list_unversioned: {
    code: 41204,
    status: 412,
    summary:
      'A create asked for a version of the plant list (If-Match with entity tags, or If-None-Match: *): the list has none; nothing was created.',
  },
  payload_too_large: { code: 41301, status: 413, summary: 'The request body is too large.' },
  uri_too_long: { code: 41401, status: 414, summary: 'The request target (path and query) is too long.' },
  unsupported_media_type: { code: 41501, status: 415, summary: 'The request body has a media type the service does not take.' },
  range_not_satisfiable: {
    code: 41601,
    status: 416,
    summary: 'The Range header asks for bytes a static file of the `/docs` page does not have.',
  },
  expectation_failed: { code: 41701, status: 417, summary: 'The request has an `Expect` header other than `100-continue`.' },
  unknown_grantee: {
    code: 42201,
    status: 422,
    summary: 'The access names users or groups that do not exist (the message names them); nothing was changed.',
  },
  rate_limited: {
    code: 42901,
    status: 429,
    summary: 'Too many requests for this token (or this client address, without a valid token); see Retry-After.',
  },
  too_many_listings: {
    code: 42902,
    status: 429,
    summary: 'Too many full listings (no `limit`, or above 1000) at once for this user; see Retry-After.',
  },
  write_rate_limited: {
    code: 42903,
    status: 429,
    summary: 'Too many writes (creates, changes, deletes, access changes) for this user in the current window; see Retry-After.',
  },
  headers_too_large: { code: 43101, status: 431, summary: 'The request line or headers are too large.' },
  internal: { code: 50001, status: 500, summary: 'An unexpected server error; details are in the server log, never in the response.' },
  unavailable: {
    code: 50301,
    status: 503,
    summary: 'The database is unreachable, locked for too long, or the server is shutting down; see Retry-After.',
  },
  identity_provider_unavailable: {
    code: 50302,
    status: 503,
    summary: "The identity provider's signing keys (JWKS) cannot be fetched; retry later.",
  },
  busy: {
    code: 50303,
    status: 503,
    summary: 'Too many full listings are being served at once; see Retry-After, or ask for a page with `limit`.',
  },
} as const satisfies Record<string, { code: number; status: number; summary: string }>;

export type ErrorName = keyof typeof errorCatalogue;

/** An error that becomes exactly one Error response. `headers` are sent with it (e.g. WWW-Authenticate, Allow). */
export class ApiError extends Error {
  readonly status: number;
  readonly code: number;

  constructor(
    readonly errorName: ErrorName,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = errorCatalogue[errorName].status;
    this.code = errorCatalogue[errorName].code;
  }

  get body(): { error: number; message: string } {
    return { error: this.code, message: this.message };
  }
}

/** Markdown table of the catalogue, for the served OpenAPI document and the README. */
export function errorCatalogueMarkdown(): string {
  const rows = Object.entries(errorCatalogue).map(([name, e]) => `| ${e.code} | ${e.status} | \`${name}\` | ${e.summary} |`);
  return ['| error | status | name | meaning |', '|---|---|---|---|', ...rows].join('\n');
}
