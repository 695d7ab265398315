'use strict';
/*
 * For the specs' child processes: REDIS_CLIENT (redis, redis5, redis6) picks the node-redis major the
 * process and the library use, as jest.config.js does for the specs, by resolving `redis` to it.
 * Require this file first; it returns the package name in use.
 */
const Module = require('node:module');

// An ioredis run (REDIS_CLIENT=ioredis or ioredis6) uses node-redis v4 for all but the semaphores' client.
const requested = process.env.REDIS_CLIENT || 'redis';
const redisClient = requested.startsWith('ioredis') ? 'redis' : requested;
if (redisClient !== 'redis') {
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function (request, ...rest) {
    return resolve.call(this, request === 'redis' ? redisClient : request, ...rest);
  };
}

module.exports = redisClient;
