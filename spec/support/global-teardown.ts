/** What may still be open once the run's own server has stopped: sockets, child processes, pipes. */
const LEAKS = new Set(['TCPSocketWrap', 'TCPWRAP', 'TCPServerWrap', 'ProcessWrap', 'PipeWrap', 'PipeConnectWrap']);

export default async function globalTeardown(globalConfig: { maxWorkers: number }): Promise<void> {
  await Promise.all((globalThis.__RTS_REDIS__ ?? []).map((server) => server.stop()));
  // With --runInBand specs run in this process: a client, server or child process a spec left open
  // would keep it alive. jest.config.js sets forceExit so CI cannot hang on one; this says what it was.
  // Not unref'd: with the server stopped, an unref'd timer could leave the event loop empty, and
  // Node would exit in the middle of this teardown with code 0, before jest sets the run's own code
  // (a failed run then passed CI).
  await new Promise((resolve) => setTimeout(resolve, 1000));
  // With workers, specs ran in them (jest names a worker that would not exit), and this process
  // still holds the workers' own pipes.
  if (globalConfig.maxWorkers > 1) return;
  const open = process.getActiveResourcesInfo().filter((kind) => LEAKS.has(kind));
  if (open.length > 0) {
    const counts = new Map<string, number>();
    for (const kind of open) counts.set(kind, (counts.get(kind) ?? 0) + 1);
    const listed = [...counts].map(([kind, count]) => `${kind} × ${count}`).join(', ');
    process.stderr.write(`\nglobal teardown: still open after the run (a spec left them open): ${listed}\n`);
  }
}
