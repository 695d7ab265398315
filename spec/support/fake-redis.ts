import { createServer, type Server, type Socket } from 'node:net';

/**
 * A fake Redis on a free loopback port that speaks just enough RESP for a client to connect (HELLO,
 * PING, AUTH, SELECT, CLIENT …, QUIT) and answers INFO as a server of `version` would; every other
 * command gets `ERR unknown command`, as a server without it answers. For what no real server on this
 * machine can be: an old Redis (6.0, before BLMOVE), or one that refuses INFO.
 */
export interface FakeRedisOptions {
  /** What INFO reports as `redis_version`. */
  readonly version: string;
  /** `'denied'`: INFO answers NOPERM, as under an ACL without +info. */
  readonly info?: 'reported' | 'denied';
}

export class FakeRedis {
  /** Every command a client sent, in order (its name upper-cased, then its arguments). */
  readonly commands: string[][] = [];
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();

  private constructor(
    server: Server,
    readonly port: number,
    readonly options: FakeRedisOptions,
  ) {
    this.#server = server;
  }

  static start(options: FakeRedisOptions): Promise<FakeRedis> {
    return new Promise((resolve, reject) => {
      let fake: FakeRedis | undefined;
      const server = createServer((socket) => fake?.accept(socket));
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        const address = server.address();
        if (typeof address !== 'object' || address === null) return reject(new Error('no port'));
        fake = new FakeRedis(server, address.port, options);
        resolve(fake);
      });
    });
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** The commands clients sent, by name (`INFO`, `EVALSHA`, …), handshakes included. */
  names(): string[] {
    return this.commands.map((command) => command[0] ?? '');
  }

  /** Stops listening and closes every connection. */
  close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  private accept(socket: Socket): void {
    this.#sockets.add(socket);
    socket.once('close', () => this.#sockets.delete(socket));
    socket.on('error', () => undefined);
    let buffered = Buffer.alloc(0);
    let resp3 = false;
    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      for (;;) {
        const parsed = parseCommand(buffered);
        if (!parsed) return;
        buffered = buffered.subarray(parsed.length);
        const [name = '', ...args] = parsed.command;
        const command = [name.toUpperCase(), ...args];
        this.commands.push(command);
        if (command[0] === 'HELLO' && args[0] !== undefined) resp3 = args[0] === '3';
        socket.write(this.#reply(command, resp3));
        if (command[0] === 'QUIT') socket.end();
      }
    });
  }

  #reply([name, ...args]: string[], resp3: boolean): string {
    switch (name) {
      case 'PING':
        return '+PONG\r\n';
      case 'QUIT':
      case 'AUTH':
      case 'SELECT':
      case 'READONLY':
        return '+OK\r\n';
      case 'CLIENT':
        return args[0]?.toUpperCase() === 'ID' ? ':7\r\n' : '+OK\r\n';
      case 'HELLO': {
        const fields: Array<[string, string]> = [
          ['server', '$5\r\nredis\r\n'],
          ['version', bulk(this.options.version)],
          ['proto', resp3 ? ':3\r\n' : ':2\r\n'],
          ['id', ':7\r\n'],
          ['mode', '$10\r\nstandalone\r\n'],
          ['role', '$6\r\nmaster\r\n'],
          ['modules', '*0\r\n'],
        ];
        const body = fields.map(([key, value]) => bulk(key) + value).join('');
        return resp3 ? `%${fields.length}\r\n${body}` : `*${fields.length * 2}\r\n${body}`;
      }
      case 'INFO':
        if (this.options.info === 'denied') {
          return "-NOPERM User default has no permissions to run the 'info' command\r\n";
        }
        return bulk(
          [
            '# Server',
            `redis_version:${this.options.version}`,
            'redis_mode:standalone',
            '',
            '# Persistence',
            'loading:0',
            '',
            '# Memory',
            'maxmemory:0',
            'maxmemory_policy:noeviction',
            '',
            '# Replication',
            'role:master',
            '',
          ].join('\r\n'),
        );
      default:
        return `-ERR unknown command '${name}', with args beginning with: \r\n`;
    }
  }
}

function bulk(text: string): string {
  return `$${Buffer.byteLength(text)}\r\n${text}\r\n`;
}

/** One command from the front of `data` (a RESP array of bulk strings, or an inline command), or null until it is whole. */
function parseCommand(data: Buffer): { command: string[]; length: number } | null {
  const lineEnd = data.indexOf('\r\n');
  if (lineEnd < 0) return null;
  if (data[0] !== 0x2a /* '*' */) {
    return { command: data.subarray(0, lineEnd).toString().trim().split(/\s+/), length: lineEnd + 2 };
  }
  const count = Number(data.subarray(1, lineEnd).toString());
  const command: string[] = [];
  let offset = lineEnd + 2;
  for (let i = 0; i < count; i++) {
    const headerEnd = data.indexOf('\r\n', offset);
    if (headerEnd < 0) return null;
    const size = Number(data.subarray(offset + 1, headerEnd).toString());
    const start = headerEnd + 2;
    if (data.length < start + size + 2) return null;
    command.push(data.subarray(start, start + size).toString());
    offset = start + size + 2;
  }
  return { command, length: offset };
}
