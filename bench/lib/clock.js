'use strict';
/**
 * The benchmark's one clock, in milliseconds: CLOCK_MONOTONIC (`process.hrtime`), which every process
 * on the machine shares, so the runner and the worker processes can compare their timestamps (the
 * max-holders check merges every process's [granted, release called] intervals).
 * `performance.timeOrigin + performance.now()` is not comparable across processes: each process
 * pairs its monotonic clock with the wall clock once at start-up, and a process preempted between
 * the two readings is off by that much (hundreds of µs with 8 workers starting on one vCPU), which
 * made intervals of processes that never overlapped look as if they did.
 */
const now = () => Number(process.hrtime.bigint()) / 1e6;

module.exports = { now };
