// Grant and registration ids: unique across processes, cheap to make on the hot path.
import { nanoid } from 'nanoid';

/** This process's prefix: 12 random characters (72 bits), so ids of different processes never meet. */
const prefix = nanoid(12);
let sequence = 0;

/** A fresh id: this process's prefix and a counter (no spaces; safe in key names and GRABBED records). */
export function newId(): string {
  return `${prefix}.${(sequence++).toString(36)}`;
}
