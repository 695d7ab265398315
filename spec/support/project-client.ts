// Gives a jest project's specs the environment a run of that pass alone would: its REDIS_CLIENT (jest.config.js `globals.RTS_CLIENT`).
const client = (globalThis as { RTS_CLIENT?: string }).RTS_CLIENT;
if (client) process.env['REDIS_CLIENT'] = client;
// A jest the specs start (spec/package/exit-code.spec.ts) runs as that pass alone too, not as every project.
delete process.env['TEST_ALL_CLIENTS'];
