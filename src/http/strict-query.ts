import type { FastifySchemaCompiler } from 'fastify';
import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { ApiError } from './error-codes.js';

interface PropertySchema {
  type?: string;
  minimum?: number;
  maximum?: number;
}

const DECIMAL = /^[0-9]+$/;

const shown = (raw: string): string => JSON.stringify(raw.length > 40 ? `${raw.slice(0, 40)}…` : raw);

function integerProblem(name: string, prop: PropertySchema, raw: string): ApiError {
  const range = `from ${prop.minimum ?? 0} to ${prop.maximum ?? Number.MAX_SAFE_INTEGER}`;
  return new ApiError(
    'invalid_parameter',
    `query parameter "${name}" must be a whole number ${range} in plain decimal digits, not ${shown(raw)}`,
  );
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
  const validator = Compile(schema);
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
