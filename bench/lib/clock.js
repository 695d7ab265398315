'use strict';
/**
 * The benchmark's one clock, in milliseconds: CLOCK_MONOTONIC (`process.hrtime`), which every process
 * on the machine shares, so the runner and the worker processes can compare their timestamps (the
 * max-holders check merges every process's [granted, release called] intervals).
 * `performance.timeOrigin + performance.now()` is not comparable across processes: each process
 * pairs its monotonic clock with the wall clock once at start-up, and a process preempted between
 * the two readings is off by that much (about 15 µs between idle processes here; with 8 workers
 * starting on one vCPU, enough to make intervals of processes that never overlapped, by a
 * Redis-side count, look as if they did).
 */
const now = () => Number(process.hrtime.bigint()) / 1e6;

module.exports = { now };
