// The Redis Cluster hash slot of a key, for keyless commands that must reach a semaphore's node.
import { hashTag } from './keys';

/**
 * The Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, or of the whole key, mod 16384),
 * for commands that name no key but must reach the node owning a semaphore's slot (CLIENT ID, CLIENT
 * UNBLOCK): some cluster clients (node-redis v6) spread keyless commands over the nodes.
 */
export function keySlot(key: string): number {
  const bytes = Buffer.from(hashTag(key) ?? key);
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}
