/** What may still be open once the run's own server has stopped: sockets, child processes, pipes. */
const LEAKS = new Set(['TCPSocketWrap', 'TCPWRAP', 'TCPServerWrap', 'ProcessWrap', 'PipeWrap', 'PipeConnectWrap']);

export default async function globalTeardown(): Promise<void> {
  await globalThis.__RTS_REDIS__?.stop();
  // Specs run in this process (--runInBand): a client, server or child process a spec left open
  // would keep it alive. jest.config.js sets forceExit so CI cannot hang on one; this says what it was.
  await new Promise((resolve) => setTimeout(resolve, 1000).unref());
  const open = process.getActiveResourcesInfo().filter((kind) => LEAKS.has(kind));
  if (open.length > 0) {
    const counts = new Map<string, number>();
    for (const kind of open) counts.set(kind, (counts.get(kind) ?? 0) + 1);
    const listed = [...counts].map(([kind, count]) => `${kind} × ${count}`).join(', ');
    process.stderr.write(`\nglobal teardown: still open after the run (a spec left them open): ${listed}\n`);
  }
}
