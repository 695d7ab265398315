// A bad argument, described for an error message.
/** A short description of a bad argument for error messages: `"text"`, `null`, `a function`, `number -1`. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' || typeof value === 'function'
    ? `a ${typeof value}`
    : `${typeof value} ${String(value)}`;
}
