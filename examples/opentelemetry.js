'use strict';
/**
 * OpenTelemetry: one span per acquisition, from the call to the grant (or the timeout, the abort,
 * the failure), and for the callback form `lock(fn)` on to the release, so a trace shows how long
 * each caller waited for its token and how long it then held it. The library knows nothing of
 * OpenTelemetry: it publishes its waits on two `diagnostics_channel` tracing channels, and
 * `traceSemaphores()` below turns them into spans. Copy it into your code (it needs only
 * `@opentelemetry/api`), or require this file:
 *
 *   const { traceSemaphores } = require('./opentelemetry');
 *   const stop = traceSemaphores({ tracer: trace.getTracer('my-service') });
 *
 * Run as a program, it shows the spans of a few calls on a mutex (contended, timed out, aborted,
 * a lease), recorded by the SDK's in-memory exporter:
 *
 *   npm run build && node examples/opentelemetry.js
 *   REDIS_URL=redis://127.0.0.1:6379 node examples/opentelemetry.js
 *
 * Exits with 0 when every span says what its call did. Without REDIS_URL it starts a throwaway
 * redis-server from PATH. In your project: npm install @opentelemetry/api (and an SDK to export the
 * spans); this repository has both as dev dependencies.
 */
const { tracingChannel } = require('node:diagnostics_channel');
const { SpanStatusCode } = require('@opentelemetry/api');

// ---------------------------------------------------------------------------------------------------
// The subscriber: what you take into your code.

/** The library's tracing channels (`TRACING_CHANNELS` in the package); tracingChannel() adds the `tracing:…:start` and so on. */
const CHANNELS = { acquire: 'redis-token-semaphore:acquire', hold: 'redis-token-semaphore:hold' };

/**
 * Outcomes a span reports as an error (status ERROR, the outcome as its message). A timeout of a
 * try-lock (`lock(0, fn)`) may be business as usual for you: then take 'timeout' out.
 */
const FAILED = new Set(['timeout', 'aborted', 'error']);

/**
 * Makes a span with `tracer` for each acquisition of every semaphore in this process, named
 * `semaphore.lock` (`lock`, `wait`, `lock(fn)`) or `semaphore.acquire` (`acquire()`):
 *
 * - it starts when the call starts, before any Redis command, as a child of the caller's active span;
 * - it ends at the grant (or the timeout, the abort, the failure), except for the callback form,
 *   whose span goes on, with a `granted` event, until the token is released after `fn` settled;
 * - attributes: `semaphore.name`, `.resources`, `.timeout_ms` (when the call has one), `.form`,
 *   `.outcome` (granted, timeout, aborted, error), `.waited_ms`, `.token`, `.fence`, and for the
 *   callback form `.held_ms`; an error (or what `fn` threw) is recorded as an exception.
 *
 * Returns a function that unsubscribes. While nothing subscribes, the library builds none of this.
 */
function traceSemaphores({ tracer }) {
  const acquire = tracingChannel(CHANNELS.acquire);
  const hold = tracingChannel(CHANNELS.hold);
  const spans = new WeakMap(); // acquire context → its span

  const acquireHandlers = {
    start(context) {
      const attributes = {
        'semaphore.name': context.semaphore,
        'semaphore.resources': context.resources,
        'semaphore.form': context.form,
      };
      if (context.timeout !== null) attributes['semaphore.timeout_ms'] = context.timeout;
      spans.set(
        context,
        tracer.startSpan(context.form === 'lease' ? 'semaphore.acquire' : 'semaphore.lock', { attributes }),
      );
    },
    asyncEnd(context) {
      const span = spans.get(context);
      if (!span) return; // subscribed while this call was already waiting
      span.setAttributes({ 'semaphore.outcome': context.outcome, 'semaphore.waited_ms': Math.round(context.waitedMs) });
      if (context.outcome === 'granted')
        span.setAttributes({ 'semaphore.token': context.token, 'semaphore.fence': context.fence });
      if (context.outcome === 'error') span.recordException(context.error);
      if (FAILED.has(context.outcome)) span.setStatus({ code: SpanStatusCode.ERROR, message: context.outcome });
      // The callback form's span goes on until the release (the hold channel, below).
      if (context.outcome === 'granted' && context.form === 'callback') span.addEvent('granted');
      else {
        spans.delete(context);
        span.end();
      }
    },
  };
  const holdHandlers = {
    asyncEnd(context) {
      const span = context.acquisition && spans.get(context.acquisition);
      if (!span) return;
      spans.delete(context.acquisition);
      span.setAttribute('semaphore.held_ms', Math.round(context.heldMs));
      if (context.error !== undefined) {
        span.recordException(context.error);
        span.setStatus({ code: SpanStatusCode.ERROR, message: String(context.error?.message ?? context.error) });
      }
      span.end();
    },
  };
  acquire.subscribe(acquireHandlers);
  hold.subscribe(holdHandlers);
  return () => {
    acquire.unsubscribe(acquireHandlers);
    hold.unsubscribe(holdHandlers);
  };
}

module.exports = { traceSemaphores, CHANNELS };

// ---------------------------------------------------------------------------------------------------
// The demo: a few calls on one mutex, and the spans they made.

/** Milliseconds since the epoch of an OpenTelemetry HrTime. */
const ms = ([seconds, nanos]) => seconds * 1e3 + nanos / 1e6;

async function main() {
  const { useRedis, uniqueSuffix, exitAfter } = require('./support/redis');
  // In your code: require('redis-token-semaphore'). Here: the package built from this repository.
  const { Mutex, LockTimeoutError } = require('..');
  const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  exitAfter(20_000, 'The OpenTelemetry example');

  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const stop = traceSemaphores({ tracer: provider.getTracer('examples/opentelemetry') });

  const redis = await useRedis();
  const name = `otel-demo:${uniqueSuffix()}`;
  console.log(`Mutex "${name}"; Redis at ${redis.url} (${redis.origin})`);
  const mutex = new Mutex(name, { redis: redis.client });
  const sleep = (delay) => new Promise((resolve) => setTimeout(resolve, delay));
  const calls = [
    // A holds the mutex for 400 ms; B, called 50 ms later, waits for it and then holds it for 100 ms.
    ['A: lock(fn), holds 400 ms', () => mutex.lock(() => sleep(400))],
    ['B: lock(fn), holds 100 ms', () => sleep(50).then(() => mutex.lock(() => sleep(100)))],
    // C gives up after 150 ms; D is aborted after 200 ms.
    ['C: lock(150)', () => sleep(100).then(() => mutex.lock(150))],
    ['D: lock(null, { signal })', () => sleep(150).then(() => mutex.lock(null, { signal: AbortSignal.timeout(200) }))],
    // E takes a lease once A and B are done; its span ends at the grant.
    [
      'E: acquire()',
      () =>
        sleep(700)
          .then(() => mutex.acquire())
          .then((lease) => lease.release()),
    ],
  ];
  const settled = await Promise.allSettled(calls.map(([, call]) => call()));
  await mutex.delete();
  await mutex.close();
  await redis.stop();
  stop();

  const spans = exporter.getFinishedSpans().sort((a, b) => ms(a.startTime) - ms(b.startTime));
  const first = spans.length === 0 ? 0 : ms(spans[0].startTime);
  const row = (...cells) =>
    cells.map(([text, width]) => (width < 0 ? String(text).padStart(-width) : String(text).padEnd(width))).join('  ');
  console.log(
    `\n${row(['call', 26], ['span', 17], ['starts at', -9], ['lasts', -7], ['outcome', 8], ['waited', -7], ['held', -7], ['status', 0])}`,
  );
  for (const [index, span] of spans.entries()) {
    const at = (attribute) => span.attributes[`semaphore.${attribute}`];
    const held = at('held_ms') === undefined ? '' : `${at('held_ms')} ms`;
    const status = span.status.code === SpanStatusCode.ERROR ? `ERROR (${span.status.message})` : 'unset';
    console.log(
      row(
        [calls[index]?.[0] ?? '?', 26],
        [span.name, 17],
        [`${Math.round(ms(span.startTime) - first)} ms`, -9],
        [`${Math.round(ms(span.duration))} ms`, -7],
        [at('outcome'), 8],
        [`${at('waited_ms')} ms`, -7],
        [held, -7],
        [status, 0],
      ),
    );
  }

  const problems = [];
  const outcomes = spans.map((span) => span.attributes['semaphore.outcome']);
  const expected = ['granted', 'granted', 'timeout', 'aborted', 'granted'];
  if (JSON.stringify(outcomes) !== JSON.stringify(expected))
    problems.push(`outcomes ${outcomes.join(', ')}, expected ${expected.join(', ')}`);
  if (!(settled[2].status === 'fulfilled' && settled[2].value === null)) problems.push('C did not time out');
  if (!(settled[3].status === 'rejected' && !(settled[3].reason instanceof LockTimeoutError)))
    problems.push('D was not aborted');
  const b = spans[1];
  // B's span covers its wait for A (about 350 ms) and its own hold (100 ms).
  if (
    b &&
    !(b.attributes['semaphore.waited_ms'] >= 250 && ms(b.duration) >= b.attributes['semaphore.waited_ms'] + 90)
  ) {
    problems.push(`B's span does not cover its wait and hold: ${ms(b.duration)} ms`);
  }
  if (problems.length > 0) {
    console.error(`FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log(
    `\nOK: ${spans.length} spans, each from its call to its grant (the callback form's to its release), timeout or abort`,
  );
}

if (require.main === module) {
  main().catch((error) => {
    console.error(error.stack ?? error);
    process.exit(1);
  });
}
