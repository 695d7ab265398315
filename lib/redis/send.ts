// The one sender of script calls: FCALL of the function library or EVALSHA, EVAL with the text when the server lacks them.
import { sendPinned, sendTo, type Connection } from './client/connection';
import { replyErrorCode } from './client/classify';
import { functionLibrary, mayFcall, refusedBeforeRunning } from './functions';
import { scripts, type Script, type ScriptName } from './registry';

/** One call of a script, built by lib/redis/commands.ts: its KEYS and ARGV, how it goes and how its reply reads. */
export interface ScriptCall<R> {
  readonly script: Script;
  readonly keys: readonly string[];
  readonly args: readonly string[];
  /** The reply as named fields; undefined where the library does not read it (the reply as is). */
  readonly decode: ((reply: unknown) => R) | undefined;
  /** Its function in the library (lib/redis/functions.ts) when the server has it; else undefined (EVALSHA). */
  readonly fn: string | undefined;
  /**
   * Undefined: by function or SHA1, then as EVAL when the server lacks it. 'text': always EVAL, which
   * cannot fail with NOSCRIPT. 'stored': no EVAL after a NOSCRIPT (the caller settles instead).
   */
  readonly form?: 'text' | 'stored';
  /** A command sent right behind the script on its connection; `decode` then gets both replies. */
  readonly after?: string[];
}

/**
 * A call of `script`; by its function in the library when `library` says the server has it (the
 * scripts of lib/redis/functions.ts only). Without `decode`, the reply is taken as it is.
 */
export function scriptCall<R = unknown>(
  script: Script,
  keys: readonly string[],
  args: readonly string[],
  decode?: (reply: unknown) => R,
  library = false,
  form?: ScriptCall<R>['form'],
): ScriptCall<R> {
  if (script.maxKeys !== null && keys.length > script.maxKeys) {
    throw new Error(`${script.name} takes at most ${script.maxKeys} keys, got ${keys.length}`);
  }
  const fn = library ? functionLibrary.functions.get(script.name) : undefined;
  return form === undefined ? { script, keys, args, decode, fn } : { script, keys, args, decode, fn, form };
}

/**
 * Runs `call` on `client` and resolves its decoded reply: by FCALL or EVALSHA, then as EVAL when the
 * server lacks the script or refused the function before running it (see `refusedBeforeRunning`).
 * Every script of the library is sent here (see `ScriptCall.form` for the exceptions).
 */
export function runScript<R>(client: Connection, call: ScriptCall<R>): Promise<R> {
  if (call.form === 'text') {
    // Not made a rejection when the client throws at once: nothing behind it in a pipeline is sent.
    const sent = dispatch(client, call, evalCommand(call)) as Promise<R>;
    return call.decode === undefined ? sent : sent.then(call.decode);
  }
  return replyOf(client, call, sendStored(client, call));
}

/** The decoded reply of `call` once `sending` (`sendStored` on `client`) answers: as EVAL when `needsText`. */
export function replyOf<R>(client: Connection, call: ScriptCall<R>, sending: Promise<unknown>): Promise<R> {
  return sending.then(call.decode, (error: unknown) => {
    if (needsText(client, call, error)) return send(client, call, evalCommand(call)).then(call.decode);
    throw error;
  }) as Promise<R>;
}

/**
 * `call` sent once by function or SHA1 on `client`: its raw reply (a rejection also when the client
 * throws at once). The hot path's send: its caller decodes, and asks `needsText` about a refusal.
 */
export function sendStored(client: Connection, call: ScriptCall<unknown>): Promise<unknown> {
  return send(client, call, storedCommand(call, client));
}

/**
 * `sendStored` with its raw reply or failure handed to `answered` or `failed` (once, never
 * synchronously): one promise fewer on a client whose adapter would make its own (see `sendTo`).
 */
export function sendStoredTo(
  client: Connection,
  call: ScriptCall<unknown>,
  answered: (reply: unknown) => void,
  failed: (error: unknown) => void,
): void {
  if (call.after === undefined) sendTo(client, storedCommand(call, client), answered, failed);
  else sendStored(client, call).then(answered, failed);
}

/** `call` as EVAL only: for a call `sendStored` sent and `needsText` says goes again. */
export function asText<R>(call: ScriptCall<R>): ScriptCall<R> {
  return { ...call, form: 'text' };
}

/** A script's reply, and how many replicas acknowledged it (null: no WAIT was sent). */
export interface Replied<R> {
  readonly reply: R;
  readonly acknowledged: number | null;
}

/**
 * `call` with `WAIT <replicas> <timeoutMs>` right behind it on the same connection, so the count
 * covers its writes; without `wait`, no WAIT, and `acknowledged` null.
 */
export function withWait<R>(
  call: ScriptCall<R>,
  wait: { readonly replicas: number; readonly timeoutMs: number } | null | undefined,
): ScriptCall<Replied<R>> {
  const decode = call.decode ?? ((reply: unknown) => reply as R);
  if (!wait) return { ...call, decode: (reply) => ({ reply: decode(reply), acknowledged: null }) };
  return {
    ...call,
    after: ['WAIT', String(wait.replicas), String(wait.timeoutMs)],
    decode: (replies) => {
      const [reply, acknowledged] = replies as [unknown, unknown];
      return { reply: decode(reply), acknowledged: Number(acknowledged) };
    },
  };
}

/** `SCRIPT LOAD` of a script on `client`, so a call by SHA1 alone finds it there. */
export function preload(client: Connection, name: ScriptName): Promise<unknown> {
  return client.sendCommand(['SCRIPT', 'LOAD', scripts[name].source]);
}

/**
 * `call` without its text: `FCALL` of its function where the server has the library (and `client`
 * may call it), else `EVALSHA`.
 */
export function storedCommand(call: ScriptCall<unknown>, client?: Connection): string[] {
  const command =
    call.fn === undefined || (client !== undefined && !mayFcall(client))
      ? ['EVALSHA', call.script.sha1, String(call.keys.length)]
      : ['FCALL', call.fn, String(call.keys.length)];
  for (const key of call.keys) command.push(key);
  for (const arg of call.args) command.push(arg);
  return command;
}

/** `call` as an `EVAL` with the script's text: never fails with NOSCRIPT. */
export function evalCommand(call: ScriptCall<unknown>): string[] {
  return ['EVAL', call.script.source, String(call.keys.length), ...call.keys, ...call.args];
}

/** `command`, and `call.after` behind it on the same connection. */
function dispatch(client: Connection, call: ScriptCall<unknown>, command: string[]): Promise<unknown> {
  return call.after === undefined ? client.sendCommand(command) : sendPinned(client, [command, call.after]);
}

/** `dispatch`, as a rejection also when the client throws at once (node-redis v5+ when closed). */
function send(client: Connection, call: ScriptCall<unknown>, command: string[]): Promise<unknown> {
  try {
    return dispatch(client, call, command);
  } catch (error) {
    return Promise.reject(error);
  }
}

/**
 * Whether `call`, refused with `error`, goes again as EVAL: the server lacks the script (NOSCRIPT;
 * not for a 'stored' call), or refused its FCALL before running it.
 */
export function needsText(client: Connection, call: ScriptCall<unknown>, error: unknown): boolean {
  if (call.form !== 'stored' && replyErrorCode(error) === 'NOSCRIPT') return true;
  return call.fn !== undefined && refusedBeforeRunning(client, error);
}
