// Only for lib/redis/inspect.ts (another helper's file) until it imports \`Ledger\` from ./ledger: then delete.
export type { Ledger as Holdings } from './ledger';
