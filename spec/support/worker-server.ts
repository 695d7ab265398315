// Hands each jest worker's specs their own Redis (REDIS_URL), of those the global setup started (one per worker).
const url = process.env[`RTS_WORKER_REDIS_URL_${process.env['JEST_WORKER_ID'] ?? '1'}`];
if (url) process.env['REDIS_URL'] = url;
