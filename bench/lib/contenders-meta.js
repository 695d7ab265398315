'use strict';
// Who runs in the benchmark, under which name, with which options.

const CONTENDERS = {
  lib: {
    contender: 'lib',
    label: 'redis-token-semaphore (this)',
    short: 'this library',
    color: '#d62728',
    semaphore: true,
  },
  lean: {
    contender: 'lean',
    label: "lean client (the library's commands, no library)",
    short: 'lean client',
    color: '#ff7f0e',
    semaphore: true,
  },
  bare: {
    contender: 'bare',
    label: 'bare BLPOP/LPUSH token list',
    short: 'bare list',
    color: '#7f7f7f',
    semaphore: true,
  },
  libWeighted: {
    contender: 'lib',
    options: { weights: [1, 2, 3] },
    label: 'redis-token-semaphore (this), weights 1, 2, 3',
    short: 'this library, weighted',
    color: '#8c564b',
    semaphore: true,
  },
  rs10: {
    contender: 'rs',
    label: 'redis-semaphore 5.8 (defaults: 10 ms retry)',
    short: 'redis-semaphore 10 ms',
    color: '#1f77b4',
    semaphore: true,
  },
  rs1: {
    contender: 'rs',
    options: { retryInterval: 1 },
    label: 'redis-semaphore 5.8 (retryInterval 1)',
    short: 'redis-semaphore 1 ms',
    color: '#17becf',
    semaphore: true,
  },
  redlock: {
    contender: 'redlock',
    label: 'redlock 4.2 (defaults: 200 ± 100 ms retry)',
    short: 'redlock',
    color: '#2ca02c',
    semaphore: false,
  },
};

/** The library and its peers: every scenario runs them. */
const ALL = ['lib', 'bare', 'rs10', 'rs1', 'redlock'];

/** Most callers per process the library gives a blocking connection each (its default pool). */
const POOL = 10;

/**
 * The contenders of a loop cell: ALL, and the lean client where each of the library's callers has a
 * blocking connection of its own (the lean client always gives it one), so "× lean" is the library's code.
 */
function loopContenders({ clients, procs = 1 }) {
  return clients / procs <= POOL ? ['lib', 'lean', ...ALL.slice(1)] : ALL;
}

module.exports = { CONTENDERS, ALL, loopContenders };
