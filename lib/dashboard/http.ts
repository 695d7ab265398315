/** The dashboard's HTTP plumbing: security headers, the Host check, errors as JSON, request bodies, timeouts. */
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Request bodies are tiny JSON objects. */
const MAX_BODY = 16 * 1024;

/** Strict headers on every response: no inline script can run, even if escaping ever failed. */
export const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The host names a dashboard answers by default: loopback's. */
export const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** The `Host` header without its port, lower case (`[::1]` keeps its brackets). */
export function hostOf(request: IncomingMessage): string {
  const header = (request.headers.host ?? '').toLowerCase();
  return header.startsWith('[') ? header.slice(0, header.indexOf(']') + 1) : header.replace(/:\d*$/, '');
}

/**
 * Whether `request` names an allowed host, or the very address it arrived on (a client that
 * types the server's IP address; a rebound name never is one).
 */
export function hostAllowed(request: IncomingMessage, hosts: ReadonlySet<string>): boolean {
  const host = hostOf(request);
  if (hosts.has(host)) return true;
  const local = (request.socket.localAddress ?? '').replace(/^::ffff:(?=\d+\.)/, '');
  return host !== '' && (host === local || host === `[${local}]`);
}

export function allow(method: string, methods: readonly string[]): void {
  if (!methods.includes(method))
    throw new HttpError(405, 'method_not_allowed', `Method not allowed: ${methods.join(', ')}`);
}

export function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new HttpError(400, 'bad_request', 'Malformed percent-encoding in the path');
  }
}

export function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

export async function readJson(request: IncomingMessage): Promise<unknown> {
  if (!/^application\/json\b/i.test(request.headers['content-type'] ?? '')) {
    throw new HttpError(415, 'unsupported_media_type', 'Expected Content-Type: application/json');
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY) throw new HttpError(413, 'too_large', `Request bodies are at most ${MAX_BODY} bytes`);
    chunks.push(chunk);
  }
  try {
    const value: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not an object');
    return value;
  } catch {
    throw new HttpError(400, 'bad_request', 'Expected a JSON object');
  }
}

export function send(
  response: ServerResponse,
  status: number,
  type: string,
  body: string | Buffer,
  cache = 'no-store',
): void {
  if (response.headersSent) return; // answered already (timed out)
  response.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, 'cache-control': cache });
  response.end(response.req.method === 'HEAD' ? undefined : body);
}

export function sendJson(response: ServerResponse, status: number, value: unknown): void {
  send(response, status, 'application/json; charset=utf-8', JSON.stringify(value));
}

/** `promise`, or a rejection once `ms` have passed: `/healthz` and `/metrics` answer in time even when Redis does not. */
export async function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
