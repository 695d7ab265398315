export default async function globalTeardown(): Promise<void> {
  await globalThis.__RTS_REDIS__?.stop();
}
