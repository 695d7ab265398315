// Named points between the protocol's Redis steps, where the crash tests stop a process.
/** Production code never sets a hook; the crash tests do (spec/support/crash-worker.js), to kill a process there. */
export type CheckpointHook = (step: CheckpointStep) => void | Promise<void>;

export type CheckpointStep =
  | 'lock:before-try' // nothing sent yet
  | 'lock:granted' // the token is recorded as held (fast path or claim)
  | 'lock:before-wait' // tryLock missed; the blocking pipeline is not sent yet
  | 'lock:waiting' // prepareWait, BLMOVE and claim are sent
  | 'unlock:before' // holding; release not sent yet
  | 'unlock:after' // release done
  | 'signal:before'
  | 'refresh:before'
  | 'reclaim:before';

let hook: CheckpointHook | undefined;

export function setCheckpointHook(next: CheckpointHook | undefined): void {
  hook = next;
}

/** Whether a test set a hook: hot paths skip their checkpoints' awaits when none is set. */
export function hasCheckpointHook(): boolean {
  return hook !== undefined;
}

/** Runs the hook, if a test set one. A hot path awaits only what it got: `if (hooked) await hooked`. */
export function checkpoint(step: CheckpointStep): void | Promise<void> {
  return hook?.(step);
}
