import type { FastifySchemaCompiler } from 'fastify';
import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { ApiError } from './error-codes.js';
import { sharedSchemas } from './schemas.js';

/** The shared schemas by $id, for bodies that refer to them (NewPlant to Plant). */
const context = Object.fromEntries(sharedSchemas.map((schema) => [(schema as { $id?: string }).$id!, schema as TSchema]));

/** A body's first problem, in words: the field it is about and what is wrong with it. */
function bodyProblem(errors: ReturnType<ReturnType<typeof Compile>['Errors']>): string {
  const unknown = errors.find((e) => e.keyword === 'unevaluatedProperties' || e.keyword === 'additionalProperties');
  const first = errors.find((e) => e !== unknown) ?? unknown;
  if (first === undefined) return 'the request body is invalid';
  if (first === unknown) {
    const fields = (first.params as { unevaluatedProperties?: string[]; additionalProperties?: string[] }).unevaluatedProperties ?? [];
    return `the request body has fields this operation does not take: ${fields.slice(0, 5).map(shown).join(', ')}`;
  }
  if (first.keyword === 'required') {
    const missing = (first.params as { requiredProperties?: string[] }).requiredProperties ?? [];
    return `the request body is missing ${missing.map((f) => JSON.stringify(f)).join(', ')}`;
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

function integerProblem(name: string, prop: PropertySchema, raw: string, part = 'query'): ApiError {
  const range = `from ${prop.minimum ?? 0} to ${prop.maximum ?? Number.MAX_SAFE_INTEGER}`;
  return new ApiError(
    'invalid_parameter',
    `${part} parameter "${name}" must be a whole number ${range} in plain decimal digits, not ${shown(raw)}`,
  );
}

/** A path parameter's text as the integer its schema wants, or the problem with it. */
function pathInteger(name: string, prop: PropertySchema, raw: string): number | ApiError {
  if (!DECIMAL.test(raw)) return integerProblem(name, prop, raw, 'path');
  const value = Number(raw);
  if ((prop.minimum !== undefined && value < prop.minimum) || (prop.maximum !== undefined && value > prop.maximum)) {
    return integerProblem(name, prop, raw, 'path');
  }
  return value;
}

/**
 * Query strings are text, and common validators coerce them loosely ("" becomes 0, "1e3" becomes 1000,
 * "0x10" becomes 16). This compiler converts an integer parameter only when it is plain decimal digits,
 * refuses repeats, and then checks the route's schema as written, so the served document, validation and
 * error messages all come from the same schema.
 *
 * A parameter the schema does not name is refused, with its name: `?LIMIT=5`, `?limit[]=5` or `?tag=herb`
 * would otherwise be ignored, and the client would take a full listing for the filtered page it asked for.
 */
export const strictValidatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema, httpPart }) => {
  const validator = Compile(context, schema);
  if (httpPart === 'body') {
    return (data: unknown) => {
      if (validator.Check(data)) return { value: data };
      if (typeof data !== 'object' || data === null || Array.isArray(data)) {
        return { error: new ApiError('invalid_body', 'the request body must be a JSON object') };
      }
      return { error: new ApiError('invalid_body', bodyProblem(validator.Errors(data))) };
    };
  }
  if (httpPart === 'params') {
    const integers = Object.entries((schema as { properties?: Record<string, PropertySchema> }).properties ?? {}).filter(
      ([, prop]) => prop.type === 'integer',
    );
    return (data: unknown) => {
      const params = data as Record<string, string | number>;
      for (const [name, prop] of integers) {
        const value = pathInteger(name, prop, String(params[name]));
        if (value instanceof ApiError) return { error: value };
        params[name] = value;
      }
      return validator.Check(params) ? { value: params } : { error: new ApiError('invalid_parameter', 'invalid path parameter') };
    };
  }
  if (httpPart !== 'querystring') {
    return (data: unknown) =>
      validator.Check(data) ? { value: data } : { error: new ApiError('bad_request', `invalid request ${httpPart ?? 'data'}`) };
  }
  const properties = Object.entries((schema as { properties?: Record<string, PropertySchema> }).properties ?? {});
  const known = new Set(properties.map(([name]) => name));
  const takes = properties.length === 0 ? 'no query parameters' : `only ${properties.map(([name]) => `"${name}"`).join(' and ')}`;
  return (data: unknown) => {
    const query = data as Record<string, unknown>;
    for (const name in query) {
      if (!known.has(name)) {
        const unknown = Object.keys(query).filter((key) => !known.has(key));
        const named = unknown.slice(0, 5).map(shown).join(', ') + (unknown.length > 5 ? ` and ${unknown.length - 5} more` : '');
        return {
          error: new ApiError(
            'unknown_parameter',
            `unknown query parameter${unknown.length > 1 ? 's' : ''} ${named}: this operation takes ${takes}`,
          ),
        };
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
        const text = raw as string;
        if (!DECIMAL.test(text)) return { error: integerProblem(name, prop, text) };
        const value = Number(text);
        if ((prop.minimum !== undefined && value < prop.minimum) || (prop.maximum !== undefined && value > prop.maximum)) {
          return { error: integerProblem(name, prop, text) };
        }
        query[name] = value;
      }
    }
    if (validator.Check(query)) return { value: query };
    const [first] = validator.Errors(query);
    const where = first?.instancePath ? `query parameter "${first.instancePath.slice(1)}"` : 'query string';
    return { error: new ApiError('invalid_parameter', `${where} ${first?.message ?? 'is invalid'}`) };
  };
};
