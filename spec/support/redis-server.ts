import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A real redis-server process on a free loopback port, owned by the test that started it. */
export interface RedisServer {
  readonly port: number;
  readonly url: string;
  readonly pid: number;
  /** Stops it (SIGTERM, no save) and waits for the exit. */
  stop(): Promise<void>;
  /** Kills it with `signal` (SIGKILL by default) and waits for the exit: a crash, data gone. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port with the same arguments. */
  restart(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** Starts `redis-server` with no persistence (unless `args` say otherwise) and waits until it answers. */
export async function startRedisServer(args: readonly string[] = []): Promise<RedisServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'rts-redis-'));
  let child: ChildProcess;

  const launch = async (): Promise<void> => {
    child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...args],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    child.once('error', () => undefined);
    await waitUntilReady(port, child);
  };
  // A SIGTERM that has not ended the server within 5 s becomes a SIGKILL (a primary may wait for its
  // replicas before it exits): a test's teardown must never leave a server behind.
  const exited = (signal: NodeJS.Signals) =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      const escalate = signal === 'SIGKILL' ? undefined : setTimeout(() => child.kill('SIGKILL'), 5000);
      child.once('exit', () => {
        if (escalate) clearTimeout(escalate);
        resolve();
      });
      child.kill(signal);
    });

  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    get pid() {
      return child.pid ?? -1;
    },
    stop: async () => {
      await exited('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
    kill: (signal = 'SIGKILL') => exited(signal),
    restart: launch,
  };
}

async function waitUntilReady(port: number, child: ChildProcess): Promise<void> {
  const started = Date.now();
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  while (Date.now() - started < 10_000) {
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}: ${stderr}`);
    if (await answersPing(port)) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  child.kill('SIGKILL');
  throw new Error(`redis-server on port ${port} did not answer within 10 s: ${stderr}`);
}

function answersPing(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.setTimeout(500);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('+PONG'));
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}
