// The specs' entry to tools/redis-server.js (free ports, throwaway redis-server processes), typed by its .d.ts.
export { answersPing, freePort, startRedisServer, type RedisServer, type StartOptions } from '../../tools/redis-server';
