/** Which Redis an operator looks at: its address, role and version, as the server itself reports them. */
import { adaptClient, topologyOf } from '../redis/client/adapt';
import { isConnectionError } from '../redis/client/classify';
import type { Scope } from './operations';

export interface ServerInfo {
  /** `host:port` the server answers on (`CLIENT INFO` laddr, Redis 6.2+), or `cluster`. */
  readonly address: string;
  /** `master` or `replica` (`INFO replication`), or `cluster`. */
  readonly role: string;
  /** `Redis 7.0.15`, `Valkey 8.0.1`, or `?` when the server does not say. */
  readonly version: string;
}

/** `field:value` lines of an `INFO` section, or of `CLIENT INFO`'s `k=v` words. */
function field(text: string, name: string, separator = ':'): string | undefined {
  for (const part of text.split(separator === ':' ? /\r?\n/ : / /)) {
    if (part.startsWith(`${name}${separator}`)) return part.slice(name.length + 1).trim();
  }
  return undefined;
}

/** Three small commands; a server that refuses one (an ACL) still gets the rest shown. A lost connection rejects. */
export async function readServerInfo(scope: Scope): Promise<ServerInfo> {
  const cluster = topologyOf(scope.redis) === 'cluster';
  const redis = adaptClient(scope.redis, '');
  const ask = (command: string[]) =>
    redis.sendCommand(command).then(
      (reply) => String(reply),
      (error: unknown) => {
        if (isConnectionError(error)) throw error;
        return '';
      },
    );
  const [server, replication, client] = await Promise.all([
    ask(['INFO', 'server']),
    cluster ? Promise.resolve('') : ask(['INFO', 'replication']),
    cluster ? Promise.resolve('') : ask(['CLIENT', 'INFO']),
  ]);
  const valkey = field(server, 'valkey_version');
  const redisVersion = field(server, 'redis_version');
  const port = field(server, 'tcp_port');
  return {
    address: cluster ? 'cluster' : (field(client, 'laddr', '=') ?? (port === undefined ? '?' : `port ${port}`)),
    role: cluster ? 'cluster' : (field(replication, 'role') ?? '?'),
    version: valkey ? `Valkey ${valkey}` : redisVersion ? `Redis ${redisVersion}` : '?',
  };
}
