import { tracingChannel } from 'node:diagnostics_channel';
import { SpanStatusCode, type Tracer } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { LockTimeoutError, TRACING_CHANNELS, type AcquireTrace, type HoldTrace } from '../../lib';
import { useFixture } from '../support/fixture';
import { sleep } from '../support/redis';

/**
 * The acquire and hold tracing channels, as a tracer sees them: raw (the events, their order, the
 * context fields) and through examples/opentelemetry.js's subscriber with the real OpenTelemetry SDK.
 */
const fixture = useFixture();

// eslint-disable-next-line @typescript-eslint/no-require-imports -- the example is plain CommonJS; the spec runs its very subscriber
const example = require('../../examples/opentelemetry.js') as {
  traceSemaphores(options: { tracer: Tracer }): () => void;
  CHANNELS: typeof TRACING_CHANNELS;
};

type Event = 'start' | 'end' | 'asyncStart' | 'asyncEnd' | 'error';
const EVENTS: readonly Event[] = ['start', 'end', 'asyncStart', 'asyncEnd', 'error'];

/** Records each event of `name` with a copy of its context, while `run` runs. */
async function recording<C extends object>(
  name: string,
  run: (seen: Array<[Event, C]>) => Promise<void>,
): Promise<Array<[Event, C]>> {
  const seen: Array<[Event, C]> = [];
  const handlers = Object.fromEntries(
    EVENTS.map((event) => [event, (context: C) => void seen.push([event, { ...context }])]),
  ) as Record<Event, (context: C) => void>;
  const channel = tracingChannel<unknown, C>(name);
  channel.subscribe(handlers);
  try {
    await run(seen);
  } finally {
    channel.unsubscribe(handlers);
  }
  return seen;
}

describe('the acquire tracing channel', () => {
  test('starts synchronously in the call, before any Redis reply, and settles with the grant', async () => {
    const sem = fixture.semaphore({ resources: 2 });
    const seen = await recording<AcquireTrace>(TRACING_CHANNELS.acquire, async (events) => {
      const pending = sem.lock(1000);
      // start and end (of the synchronous part) are published before lock() returns.
      expect(events.map(([event]) => event)).toEqual(['start', 'end']);
      expect(await pending).toBe('0');
    });
    expect(seen.map(([event]) => event)).toEqual(['start', 'end', 'asyncStart', 'asyncEnd']);
    expect(seen[0]![1]).toEqual({ semaphore: sem.name, resources: 2, timeout: 1000, form: 'lock' });
    expect(seen[3]![1]).toEqual({
      semaphore: sem.name,
      resources: 2,
      timeout: 1000,
      form: 'lock',
      outcome: 'granted',
      token: '0',
      fence: expect.any(Number),
      waitedMs: expect.any(Number),
      result: '0',
    });
  });

  test('every form: lock(), wait(), lock(fn), lock(timeout, fn), acquire()', async () => {
    const sem = fixture.semaphore();
    const seen = await recording<AcquireTrace>(TRACING_CHANNELS.acquire, async () => {
      await sem.unlock((await sem.lock())!);
      await sem.unlock((await sem.wait(null))!);
      await sem.lock(async () => undefined);
      await sem.lock(500, async () => undefined);
      await (await sem.acquire()).release();
    });
    const ends = seen
      .filter(([event]) => event === 'asyncEnd')
      .map(([, context]) => [context.form, context.timeout, context.outcome]);
    expect(ends).toEqual([
      ['lock', null, 'granted'],
      ['lock', null, 'granted'],
      ['callback', null, 'granted'],
      ['callback', 500, 'granted'],
      ['lease', null, 'granted'],
    ]);
  });

  test('a timeout is an outcome, not an error; an abort and a failure are errors with their outcome', async () => {
    const sem = fixture.semaphore();
    const other = fixture.semaphore({}, sem.name);
    await other.lock();
    const seen = await recording<AcquireTrace>(TRACING_CHANNELS.acquire, async () => {
      expect(await sem.lock(100)).toBeNull();
      await expect(sem.lock(100, async () => undefined)).rejects.toBeInstanceOf(LockTimeoutError);
      const reason = new Error('caller gave up');
      await expect(sem.lock(null, { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 100);
      await expect(sem.acquire({ signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
      await sem.close();
      await expect(sem.lock()).rejects.toMatchObject({ name: 'SemaphoreClosedError' });
    });
    const settled = seen.filter(([event]) => event === 'asyncEnd').map(([, context]) => context);
    expect(settled.map(({ form, outcome }) => [form, outcome])).toEqual([
      ['lock', 'timeout'],
      ['callback', 'timeout'],
      ['lock', 'aborted'],
      ['lease', 'aborted'],
      ['lock', 'error'],
    ]);
    expect(settled[0]).toMatchObject({ result: null });
    expect(settled[0]!.waitedMs).toBeGreaterThanOrEqual(90);
    expect(settled[3]!.waitedMs).toBeGreaterThanOrEqual(90);
    expect(settled[4]!.error).toMatchObject({ name: 'SemaphoreClosedError' });
    // Published on `error`: the aborts and the failure, not the timeouts.
    const errors = seen.filter(([event]) => event === 'error').map(([, context]) => context.outcome);
    expect(errors).toEqual(['aborted', 'aborted', 'error']);
  });

  test('the hold channel covers the callback form from the grant to the release, and links its acquisition', async () => {
    const sem = fixture.semaphore();
    const order: string[] = [];
    let acquisition: AcquireTrace | undefined;
    const handlers = {
      start: (context: AcquireTrace) => {
        acquisition = context;
        order.push('acquire start');
      },
      asyncEnd: () => order.push('acquire asyncEnd'),
    };
    const acquire = tracingChannel<unknown, AcquireTrace>(TRACING_CHANNELS.acquire);
    acquire.subscribe(handlers as never);
    let holds: Array<[Event, HoldTrace]> = [];
    try {
      holds = await recording<HoldTrace>(TRACING_CHANNELS.hold, async (events) => {
        await sem.lock(async () => {
          order.push(`fn: ${events.map(([event]) => event).join(', ')}`);
          await sleep(50);
        });
        await expect(
          sem.lock(async () => {
            throw new Error('fn failed');
          }),
        ).rejects.toThrow('fn failed');
      });
    } finally {
      acquire.unsubscribe(handlers as never);
    }
    // fn runs inside the hold trace's synchronous part: after its start, before its end.
    expect(order.slice(0, 3)).toEqual(['acquire start', 'acquire asyncEnd', 'fn: start']);
    const ends = holds.filter(([event]) => event === 'asyncEnd').map(([, context]) => context);
    expect(ends[0]).toMatchObject({ semaphore: sem.name, token: '0', fence: expect.any(Number), result: undefined });
    expect(ends[0]!.heldMs).toBeGreaterThanOrEqual(45);
    expect(ends[1]).toMatchObject({ acquisition, error: expect.objectContaining({ message: 'fn failed' }) });
    expect(holds.filter(([event]) => event === 'error')).toHaveLength(1);
    expect(await sem.availableCount()).toBe(1);
  });
});

describe('examples/opentelemetry.js with the OpenTelemetry SDK', () => {
  let exporter: InMemorySpanExporter;
  let stop: () => void;
  beforeEach(() => {
    exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    stop = example.traceSemaphores({ tracer: provider.getTracer('tracing.spec') });
  });
  afterEach(() => stop());

  const ms = ([seconds, nanos]: [number, number]) => seconds * 1e3 + nanos / 1e6;
  const now = () => performance.timeOrigin + performance.now();
  const attribute = (span: ReadableSpan, name: string) => span.attributes[`semaphore.${name}`];

  test('subscribes to the channels the library publishes on', () => {
    expect(example.CHANNELS).toEqual(TRACING_CHANNELS);
  });

  test('a contended lock(fn): the span starts at the call, covers the wait, and ends at the release', async () => {
    const sem = fixture.semaphore();
    const other = fixture.semaphore({}, sem.name);
    await other.lock();
    exporter.reset(); // the other instance's span
    const calledAt = now();
    let grantedAt = 0;
    let finishedAt = 0;
    const waiting = sem.lock(async () => {
      grantedAt = now();
      expect(exporter.getFinishedSpans()).toHaveLength(0); // still open while the token is held
      await sleep(100);
      finishedAt = now();
    });
    await sleep(300);
    await other.unlock();
    await waiting;
    const [span] = exporter.getFinishedSpans();
    expect(span).toBeDefined();
    expect(span!.name).toBe('semaphore.lock');
    // OpenTelemetry's clock has millisecond steps here: allow one.
    expect(ms(span!.startTime)).toBeLessThanOrEqual(calledAt + 1);
    expect(ms(span!.startTime)).toBeLessThan(grantedAt - 250);
    expect(ms(span!.endTime)).toBeGreaterThanOrEqual(finishedAt - 1);
    expect(attribute(span!, 'waited_ms')).toBeGreaterThanOrEqual(250);
    expect(ms(span!.duration)).toBeGreaterThanOrEqual((attribute(span!, 'waited_ms') as number) + 90);
    expect(span!.attributes).toMatchObject({
      'semaphore.name': sem.name,
      'semaphore.resources': 1,
      'semaphore.form': 'callback',
      'semaphore.outcome': 'granted',
      'semaphore.token': '0',
      'semaphore.fence': expect.any(Number),
      'semaphore.held_ms': expect.any(Number),
    });
    expect(span!.attributes).not.toHaveProperty('semaphore.timeout_ms');
    expect(span!.events.map((event) => event.name)).toEqual(['granted']);
    expect(span!.status.code).toBe(SpanStatusCode.UNSET);
  });

  test('lock() and acquire(): the span ends at the grant', async () => {
    const sem = fixture.semaphore({ resources: 2 });
    const token = await sem.lock(1000);
    const lease = await sem.acquire();
    const spans = exporter.getFinishedSpans();
    expect(spans.map((span) => [span.name, attribute(span, 'form'), attribute(span, 'outcome')])).toEqual([
      ['semaphore.lock', 'lock', 'granted'],
      ['semaphore.acquire', 'lease', 'granted'],
    ]);
    expect(attribute(spans[0]!, 'timeout_ms')).toBe(1000);
    await sem.unlock(token!);
    await lease.release();
    expect(exporter.getFinishedSpans()).toHaveLength(2);
  });

  test('a timeout and an abort are the outcome and an ERROR status; a failing fn is an exception', async () => {
    const sem = fixture.semaphore();
    const other = fixture.semaphore({}, sem.name);
    const token = await other.lock();
    exporter.reset(); // the other instance's span
    await expect(sem.lock(150, async () => undefined)).rejects.toBeInstanceOf(LockTimeoutError);
    await expect(sem.lock(null, { signal: AbortSignal.timeout(150) })).rejects.toMatchObject({ name: 'TimeoutError' });
    await other.unlock(token!);
    await expect(
      sem.lock(async () => {
        throw new Error('fn failed');
      }),
    ).rejects.toThrow('fn failed');
    const spans = exporter.getFinishedSpans();
    expect(spans.map((span) => [attribute(span, 'outcome'), span.status])).toEqual([
      ['timeout', { code: SpanStatusCode.ERROR, message: 'timeout' }],
      ['aborted', { code: SpanStatusCode.ERROR, message: 'aborted' }],
      ['granted', { code: SpanStatusCode.ERROR, message: 'fn failed' }],
    ]);
    for (const span of spans.slice(0, 2)) {
      expect(attribute(span, 'waited_ms')).toBeGreaterThanOrEqual(140);
      expect(ms(span.duration)).toBeGreaterThanOrEqual(140);
    }
    expect(spans[2]!.events.map((event) => event.name)).toEqual(['granted', 'exception']);
  });
});
