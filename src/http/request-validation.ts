import type { FastifySchemaCompiler } from 'fastify';
import { parse as parseQuery } from 'fast-querystring';
import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { ApiError } from './error-codes.js';
import { sharedSchemas } from './schemas.js';

/** The shared schemas by $id, for bodies that refer to them (NewPlant to Plant). */
const context = Object.fromEntries(sharedSchemas.map((schema) => [(schema as { $id?: string }).$id!, schema as TSchema]));

/** What a body field's schema says of it, for a message that names a missing field. */
interface FieldSchema {
  description?: string;
  minimum?: number;
  maximum?: number;
}

/** A missing field, with what it is and the values it takes, from its schema. */
function missingField(name: string, field: FieldSchema | undefined): string {
  const range =
    field?.minimum !== undefined && field.maximum !== undefined ? `, a whole number from ${field.minimum} to ${field.maximum}` : '';
  const what = field?.description === undefined ? '' : `: ${field.description[0]!.toLowerCase()}${field.description.slice(1)}`;
  return `${JSON.stringify(name)}${what}${range}`;
}

/** A body's first problem, in words: the field it is about and what is wrong with it. */
function bodyProblem(errors: ReturnType<ReturnType<typeof Compile>['Errors']>, fields: Map<string, FieldSchema> | undefined): string {
  const unknown = errors.find((e) => e.keyword === 'unevaluatedProperties' || e.keyword === 'additionalProperties');
  const first = errors.find((e) => e !== unknown) ?? unknown;
  if (first === undefined) return 'the request body is invalid';
  if (first === unknown) {
    const fields = (first.params as { unevaluatedProperties?: string[]; additionalProperties?: string[] }).unevaluatedProperties ?? [];
    return `the request body has fields this operation does not take: ${fields.slice(0, 5).map(shown).join(', ')}`;
  }
  if (first.keyword === 'required') {
    const missing = (first.params as { requiredProperties?: string[] }).requiredProperties ?? [];
    return `the request body is missing ${missing.map((f) => missingField(f, fields?.get(f))).join('; ')}`;
  }
  const where = first.instancePath ? `field "${first.instancePath.slice(1).replaceAll('/', '.')}"` : 'the request body';
  return `${where} ${first.message}`;
}

interface PropertySchema {
  type?: string;
  minimum?: number;
  maximum?: number;
}

const DECIMAL = /^[0-9]+$/;

const shown = (raw: string): string => JSON.stringify(raw.length > 40 ? `${raw.slice(0, 40)}…` : raw);

/** An integer parameter's text as the number its schema wants: plain decimal digits in range, or the problem. */
function integerParameter(name: string, prop: PropertySchema, raw: string, part: 'query' | 'path'): number | ApiError {
  const value = DECIMAL.test(raw) ? Number(raw) : NaN;
  const inRange = (prop.minimum === undefined || value >= prop.minimum) && (prop.maximum === undefined || value <= prop.maximum);
  if (!Number.isNaN(value) && inRange) return value;
  const range = `from ${prop.minimum ?? 0} to ${prop.maximum ?? Number.MAX_SAFE_INTEGER}`;
  return new ApiError(
    'invalid_parameter',
    `${part} parameter "${name}" must be a whole number ${range} in plain decimal digits, not ${shown(raw)}`,
  );
}

type Validator = ReturnType<typeof Compile>;
type Properties = Array<[string, PropertySchema]>;
type Validation = (data: unknown) => { value: unknown } | { error: ApiError };

/**
 * Query strings are text, and common validators coerce them loosely ("" becomes 0, "1e3" becomes 1000,
 * "0x10" becomes 16). This compiler converts an integer parameter (query or path) only when it is plain
 * decimal digits, refuses repeats, and then checks the route's schema as written, so the served document,
 * validation and error messages all come from the same schema. Bodies are checked against their schema, with
 * the shared schemas they refer to, and the first problem is named.
 */
export const strictValidatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  // Only bodies refer to the shared schemas (NewPlant to Plant).
  const validator = httpPart === 'body' ? Compile(context, withoutCheckedRepeats(schema)) : Compile(schema);
  const properties = Object.entries((schema as { properties?: Record<string, PropertySchema> }).properties ?? {});
  switch (httpPart) {
    case 'querystring':
      return queryValidation(validator, properties);
    case 'params':
      return paramsValidation(validator, properties);
    case 'body':
      return bodyValidation(validator, bodyFields(schema), arrayFields(schema));
    default:
      return (data: unknown) =>
        validator.Check(data) ? { value: data } : { error: new ApiError('bad_request', `invalid request ${httpPart ?? 'data'}`) };
  }
};

/** Marks a query whose text has a malformed percent-encoding (`%zz`, `%FF` alone), for its validation to refuse. */
const MALFORMED = Symbol('plantstore.malformedQuery');

/**
 * The router's query string parser: Fastify's own (fast-querystring), which keeps a malformed escape as its text,
 * so `?tag=%zz` would ask for the tag `%zz`, as `?tag=%25zz` does. Such a query is marked here and refused by the
 * route's validation (400, code 40003), after authentication, as every parameter is; the router runs before it.
 */
export function parseQueryString(text: string): Record<string, unknown> {
  const query = (text.length === 0 ? {} : parseQuery(text)) as Record<string | symbol, unknown>;
  if (text.includes('%')) {
    try {
      decodeURIComponent(text);
    } catch {
      query[MALFORMED] = true;
    }
  }
  return query;
}

/**
 * A parameter the schema does not name is refused, with its name: `?LIMIT=5`, `?limit[]=5` or `?sort=name`
 * would otherwise be ignored, and the client would take a full listing for the filtered page it asked for.
 */
function queryValidation(validator: Validator, properties: Properties): Validation {
  const known = new Set(properties.map(([name]) => name));
  const names = properties.map(([name]) => `"${name}"`);
  const takes =
    names.length === 0
      ? 'no query parameters'
      : `only ${names.length === 1 ? names[0] : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`}`;
  return (data: unknown) => {
    const query = data as Record<string, unknown>;
    if ((query as { [MALFORMED]?: true })[MALFORMED]) {
      return { error: new ApiError('bad_request', 'the query string has a malformed percent-encoding: write % as %25') };
    }
    for (const name in query) {
      if (!known.has(name)) {
        const unknown = Object.keys(query).filter((key) => !known.has(key));
        const named = unknown.slice(0, 5).map(shown).join(', ') + (unknown.length > 5 ? ` and ${unknown.length - 5} more` : '');
        const message = `unknown query parameter${unknown.length > 1 ? 's' : ''} ${named}: this operation takes ${takes}`;
        return { error: new ApiError('unknown_parameter', message) };
      }
    }
    for (const [name, prop] of properties) {
      const raw = query[name];
      if (raw === undefined) continue;
      if (Array.isArray(raw)) {
        return { error: new ApiError('repeated_parameter', `query parameter "${name}" must be given at most once`) };
      }
      if (prop.type === 'integer') {
        // The query string parser gives strings (and arrays, refused above).
        const value = integerParameter(name, prop, raw as string, 'query');
        if (value instanceof ApiError) return { error: value };
        query[name] = value;
      }
    }
    return validator.Check(query) ? { value: query } : { error: parameterProblem(validator, query, 'query') };
  };
}

/** The first problem of a query's or path's parameters, naming the parameter and, for a list of values, the values. */
function parameterProblem(validator: Validator, data: unknown, part: 'query' | 'path'): ApiError {
  const [first] = validator.Errors(data);
  if (!first?.instancePath) return new ApiError('invalid_parameter', `the ${part === 'query' ? 'query string' : 'path'} is invalid`);
  const allowed = (first.params as { allowedValues?: unknown[] }).allowedValues;
  const problem = first.keyword === 'enum' && allowed ? `must be ${allowed.map((v) => JSON.stringify(v)).join(' or ')}` : first.message;
  return new ApiError('invalid_parameter', `${part} parameter "${first.instancePath.slice(1)}" ${problem}`);
}

function paramsValidation(validator: Validator, properties: Properties): Validation {
  const integers = properties.filter(([, prop]) => prop.type === 'integer');
  return (data: unknown) => {
    const params = data as Record<string, string | number>;
    for (const [name, prop] of integers) {
      const value = integerParameter(name, prop, String(params[name]), 'path');
      if (value instanceof ApiError) return { error: value };
      params[name] = value;
    }
    return validator.Check(params) ? { value: params } : { error: parameterProblem(validator, params, 'path') };
  };
}

/**
 * The fields a body schema names (through its `$ref`s and `allOf`), or undefined when it takes others too: a body
 * that has fields besides them is refused by naming them, without the validator's list of every error, which grows
 * with a body of thousands of fields.
 */
function bodyFields(schema: unknown): Map<string, FieldSchema> | undefined {
  const fields = new Map<string, FieldSchema>();
  const visit = (node: unknown): boolean => {
    const s = node as { $ref?: string; allOf?: unknown[]; properties?: Record<string, FieldSchema> };
    if (s.$ref !== undefined) return s.$ref in context && visit(context[s.$ref]);
    for (const [name, field] of Object.entries(s.properties ?? {})) fields.set(name, field);
    return (s.allOf ?? []).every(visit);
  };
  const closed = (schema as { unevaluatedProperties?: unknown; additionalProperties?: unknown; $ref?: string }) ?? {};
  const target: typeof closed | undefined = closed.$ref !== undefined ? context[closed.$ref] : closed;
  if (target === undefined || (target.unevaluatedProperties !== false && target.additionalProperties !== false)) return undefined;
  return visit(schema) ? fields : undefined;
}

/** An array field of a body schema, with the bounds checked before the validator runs (see `arrayProblem`). */
interface ArrayField {
  name: string;
  maxItems: number | undefined;
  uniqueItems: boolean;
}

/**
 * The body schema without `uniqueItems` on its top-level arrays of strings, which `arrayProblem` checks with a
 * set of the strings: the validator hashes each item first, about 9 µs a name (9 ms for a body of 1,000).
 */
function withoutCheckedRepeats(schema: TSchema): TSchema {
  const ref = (schema as { $ref?: string }).$ref;
  // Through a reference, to the schema it names.
  if (ref !== undefined && context[ref] !== undefined) return withoutCheckedRepeats(context[ref]);
  const s = schema as { properties?: Record<string, { type?: string; uniqueItems?: boolean; items?: { type?: string } }> };
  if (s.properties === undefined) return schema;
  const properties = Object.fromEntries(
    Object.entries(s.properties).map(([name, prop]) => {
      if (prop.type !== 'array' || prop.uniqueItems !== true || prop.items?.type !== 'string') return [name, prop];
      const { uniqueItems: _checkedFirst, ...rest } = prop;
      return [name, rest];
    }),
  );
  return { ...schema, properties };
}

/** The array fields a body schema names at its top level (through a `$ref`). */
function arrayFields(schema: unknown): ArrayField[] {
  const s = schema as { $ref?: string; properties?: Record<string, { type?: string; maxItems?: number; uniqueItems?: boolean }> };
  const resolved: unknown = s.$ref !== undefined ? context[s.$ref] : s;
  const target = resolved as typeof s | undefined;
  return Object.entries(target?.properties ?? {})
    .filter(([, prop]) => prop.type === 'array')
    .map(([name, prop]) => ({ name, maxItems: prop.maxItems, uniqueItems: prop.uniqueItems === true }));
}

/**
 * An array field's length and repeats, checked first in time linear in its length: the validator's report of
 * repeated items costs the square of their count (16,000 repeats of one name, 64 KB, took seconds of the event
 * loop), and past `maxItems` the items need not be read at all.
 */
function arrayProblem(data: Record<string, unknown>, arrays: readonly ArrayField[]): string | undefined {
  for (const { name, maxItems, uniqueItems } of arrays) {
    const value = data[name];
    if (!Array.isArray(value)) continue;
    if (maxItems !== undefined && value.length > maxItems) {
      return `field "${name}" must not have more than ${maxItems} items (it has ${value.length})`;
    }
    if (!uniqueItems) continue;
    const seen = new Set<unknown>();
    for (const item of value) {
      // Not a string: the validator refuses the item itself.
      if (typeof item !== 'string') break;
      if (seen.has(item)) return `field "${name}" must not have duplicate items: ${shown(item)} is given more than once`;
      seen.add(item);
    }
  }
  return undefined;
}

function bodyValidation(validator: Validator, fields: Map<string, FieldSchema> | undefined, arrays: readonly ArrayField[]): Validation {
  return (data: unknown) => {
    if (arrays.length > 0 && typeof data === 'object' && data !== null && !Array.isArray(data)) {
      const problem = arrayProblem(data as Record<string, unknown>, arrays);
      if (problem !== undefined) return { error: new ApiError('invalid_body', problem) };
    }
    if (validator.Check(data)) return { value: data };
    if (typeof data !== 'object' || data === null || Array.isArray(data)) {
      return { error: new ApiError('invalid_body', 'the request body must be a JSON object') };
    }
    const unknown = fields === undefined ? [] : Object.keys(data).filter((name) => !fields.has(name));
    if (unknown.length > 0) {
      const named = unknown.slice(0, 5).map(shown).join(', ') + (unknown.length > 5 ? ` and ${unknown.length - 5} more` : '');
      return { error: new ApiError('invalid_body', `the request body has fields this operation does not take: ${named}`) };
    }
    return { error: new ApiError('invalid_body', bodyProblem(validator.Errors(data), fields)) };
  };
}
