// What every part of one semaphore shares: its keys, client, options, pool and telemetry, and the steps all of them take (ready, call, command, track).
import { setMaxListeners } from 'node:events';
import type { Connection } from './redis/client/connection';
import { BlockingPool, type ConnectionPool } from './pool/blocking-pool';
import { SemaphoreClosedError, SemaphoreRedisError } from './errors';
import { semaphoreKeys, type SemaphoreKeys } from './redis/keys';
import type { ResolvedOptions } from './options';
import { adaptClient, clientKeyPrefix, topologyOf } from './redis/client/adapt';
import { createOwnClient } from './redis/client/standalone';
import { asText, needsText, replyOf, runScript, sendStoredTo, type ScriptCall } from './redis/send';
import { DeadlineExceeded, ignore, withDeadline, type Decision, type DeadlineQueue } from './util/deadline';
import { checkServer } from './redis/server-checks';
import { PoolShare } from './pool/pool-share';
import { keySlot } from './redis/slot';
import { Telemetry, type Emit, type Hears } from './telemetry';

export type { Emit, Hears } from './telemetry';

/** How `SemaphoreContext.call` runs a script. */
export interface CallOptions {
  /** Also once close() has started (a release, a refresh, settling a wait). */
  readonly whileClosing?: boolean;
  /** A waiter's own connection, which can settle its wait when the main client is gone. */
  readonly via?: Connection | undefined;
  /** Reject with the client's own error rather than a SemaphoreRedisError. */
  readonly raw?: boolean;
}

export class SemaphoreContext {
  readonly name: string;
  readonly resources: number;
  readonly options: ResolvedOptions;
  /** Replaced once, at the first use, when a plain client turns out to talk to a Cluster node (#connect). */
  keys: SemaphoreKeys;
  /** Whether the server has the function library (lib/redis/functions.ts): set at the first use's server checks. */
  functions = false;
  readonly client: Connection;
  readonly ownsClient: boolean;
  readonly pool: ConnectionPool;
  readonly telemetry: Telemetry;
  readonly emit: Emit;
  /** Whether the semaphore has a listener for an event: events nobody hears are not built. */
  readonly hears: Hears;
  /** How many calls and background settling steps close() waits for (`begin`, `end`). */
  #inFlight = 0;
  /** Resolves `settled()` once `#inFlight` is back to 0. */
  #drained: (() => void) | undefined;
  #drainedPromise: Promise<void> | undefined;
  /** Aborted when close() starts: settling steps stop waiting for a Redis that does not answer. */
  readonly closeController = new AbortController();
  /** Set once close() starts. */
  closing: Promise<void> | undefined;
  #connecting: Promise<void> | undefined;
  /** The server checks (version, eviction policy) run at first use, not on every command. */
  #serverChecked = false;
  /** Connected (when the semaphore made the client) and checked once: `ready()` need not wait. */
  #connected = false;
  /** What `ready()` resolves once nothing is left to wait for. */
  #readyClient: Promise<Connection> | undefined;
  /** The promise `answer` made last, and how it tells `track` it is decided: until `track` or the next `answer`. */
  #answering: Promise<unknown> | undefined;
  #decision: Decision | undefined;

  constructor(
    name: string,
    options: ResolvedOptions,
    emit: Emit,
    prepareConnection: (connection: Connection) => Promise<string | undefined>,
    hears: Hears = () => true,
  ) {
    this.name = name;
    this.options = options;
    this.resources = options.resources;
    this.emit = emit;
    this.hears = hears;
    const given = options.redis;
    this.keys = semaphoreKeys(name, {
      cluster: given !== undefined && topologyOf(given) === 'cluster',
      keyPrefix: clientKeyPrefix(given) + options.keyPrefix,
    });
    this.ownsClient = given === undefined;
    this.client = given === undefined ? createOwnClient(options.url) : adaptClient(given, this.keys.available);
    this.pool = options.sharedPool
      ? new PoolShare(options.sharedPool)
      : new BlockingPool(this.client, options.maxBlockingConnections, prepareConnection);
    this.telemetry = new Telemetry(name, emit, hears);
    // Every lock waiting for the first use's server checks listens for close() (lock/take.ts).
    setMaxListeners(0, this.closeController.signal);
  }

  /** The main client, connected on first use when the semaphore made it. `whileClosing` lets waiters settle. */
  ready(whileClosing = false): Promise<Connection> {
    return this.readyNow() !== undefined
      ? (this.#readyClient ??= Promise.resolve(this.client))
      : this.#connect(whileClosing);
  }

  /**
   * The main client when it is usable without waiting: connected (or the caller's), checked, and the
   * semaphore not closing. Otherwise undefined, and `ready()` says what to wait for or why not. A hot
   * path writes `ctx.readyNow() ?? (await ctx.ready())` and so skips a microtask.
   */
  readyNow(): Connection | undefined {
    if (!this.#connected || this.closing !== undefined || (this.ownsClient && !this.client.isOpen)) return undefined;
    return this.client;
  }

  async #connect(whileClosing: boolean): Promise<Connection> {
    if (this.closing && (!whileClosing || (this.ownsClient && !this.client.isOpen))) {
      throw new SemaphoreClosedError(this.name);
    }
    if (this.ownsClient && !this.client.isOpen) {
      this.#connecting ??= this.client.connect().then(
        () => undefined,
        (error: unknown) => {
          this.#connecting = undefined;
          throw new SemaphoreRedisError(this.name, 'connect', error);
        },
      );
    }
    await this.#connecting;
    if (!this.#serverChecked) {
      // Rejects with UnsupportedServerError below Redis 6.2, at this call and every later one.
      const check = await checkServer(this.client, {
        name: this.name,
        identity: this.options.redis ?? this.client,
        slot:
          this.options.redis !== undefined && topologyOf(this.options.redis) === 'cluster'
            ? keySlot(this.keys.available)
            : null,
        withExpiration: this.options.expiration !== null,
        withFunctions: this.options.functions,
      });
      if (check.clusterEnabled && this.keys.shortKeys !== null) {
        // A plain client on a Redis Cluster node: calls declare every key, which a slot migration needs.
        this.keys = semaphoreKeys(this.name, {
          keyPrefix: clientKeyPrefix(this.options.redis) + this.options.keyPrefix,
          declareAll: true,
        });
      }
      this.functions = check.functions;
      this.#serverChecked = check.checked;
    }
    this.#connected = this.#serverChecked; // not checked (INFO lost with its connection): the next call checks
    return this.client;
  }

  /**
   * The one way the library runs a script (a call built in lib/redis/commands.ts): on the main client,
   * or `via` a waiter's own connection. Rejects with a SemaphoreRedisError naming `operation`, or
   * with `raw` with the client's own error, for a caller that tells connection failures apart.
   */
  call<R>(operation: string, call: ScriptCall<R>, options?: CallOptions): Promise<R> {
    // Without an async frame when the client is ready (every hot-path call).
    const client = options?.via ?? this.readyNow();
    if (client !== undefined) return this.#run(client, operation, call, options?.raw);
    return this.#connect(options?.whileClosing ?? false).then((ready) =>
      this.#run(ready, operation, call, options?.raw),
    );
  }

  #run<R>(client: Connection, operation: string, call: ScriptCall<R>, raw = false): Promise<R> {
    const running = runScript(client, call);
    return raw ? running : this.#wrap(operation, running);
  }

  /** `running`, rejecting with a SemaphoreRedisError naming `operation`. */
  #wrap<R>(operation: string, running: Promise<R>): Promise<R> {
    return running.catch((error: unknown) => {
      throw new SemaphoreRedisError(this.name, operation, error);
    });
  }

  /**
   * The hot path's `call`, in one promise: `call` on `client` (from `readyNow()`, or a waiter's own
   * connection), its answer bounded by `answers`, then what `answered(reply)` or `failed(error)` make
   * of it. `failed` gets a SemaphoreRedisError naming `operation`, or the `DeadlineExceeded` of
   * `answers` and `late`, the reply still to come (for the caller to settle in the background).
   * `now`: when the call is sent, if the caller has read the clock.
   */
  answer<R, T>(
    client: Connection,
    operation: string,
    call: ScriptCall<R>,
    answers: DeadlineQueue,
    answered: (reply: R) => T | PromiseLike<T>,
    failed: (error: unknown, late?: Promise<R>) => T | PromiseLike<T>,
    now?: number,
  ): Promise<T> {
    const decision: Decision = { settled: false, decided: undefined };
    const answering = answers.settle(
      (sent: (raw: unknown) => void, refused: (error: unknown) => void) => sendStoredTo(client, call, sent, refused),
      operation,
      (raw) => {
        let reply: R;
        try {
          reply = call.decode === undefined ? (raw as R) : call.decode(raw);
        } catch (error) {
          return failed(new SemaphoreRedisError(this.name, operation, error));
        }
        return answered(reply);
      },
      (error, deadline) => {
        if (!needsText(client, call, error)) return failed(new SemaphoreRedisError(this.name, operation, error));
        // The server lacked the script: EVAL, within what is left of the same time limit.
        const evaluating = this.#run(client, operation, asText(call));
        const left = Math.max(1, deadline - performance.now());
        return withDeadline(evaluating, left, operation).then(answered, (next: unknown) =>
          next instanceof DeadlineExceeded ? failed(next, evaluating) : failed(next),
        );
      },
      (error, late) => {
        const reply = this.#wrap(operation, replyOf(client, call, late));
        reply.catch(ignore); // for the caller to settle, or not
        return failed(error, reply);
      },
      decision,
      now,
    );
    this.#answering = answering;
    this.#decision = decision;
    return answering;
  }

  async command(operation: string, args: string[]): Promise<unknown> {
    const client = await this.ready();
    try {
      return await client.sendCommand(args);
    } catch (error) {
      throw new SemaphoreRedisError(this.name, operation, error);
    }
  }

  /**
   * Keeps `promise` among the calls close() waits for. The promise `answer` just made, or one whose
   * `decision` is given, is followed without a promise more: it says when it is decided (see `Decision`).
   */
  track<T>(promise: Promise<T>, given?: Decision): Promise<T> {
    this.begin();
    const decision = given ?? (this.#answering === promise ? this.#decision : undefined);
    this.#answering = this.#decision = undefined;
    if (decision !== undefined && !decision.settled) {
      // Settled with a value: ended at once. Otherwise as below, which also handles its rejection.
      decision.decided = (plain) => (plain ? this.end() : void promise.then(this.#end, this.#end));
    } else {
      promise.then(this.#end, this.#end);
    }
    return promise;
  }

  readonly #end = (): void => this.end();

  /** A call close() waits for begins; `end()` when it settles (`track` for a promise). */
  begin(): void {
    this.#inFlight++;
  }

  end(): void {
    if (--this.#inFlight > 0 || this.#drained === undefined) return;
    const drained = this.#drained;
    this.#drained = this.#drainedPromise = undefined;
    drained();
  }

  /** How many calls close() would wait for now. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Resolves once no call is in flight, including calls that begin meanwhile. */
  settled(): Promise<void> {
    if (this.#inFlight === 0) return Promise.resolve();
    return (this.#drainedPromise ??= new Promise((resolve) => (this.#drained = resolve)));
  }

  assertOpen(): void {
    if (this.closing) throw new SemaphoreClosedError(this.name);
  }
}
