/**
 * Replies handed to the wrong command. node-redis v5 can do this after a connection reset during its
 * reconnect handshake (one command gets `ERR unknown subcommand 'SETINFO'`, later ones each other's
 * replies); under the connection-reset chaos of spec/protocol/grant-identity.spec.ts a recover once
 * got a release's reply `[1, 1]` and the library took it for a grant of token 1, a fourth holder
 * of three tokens. The scripts a decision rests on echo the grant id they acted on, and a reply that
 * does not name the call is an unknown outcome, settled by grant id as a lost reply is.
 *
 * Exercised for real: a real redis-server, and a client whose next two script calls are sent in a
 * chosen order on its one connection and each resolved with the other's real reply.
 */
import { MisattributedReplyError } from '../../lib/redis/client/classify';
import { semaphoreKeys } from '../../lib/redis/keys';
import { claim, recover, refresh, release, signal, tryLock } from '../../lib/redis/commands';
import { scripts } from '../../lib/redis/registry';
import { runScript, scriptCall, type ScriptCall } from '../../lib/redis/send';
import { PrivateServers } from '../support/private-servers';
import type { RedisServer } from '../support/redis-server';
import { uniqueName, type Client } from '../support/redis';
import { callsScript } from '../support/script-calls';

let server: RedisServer;
let admin: Client;
const shared = new PrivateServers();
const opened = new PrivateServers();

beforeAll(async () => {
  ({ server, admin } = await shared.start());
  // Loaded up front, so the crossed EVALSHAs run rather than answer NOSCRIPT (whose EVAL retry would not be crossed).
  for (const script of Object.values(scripts)) await admin.scriptLoad(script.source);
});
afterEach(() => opened.close());
afterAll(() => shared.close());

type Send = (args: string[]) => Promise<unknown>;

/**
 * A connected client whose `cross(first, second)` arms a mix-up: the next script call matching
 * `first` and the next matching `second` are held until both are here, sent in that order (they
 * run in that order on the one connection), and each resolved with the other's reply.
 */
async function crossingClient(): Promise<{
  client: Client;
  cross(first: (args: string[]) => boolean, second: (args: string[]) => boolean): Promise<void>;
}> {
  const client = await opened.connect(server.url);
  const send: Send = client.sendCommand.bind(client) as Send;
  let armed:
    | {
        matchers: Array<(args: string[]) => boolean>;
        held: Array<{ args: string[]; resolve(reply: unknown): void; reject(error: unknown): void } | undefined>;
        done(): void;
      }
    | undefined;
  (client as unknown as { sendCommand: Send }).sendCommand = (args: string[]) => {
    const mixUp = armed;
    const slot = mixUp?.matchers.findIndex((matches, i) => mixUp.held[i] === undefined && matches(args)) ?? -1;
    if (!mixUp || slot < 0) return send(args);
    return new Promise((resolve, reject) => {
      mixUp.held[slot] = { args, resolve, reject };
      const [a, b] = mixUp.held;
      if (!a || !b) return;
      armed = undefined;
      const replies = [send(a.args), send(b.args)].map((p) =>
        p.then(
          (reply) => ({ reply }),
          (error: unknown) => ({ error }),
        ),
      );
      void Promise.all(replies).then(([ra, rb]) => {
        // Each gets the other's answer, as node-redis v5 does after its handshake mix-up.
        for (const [to, from] of [
          [a, rb!],
          [b, ra!],
        ] as const) {
          if ('error' in from) to.reject(from.error);
          else to.resolve(from.reply);
        }
        mixUp.done();
      });
    });
  };
  return {
    client,
    cross: (first, second) =>
      new Promise<void>((done) => {
        armed = { matchers: [first, second], held: [undefined, undefined], done };
      }),
  };
}

const grabbedFence = async (name: string, token: string) =>
  Number((await admin.hGet(`SEMAPHORE:${name}:GRABBED`, token))?.split(' ')[2]);

describe('a reply meant for another command', () => {
  test('a lock(0) that missed, answered with a release’s reply, does not take it for a grant: no second holder', async () => {
    const name = uniqueName('crossed');
    const { client, cross } = await crossingClient();
    const sem = opened.semaphore(name, { redis: client });
    const other = opened.semaphore(name, { url: server.url });
    expect(await sem.lock(0)).toBe('0');
    // The tryLock runs first (no token free: a miss), then the release (the token goes back); each
    // gets the other's reply: the tryLock an "ended, 1 available", the release a miss.
    const crossed = cross(callsScript(scripts.tryLock), callsScript(scripts.release));
    const locking = sem.lock(0).then(
      (value) => ({ value }),
      (error: Error) => ({ error: error.message }),
    );
    const unlocking = sem.unlock('0');
    await crossed;
    // The release's outcome was unknown and it was retried (it found its grant over): it resolves.
    expect(await unlocking).toEqual(expect.any(Number));
    // The tryLock's outcome was unknown: recover found no grant of its id, so the lock reports the failure.
    expect(await locking).toEqual({ error: expect.stringMatching(/reply that answers another command/) });
    expect(await sem.isLocked('0')).toBe(false);
    expect(sem.fence(undefined)).toBeUndefined();
    // The one token goes to another client, and it is the only holder.
    expect(await other.lock(0)).toBe('0');
    expect(await sem.lock(0)).toBeNull();
    expect(await other.unlock('0')).toBe(1);
  });

  test('a lock whose tryLock took the token, answered with a release’s reply, adopts its grant by id', async () => {
    const name = uniqueName('crossed');
    const { client, cross } = await crossingClient();
    const sem = opened.semaphore(name, { redis: client });
    const other = opened.semaphore(name, { url: server.url });
    expect(await sem.lock(0)).toBe('0');
    const firstFence = sem.fence('0')!;
    // The release runs first (the token goes back), then the tryLock takes it; each gets the other's reply.
    const crossed = cross(callsScript(scripts.release), callsScript(scripts.tryLock));
    const unlocking = sem.unlock('0');
    const locking = sem.lock(1000);
    await crossed;
    expect(await unlocking).toEqual(expect.any(Number));
    expect(await locking).toBe('0');
    const fence = sem.fence('0')!;
    expect(fence).toBeGreaterThan(firstFence);
    expect(await grabbedFence(name, '0')).toBe(fence);
    expect(await other.lock(0)).toBeNull();
    expect(await sem.unlock('0')).toBe(1);
    expect(await other.lock(0)).toBe('0');
    expect(await other.unlock('0')).toBe(1);
  });

  test('a refresh answered with another command’s reply is not taken for a renewal', async () => {
    const name = uniqueName('crossed');
    const { client, cross } = await crossingClient();
    const sem = opened.semaphore(name, { redis: client });
    expect(await sem.lock(0)).toBe('0');
    // The refresh runs first (its grant holds: renewed), then a signal pushes a job onto the empty
    // AVAILABLE and answers 1: what refresh used to answer for "renewed".
    const crossed = cross(callsScript(scripts.refresh), callsScript(scripts.signal));
    const refreshing = sem.refresh('0').then(
      (value) => ({ value }),
      (error: Error) => ({ error: error.message }),
    );
    const signalling = sem.signal('job');
    await crossed;
    expect(await refreshing).toEqual({ error: expect.stringMatching(/reply that answers another command/) });
    // The signal's own reply was the refresh's: not read for any decision.
    await signalling.catch(() => undefined);
    // An unconfirmed refresh changes nothing: the holding goes on, and a later refresh confirms it.
    expect(await sem.refresh('0')).toBe(true);
    expect(await sem.unlock('0')).toEqual(expect.any(Number));
  });
});

describe('each script’s decoder, fed the real replies of the others', () => {
  test('accepts only a reply that names its call', async () => {
    const keys = semaphoreKeys(uniqueName('decoders'));
    const target = {
      keys,
      resources: 2,
      options: { staleClientTimeout: 30_000, expiration: null, useLocalTime: false, owner: 'me' },
    };
    const connection = admin as unknown as Parameters<typeof runScript>[0];
    const lifetime = 25_000;
    // Run for real, in this order: two grants, a miss (which registers "c"), a refresh, a claim of
    // c's empty inbox, recover abandoning c, a release, and a signal.
    const made: Record<string, ScriptCall<unknown>> = {
      hit: tryLock(target, 'a', lifetime),
      hit2: tryLock(target, 'b', lifetime),
      miss: tryLock(target, 'c', lifetime),
      refresh: refresh(target, '0', 'a'),
      claim: claim(target, 'c', { grantId: 'c', nextLifetimeMs: lifetime, keep: false }),
      recover: recover(target, 'c', 'c', 1000),
      release: release(target, '0', 'a', true),
      signal: signal(target, 'job'),
    };
    const replies: Record<string, unknown> = {};
    for (const [label, call] of Object.entries(made))
      replies[label] = await runScript(connection, scriptCall(call.script, call.keys, call.args));
    // Each decodes its own reply…
    expect(made.hit!.decode!(replies.hit)).toEqual({ token: '0', fence: expect.any(Number), expired: [] });
    expect(made.miss!.decode!(replies.miss)).toEqual({ token: null, fence: 0, expired: [] });
    expect(made.refresh!.decode!(replies.refresh)).toBe(true);
    expect(made.claim!.decode!(replies.claim)).toEqual({
      token: null,
      renewed: true,
      fence: 0,
      others: false,
      collecting: false,
      expired: [],
    });
    expect(made.recover!.decode!(replies.recover)).toBeNull();
    expect(made.release!.decode!(replies.release)).toEqual({ ended: true, available: 1 });
    // …and refuses every other one, even its own script's reply to another grant (signal's reply
    // decides nothing: it is not checked).
    const accepted: string[] = [];
    for (const [label, call] of Object.entries(made)) {
      if (label === 'signal') continue;
      for (const [other, reply] of Object.entries(replies)) {
        if (other === label) continue;
        try {
          accepted.push(`${label} took ${other}'s reply as ${JSON.stringify(call.decode!(reply))}`);
        } catch (error) {
          if (!(error instanceof MisattributedReplyError))
            accepted.push(`${label} on ${other}'s reply threw ${String(error)}`);
        }
      }
    }
    expect(accepted).toEqual([]);
    await admin.del([...keys.scriptKeys]);
  });
});
