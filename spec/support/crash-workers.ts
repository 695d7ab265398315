/** Crash-worker child processes (crash-worker.js) running a snapshot of dist/, killed by their pid only. */
import { fork, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from './redis';

const WORKER = join(__dirname, 'crash-worker.js');
const ROOT = join(__dirname, '..', '..');

export type Message = Record<string, unknown>;

/** One crash-worker child: its messages, a wait for one, and SIGKILL by pid. */
export class Child {
  readonly messages: Message[] = [];
  readonly exited: Promise<void>;
  readonly #process: ChildProcess;
  #stderr = '';

  constructor(config: Record<string, unknown>, dist: string) {
    this.#process = fork(WORKER, [], {
      env: {
        ...process.env,
        CRASH_WORKER: JSON.stringify(config),
        CRASH_WORKER_DIST: dist,
        NODE_PATH: join(ROOT, 'node_modules'),
      },
      execArgv: [],
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    this.#process.stderr?.on('data', (chunk: Buffer) => (this.#stderr += chunk.toString()));
    this.#process.on('error', (error) => (this.#stderr += String(error)));
    this.#process.on('message', (message: Message) => this.messages.push(message));
    this.exited = new Promise((resolve) => this.#process.once('exit', () => resolve()));
  }

  get pid(): number {
    const pid = this.#process.pid;
    if (pid === undefined) throw new Error(`the child did not start: ${this.#stderr}`);
    return pid;
  }

  get alive(): boolean {
    return this.#process.exitCode === null && this.#process.signalCode === null;
  }

  onMessage(listener: (message: Message) => void): void {
    this.#process.on('message', listener);
  }

  send(message: string): void {
    if (this.alive && this.#process.connected) this.#process.send(message);
  }

  /** The first message matching `predicate`, received already or within `timeoutMs`. */
  async waitFor(predicate: (message: Message) => boolean, timeoutMs: number, what: string): Promise<Message> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const failed = this.messages.find((message) => 'error' in message);
      if (failed) throw new Error(`the child failed before ${what}: ${String(failed['error'])}`);
      const found = this.messages.find(predicate);
      if (found) return found;
      if (!this.alive) throw new Error(`the child exited before ${what}: ${this.#stderr}`);
      if (Date.now() > deadline) {
        throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; got ${JSON.stringify(this.messages)}`);
      }
      await sleep(5);
    }
  }

  /** SIGKILLs the child by pid (stopped or not) and resolves once it is gone, with the time of the kill. */
  async kill(): Promise<number> {
    if (this.alive) {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
      }
    }
    const at = Date.now();
    await this.exited;
    return at;
  }
}

/**
 * Registers the hooks of a spec that runs crash workers: children run a snapshot of dist/ taken in
 * beforeAll (so a concurrent `npm run build` cannot break a run), and every child still alive after
 * a test is killed.
 */
export function useCrashWorkers(): { spawn(config: Record<string, unknown>): Child; killAll(): Promise<void> } {
  let dist = '';
  const children = new Set<Child>();
  const killAll = async () => {
    await Promise.all([...children].map((child) => child.kill()));
    children.clear();
  };
  beforeAll(() => {
    const built = join(ROOT, 'dist');
    for (const file of [
      'index.js',
      'util/checkpoint.js',
      'redis/registry.js',
      'redis/send.js',
      'redis/keys.js',
      'redis/scripts/claim.lua',
    ]) {
      if (!existsSync(join(built, file))) throw new Error(`dist/${file} is missing: run \`npm run build\` first`);
    }
    dist = mkdtempSync(join(tmpdir(), 'rts-crash-dist-'));
    cpSync(built, dist, { recursive: true });
  });
  afterEach(killAll);
  afterAll(() => rmSync(dist, { recursive: true, force: true }));
  return {
    spawn(config) {
      const child = new Child(config, dist);
      children.add(child);
      return child;
    },
    killAll,
  };
}
