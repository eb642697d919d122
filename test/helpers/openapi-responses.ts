import { AssertionError } from 'node:assert';
import type { IncomingHttpHeaders } from 'node:http';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

/**
 * Checks a received HTTP response against an OpenAPI 3.1 document: the status is described for the path
 * and method (or by a range or `default` entry), the content type is one the document lists, the body
 * matches the schema with Ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1, with the OpenAPI formats
 * such as int32), and described headers match their schemas. Nothing here knows about Plant Store: all
 * it knows comes from the document.
 */

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- walking an untyped JSON document
type Json = Record<string, any>;

export interface CheckedResponse {
  method: string;
  /** The request target as sent: path and query. */
  target: string;
  status: number;
  headers: IncomingHttpHeaders;
  /** The body as received, decoded as UTF-8. */
  text: string;
}

export interface ResponseValidatorOptions {
  /**
   * Paths served on purpose without being described (the document itself and its HTML rendering): their
   * responses are not checked.
   */
  undescribedPaths?: RegExp;
  /**
   * JSON pointer (`#/components/schemas/…`) of the body that error responses outside every described
   * operation must have: an unknown path, a method the path does not have, a request target that does
   * not even parse. Without it such responses only have to be 4xx.
   */
  errorSchema?: string;
}

/** Returns every violation found, as sentences; empty when the response conforms. */
export type ResponseValidator = (res: CheckedResponse) => string[];

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
const DOCUMENT_ID = 'urn:plantstore-test:openapi';

const token = (t: string): string => encodeURIComponent(t.replaceAll('~', '~0').replaceAll('/', '~1'));
const pointer = (...tokens: string[]): string => `#/${tokens.map(token).join('/')}`;

/** Media type without parameters, lower-cased: `application/json; charset=utf-8` is `application/json`. */
const essence = (value: string): string => value.split(';', 1)[0]!.trim().toLowerCase();

const mediaMatches = (key: string, received: string): boolean => {
  const [type, subtype] = essence(key).split('/');
  const [rType, rSubtype] = received.split('/');
  return (type === '*' || type === rType) && (subtype === '*' || subtype === rSubtype);
};

const isJson = (media: string): boolean => media === 'application/json' || media.endsWith('+json');

function safeDecode(path: string): string {
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

export function createResponseValidator(doc: Json, options: ResponseValidatorOptions = {}): ResponseValidator {
  // strict: an unknown keyword or format in the document is an error here, not a silently skipped check.
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
  addFormats.default(ajv);
  // OpenAPI's own schema keywords (OAS 3.1 §4.8.24), and the document's top-level fields: the whole
  // document is added as one schema so that its local $refs resolve, and its root is never used to check.
  ajv.addVocabulary(['discriminator', 'xml', 'externalDocs', 'example']);
  ajv.addVocabulary(['openapi', 'info', 'jsonSchemaDialect', 'servers', 'paths', 'webhooks', 'components', 'security', 'tags']);
  ajv.addSchema({ ...doc, $id: DOCUMENT_ID });

  const compiled = new Map<string, ValidateFunction>();
  const schemaAt = (ref: string): ValidateFunction => {
    let validate = compiled.get(ref);
    if (!validate) {
      validate = ajv.compile({ $ref: `${DOCUMENT_ID}${ref}` });
      compiled.set(ref, validate);
    }
    return validate;
  };
  const schemaErrors = (ref: string, value: unknown, what: string): string[] => {
    const validate = schemaAt(ref);
    if (validate(value)) return [];
    return (validate.errors ?? []).map((e) => `${what}${e.instancePath} ${e.message} (schema ${e.schemaPath})`);
  };

  // Literal paths before templated ones (OpenAPI 3.1 §4.8.8).
  const paths = Object.keys(doc.paths ?? {})
    .map((template) => ({
      template,
      literal: !template.includes('{'),
      pattern: new RegExp(`^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+')}$`),
    }))
    .sort((a, b) => Number(b.literal) - Number(a.literal));

  return (res) => {
    const method = res.method.toLowerCase();
    const rawPath = res.target.split(/[?#]/, 1)[0]!;
    const path = paths.find((p) => p.pattern.test(safeDecode(rawPath)))?.template;
    const item: Json | undefined = path === undefined ? undefined : doc.paths[path];
    // HEAD is GET without a body (RFC 9110 §9.3.2) unless the document describes it on its own.
    const opMethod = method === 'head' && item?.head === undefined ? 'get' : method;
    const operation: Json | undefined = item?.[opMethod];
    const bodyless = method === 'head' || res.status === 204 || res.status === 304;

    if (operation === undefined) {
      if (options.undescribedPaths?.test(rawPath)) return [];
      return undescribed(res, path, item, bodyless);
    }

    const responses: Json = operation.responses ?? {};
    const statusKey = [String(res.status), `${String(res.status)[0]}XX`, 'default'].find((k) => responses[k] !== undefined);
    if (statusKey === undefined) {
      return [
        `status ${res.status} is not described for ${opMethod.toUpperCase()} ${path} (described: ${Object.keys(responses).join(', ')})`,
      ];
    }
    let response: Json = responses[statusKey];
    let responsePointer = pointer('paths', path!, opMethod, 'responses', statusKey);
    if (typeof response.$ref === 'string') {
      responsePointer = response.$ref;
      response = resolve(doc, response.$ref);
    }
    const where = `${opMethod.toUpperCase()} ${path} ${statusKey}`;
    return [
      ...headerViolations(res, response, responsePointer, where),
      ...bodyViolations(res, response.content, (key) => `${responsePointer}/content/${token(key)}/schema`, where, bodyless),
    ];
  };

  function undescribed(res: CheckedResponse, path: string | undefined, item: Json | undefined, bodyless: boolean): string[] {
    const what = `${res.method.toUpperCase()} ${res.target.slice(0, 120)}`;
    const violations: string[] = [];
    // A target that is not valid percent-encoding is refused before any path or method is considered.
    if (res.status === 400 && !decodes(res.target)) return violations;
    if (item !== undefined) {
      // The path is described, the method is not: 405, and Allow names the methods the document describes.
      if (res.status !== 405)
        violations.push(`${what}: ${path} has no ${res.method.toUpperCase()} operation, so the answer should be 405, not ${res.status}`);
      const described = METHODS.filter((m) => item[m] !== undefined).map((m) => m.toUpperCase());
      const allow = String(res.headers.allow ?? '')
        .split(',')
        .map((m) => m.trim().toUpperCase());
      const missing = described.filter((m) => !allow.includes(m));
      if (res.status === 405 && missing.length > 0)
        violations.push(`${what}: Allow "${res.headers.allow ?? ''}" lacks ${missing.join(', ')}`);
    } else if (res.status < 400 || res.status >= 500) {
      violations.push(`${what} is not described by the document, so it should be answered with a 4xx error, not ${res.status}`);
    }
    if (options.errorSchema !== undefined) {
      const content = { 'application/json': { schema: {} } };
      violations.push(...bodyViolations(res, content, () => options.errorSchema!, what, bodyless));
    }
    return violations;
  }

  function headerViolations(res: CheckedResponse, response: Json, responsePointer: string, where: string): string[] {
    const violations: string[] = [];
    for (const [name, spec] of Object.entries((response.headers ?? {}) as Json)) {
      // "If a response header is defined with the name Content-Type, it SHALL be ignored" (OAS 3.1 §4.8.17.1).
      if (name.toLowerCase() === 'content-type') continue;
      const header: Json = typeof spec.$ref === 'string' ? resolve(doc, spec.$ref) : spec;
      const raw = res.headers[name.toLowerCase()];
      if (raw === undefined) {
        if (header.required === true) violations.push(`${where}: required header ${name} is missing`);
        continue;
      }
      if (header.schema === undefined) continue;
      const text = Array.isArray(raw) ? raw.join(', ') : raw;
      const type = header.schema.type;
      const value = type === 'integer' || type === 'number' ? (Number.isNaN(Number(text)) ? text : Number(text)) : text;
      const headerPointer = typeof spec.$ref === 'string' ? spec.$ref : `${responsePointer}/headers/${token(name)}`;
      violations.push(...schemaErrors(`${headerPointer}/schema`, value, `${where}: header ${name} ${JSON.stringify(text)}`));
    }
    return violations;
  }

  function bodyViolations(
    res: CheckedResponse,
    content: Json | undefined,
    schemaPointer: (mediaKey: string) => string,
    where: string,
    bodyless: boolean,
  ): string[] {
    const received = res.headers['content-type'];
    if (content === undefined || Object.keys(content).length === 0) {
      return res.text === '' ? [] : [`${where}: the document describes no body, but one was sent (${received ?? 'no content type'})`];
    }
    if (received === undefined) {
      return bodyless && res.text === '' ? [] : [`${where}: no Content-Type; described: ${Object.keys(content).join(', ')}`];
    }
    const media = essence(received);
    const key = Object.keys(content).find((k) => mediaMatches(k, media));
    if (key === undefined) return [`${where}: Content-Type ${received} is not described (described: ${Object.keys(content).join(', ')})`];
    if (bodyless) return res.text === '' ? [] : [`${where}: a ${res.method} or ${res.status} response has a body`];
    const schema = content[key].schema;
    if (schema === undefined) return [];
    if (!isJson(media)) return [];
    let body: unknown;
    try {
      body = JSON.parse(res.text);
    } catch {
      return [`${where}: the ${media} body is not JSON: ${JSON.stringify(res.text.slice(0, 200))}`];
    }
    return schemaErrors(schemaPointer(key), body, `${where}: body`);
  }
}

function resolve(doc: Json, ref: string): Json {
  if (!ref.startsWith('#/')) throw new Error(`only local references are supported: ${ref}`);
  return ref
    .slice(2)
    .split('/')
    .map((t) => decodeURIComponent(t).replaceAll('~1', '/').replaceAll('~0', '~'))
    .reduce<Json>((node, token) => node?.[token], doc);
}

/** Fails with every violation listed, the request, and the start of the body. */
export function assertConforms(validate: ResponseValidator, res: CheckedResponse): void {
  const violations = validate(res);
  if (violations.length === 0) return;
  throw new AssertionError({
    message:
      `response to ${res.method} ${res.target.slice(0, 200)} (status ${res.status}) does not conform to the served OpenAPI document:\n` +
      violations.map((v) => `  - ${v}`).join('\n') +
      `\n  body: ${JSON.stringify(res.text.slice(0, 300))}`,
  });
}

function decodes(target: string): boolean {
  try {
    decodeURIComponent(target.split('?', 1)[0]!);
    return true;
  } catch {
    return false;
  }
}
