import { isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { fractionLostInParse } from '../catalogue/plant-ids.js';
import { MERGE_PATCH_TYPE } from './common-headers.js';
import { ApiError } from './error-codes.js';

/**
 * How deep a body may nest, and how many values and keys it may hold, read before it is parsed. The deepest body an
 * operation takes is an access (lists of names in an object); the most values, an access of two thousand names; and
 * a plant's fields are the most keys. A megabyte of nested brackets or of keys takes V8's parser a second of the one
 * thread; the scan refusing it costs less than parsing a real access of that size, and nothing next to a small
 * body's parse. Within these bounds a megabyte parses in a few milliseconds, and the schema says what is wrong.
 */
const BODY_SHAPE = { depth: 4, values: 16_384, keys: 4_096 };

/**
 * A body of this size or more goes on to its checks in a later turn of the event loop than its parse. Parsing a
 * megabyte, checking two thousand names and looking them up would otherwise be one stretch of the one thread
 * (65 ms before the code is compiled), which every other request waits out. Of the bodies operations take, only an
 * access can be this large.
 */
const LARGE_BODY_BYTES = 64 * 1024;
const largeBodies = new WeakSet<FastifyRequest>();

/** Whether the request's body is one that `installJsonBodies` handed on in a later turn (see LARGE_BODY_BYTES). */
export const hasLargeBody = (request: FastifyRequest): boolean => largeBodies.has(request);

/**
 * The JSON bodies the service parses: UTF-8 (RFC 8259 §8.1), with Fastify's own parser behind the checks.
 * An operation without a body takes an empty one sent as `application/json`, as many clients send (several
 * generated from the original document, and common HTTP libraries, on DELETE), and `{}` or `null` likewise; a body
 * that says more is refused, since it was meant for another operation (the whole access, sent to one grantee's).
 */
export function installJsonBodies(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  const parse = (request: FastifyRequest, bytes: Buffer, done: (err: Error | null, body?: unknown) => void) => {
    const refused = codedBody(request.headers['content-encoding']) ?? otherCharset(request.headers['content-type']);
    if (refused) return done(refused, undefined);
    if (bytes.length === 0 && request.routeOptions.schema?.body === undefined) return done(null, undefined);
    if (!isUtf8(bytes)) return done(new ApiError('invalid_body', 'the request body is not UTF-8: send JSON as UTF-8 text'), undefined);
    const body = bytes.toString('utf8');
    const beyond = shapeBeyond(body, BODY_SHAPE);
    if (beyond) return done(new ApiError('invalid_body', `the request body ${beyond}, more than any operation takes`), undefined);
    void parseJson(request, body, (err, value) => {
      if (err) return done(notJson(body), undefined);
      if (request.routeOptions.schema?.body === undefined) return done(saysNothing(value) ? null : takesNoBody(), undefined);
      const lost = fractionLostInParse(body);
      if (lost) return done(new ApiError('invalid_body', `the request body is refused: ${lost}`), undefined);
      if (bytes.length < LARGE_BODY_BYTES) return done(null, value);
      largeBodies.add(request);
      // The parse runs as the loop reads the body's end; an immediate queued now would run before the loop reads
      // anything else. One queued from that immediate runs after it has.
      setImmediate(() => setImmediate(done, null, value));
    });
  };
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => parse(request, body as Buffer, done));
  // A change of a plant is JSON Merge Patch (RFC 7396), parsed as JSON; no other request takes the type.
  app.addContentTypeParser(MERGE_PATCH_TYPE, { parseAs: 'buffer' }, (request, body, done) => {
    if (request.method !== 'PATCH')
      return done(Object.assign(new Error(`${MERGE_PATCH_TYPE} is taken by PATCH only`), { statusCode: 415 }), undefined);
    parse(request, body as Buffer, done);
  });
}

/** Whether a body sent to an operation that takes none says nothing: `{}` or `null`. */
const saysNothing = (value: unknown): boolean =>
  value === null || (typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length === 0);

const takesNoBody = () => new ApiError('invalid_body', 'the request body is refused: this operation takes none (send no body, or {})');

/**
 * The refusal of a body sent with a content coding (`gzip`, …), which the service does not decode: a 415 that says
 * which coding it takes (RFC 9110 §15.5.16), rather than the coded bytes refused as JSON.
 */
function codedBody(coding: string | undefined): ApiError | undefined {
  if (coding === undefined || /^[ \t]*(identity[ \t]*)?$/i.test(coding)) return undefined;
  return new ApiError(
    'unsupported_media_type',
    `The request body must not be encoded (Content-Encoding: ${JSON.stringify(coding.slice(0, 40))}): send it as plain JSON`,
    { 'accept-encoding': 'identity' },
  );
}

/** The refusal of a body said to be in a charset other than UTF-8, which JSON is sent in (RFC 8259 §8.1). */
function otherCharset(contentType: string | undefined): ApiError | undefined {
  if (contentType === undefined || !/charset/i.test(contentType)) return undefined;
  const charset = /;\s*charset\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(contentType);
  const name = charset?.[1] ?? charset?.[2];
  if (name === undefined || /^utf-?8$/i.test(name)) return undefined;
  return new ApiError('unsupported_media_type', `The request body must be UTF-8 (it says charset=${JSON.stringify(name.slice(0, 40))})`);
}

/** What of `shape` a JSON text goes beyond, read without parsing it (strings skipped), or undefined. */
function shapeBeyond(text: string, shape: typeof BODY_SHAPE): string | undefined {
  let depth = 0;
  let values = 1;
  let keys = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: to its closing quote, found by indexOf, which reads a long name many times faster than a loop over
      // its characters. A quote after an odd run of backslashes is escaped; each run is counted once, at its quote.
      let end = text.indexOf('"', i + 1);
      while (end !== -1 && escaped(text, end)) end = text.indexOf('"', end + 1);
      // Unterminated: the parser says where.
      if (end === -1) return undefined;
      i = end;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > shape.depth) return `nests deeper than ${shape.depth} levels`;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    } else if (c === 0x2c) {
      if (++values > shape.values) return `holds more than ${shape.values} values`;
    } else if (c === 0x3a && ++keys > shape.keys) {
      return `holds more than ${shape.keys} keys`;
    }
  }
  return undefined;
}

/** Whether the quote at `at` follows an odd number of backslashes. */
function escaped(text: string, at: number): boolean {
  let slashes = 0;
  for (let j = at - 1; text.charCodeAt(j) === 0x5c; j--) slashes++;
  return slashes % 2 === 1;
}

/**
 * Why a body is not JSON the service takes, in its own words, with where it breaks. Fastify's parser keeps no
 * position, so a refused body is parsed again here, on the refusal's path only: if it parses, what was refused is
 * a `__proto__` or `constructor` key.
 */
function notJson(body: string): ApiError {
  if (body.trim() === '') return new ApiError('invalid_body', 'the request body is empty: send a JSON object');
  let message: string;
  try {
    JSON.parse(body);
    return new ApiError('invalid_body', 'the request body has a "__proto__" or "constructor" key, which the service does not take');
  } catch (err) {
    message = (err as Error).message;
  }
  const at = /at position (\d+)/.exec(message);
  let where: string;
  if (at) {
    const position = Number(at[1]);
    const before = body.slice(0, position);
    const near = body.slice(Math.max(0, position - 10), position + 10);
    where = `it breaks at line ${before.split('\n').length}, column ${position - before.lastIndexOf('\n')}, near ${JSON.stringify(near)}`;
  } else if (/Unexpected end/.test(message)) {
    where = 'it ends too soon';
  } else {
    // V8 names the token and the text around it when it gives no position.
    where = message.replace(/^Unexpected token/, 'unexpected');
  }
  return new ApiError('invalid_body', `the request body is not valid JSON: ${where}`);
}
