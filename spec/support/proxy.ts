import { createServer, connect, type Server, type Socket } from 'node:net';
import type { Script } from '../../lib/redis/registry';
import { wireNames } from './script-calls';

/**
 * A TCP proxy of our own between a client and redis-server, for faults a real network produces and
 * a test cannot get from Redis itself: a black hole (bytes swallowed both ways, no FIN, no RST), a
 * reply lost in transit (server → client bytes swallowed), a connection cut (the client side reset),
 * and a server that cannot be reached (new connections refused). Loopback only.
 *
 * Faults apply to the connections a filter picks, e.g. `carried('BLMOVE')`: the connections whose
 * client sent a BLMOVE, which are a semaphore's blocking connections.
 */
export interface ProxiedConnection {
  readonly id: number;
  /** Everything the client sent through this connection (capped at 1 MB), for `carried`. */
  readonly sent: string;
  /** `pass`, or the fault applied to it. */
  readonly mode: Mode;
  /** Whether both sockets are still open. */
  readonly open: boolean;
}

type Mode = 'pass' | 'blackhole' | 'drop-replies';
export type Filter = (connection: ProxiedConnection) => boolean;

const everyConnection: Filter = () => true;

/**
 * Picks the connections whose client sent `command` (e.g. 'BLMOVE') as a command or argument: matched
 * as a RESP bulk string (`$6\r\nBLMOVE\r\n`), so a script whose text merely mentions it (an EVAL of
 * a script with a comment about BLMOVE) does not count.
 */
export function carried(command: string): Filter {
  const needle = `$${command.length}\r\n${command.toUpperCase()}\r\n`;
  return (connection) => connection.sent.toUpperCase().includes(needle);
}

/** Connections that carried a call of `script` (EVALSHA of its SHA1, or FCALL of its function). */
export function carriedCall(script: Script): Filter {
  const filters = wireNames(script).map(carried);
  return (connection) => filters.some((filter) => filter(connection));
}

class Connection implements ProxiedConnection {
  sent = '';
  mode: Mode = 'pass';
  open = true;
  constructor(
    readonly id: number,
    readonly client: Socket,
    readonly server: Socket,
  ) {}

  destroy(reset: boolean): void {
    this.open = false;
    if (reset && !this.client.destroyed) this.client.resetAndDestroy();
    else this.client.destroy();
    this.server.destroy();
  }
}

export class FaultProxy {
  readonly #server: Server;
  readonly #connections = new Set<Connection>();
  #nextId = 1;
  #refusing = false;
  /** Bytes swallowed so far, per direction (a test can check that a fault really dropped something). */
  readonly swallowed = { toServer: 0, toClient: 0 };

  private constructor(
    server: Server,
    readonly port: number,
  ) {
    this.#server = server;
  }

  /** A proxy on a free loopback port forwarding to 127.0.0.1:`targetPort`. */
  static start(targetPort: number): Promise<FaultProxy> {
    return new Promise((resolve, reject) => {
      let proxy: FaultProxy | undefined;
      const server = createServer((client) => proxy?.accept(client, targetPort));
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const address = server.address();
        if (typeof address !== 'object' || address === null) return reject(new Error('no port'));
        proxy = new FaultProxy(server, address.port);
        resolve(proxy);
      });
    });
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** The connections still open, oldest first. */
  connections(filter: Filter = everyConnection): ProxiedConnection[] {
    return [...this.#connections].filter((connection) => connection.open && filter(connection));
  }

  /** From now on, bytes of the picked connections are swallowed both ways; the sockets stay open. */
  blackhole(filter: Filter = everyConnection): number {
    return this.#set('blackhole', filter);
  }

  /** From now on, replies on the picked connections are swallowed; requests still reach Redis. */
  dropReplies(filter: Filter = everyConnection): number {
    return this.#set('drop-replies', filter);
  }

  /** Back to forwarding (what was swallowed stays lost, as a dropped segment would be after a reset). */
  heal(filter: Filter = everyConnection): number {
    return this.#set('pass', filter);
  }

  /** Resets the client side of the picked connections (the client sees ECONNRESET) and closes the server side. */
  cut(filter: Filter = everyConnection): number {
    const picked = this.connections(filter) as Connection[];
    for (const connection of picked) connection.destroy(true);
    return picked.length;
  }

  /** While on, new connections are reset at once: Redis looks down from the client. */
  refuse(on: boolean): void {
    this.#refusing = on;
  }

  /** Stops listening and closes every connection. */
  close(): Promise<void> {
    for (const connection of this.#connections) connection.destroy(false);
    this.#connections.clear();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  #set(mode: Mode, filter: Filter): number {
    const picked = this.connections(filter) as Connection[];
    for (const connection of picked) connection.mode = mode;
    return picked.length;
  }

  private accept(client: Socket, targetPort: number): void {
    if (this.#refusing) {
      client.on('error', () => undefined);
      client.resetAndDestroy();
      return;
    }
    const server = connect(targetPort, '127.0.0.1');
    const connection = new Connection(this.#nextId++, client, server);
    this.#connections.add(connection);
    client.on('data', (chunk: Buffer) => {
      if (connection.sent.length < 1 << 20) connection.sent += chunk.toString('latin1');
      if (connection.mode === 'blackhole') this.swallowed.toServer += chunk.length;
      else server.write(chunk);
    });
    server.on('data', (chunk: Buffer) => {
      if (connection.mode === 'pass') client.write(chunk);
      else this.swallowed.toClient += chunk.length;
    });
    // A closed end closes the other, unless black-holed: then the other end never hears of it, as
    // across a real black hole (the server keeps a zombie connection, blocked commands and all).
    const closeFrom = (other: Socket) => () => {
      if (connection.mode === 'blackhole') return;
      connection.open = false;
      other.destroy();
    };
    client.on('close', closeFrom(server));
    server.on('close', closeFrom(client));
    client.on('error', () => undefined);
    server.on('error', () => undefined);
  }
}
