/** A value, or a promise of it: the request path answers synchronously where the backend can (SQLite). */
export type Awaitable<T> = T | Promise<T>;

/** `next(value)`, at once when `value` is already there, else once it is: no promise where the work is synchronous. */
export function then<T, R>(value: Awaitable<T>, next: (value: T) => R): Awaitable<R> {
  return value instanceof Promise ? value.then(next) : next(value);
}
