'use strict';
/*
 * For the specs' child processes: REDIS_CLIENT (redis, redis5, redis6) picks the node-redis major the
 * process and the library use, as jest.config.js does for the specs, by resolving `redis` to it.
 * Require this file first; it returns the package name in use.
 */
const Module = require('node:module');

const redisClient = process.env.REDIS_CLIENT || 'redis';
if (redisClient !== 'redis') {
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function (request, ...rest) {
    return resolve.call(this, request === 'redis' ? redisClient : request, ...rest);
  };
}

module.exports = redisClient;
