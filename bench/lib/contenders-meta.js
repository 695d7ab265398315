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
  bare: {
    contender: 'bare',
    label: 'bare BLPOP/LPUSH token list',
    short: 'bare list',
    color: '#7f7f7f',
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

const ALL = ['lib', 'bare', 'rs10', 'rs1', 'redlock'];

module.exports = { CONTENDERS, ALL };
