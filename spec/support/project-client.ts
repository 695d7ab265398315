// Sets REDIS_CLIENT for the specs of a jest project (jest.config.js `globals.RTS_CLIENT`), as a whole run's REDIS_CLIENT does.
const client = (globalThis as { RTS_CLIENT?: string }).RTS_CLIENT;
if (client) process.env['REDIS_CLIENT'] = client;
