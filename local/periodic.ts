/**
 * The loop of `cdc local`'s catalog watches (discovery, partitions): runs `tick` every `everyMs`
 * until `stopping()` says so, looking at `stopping` at least every 200 ms so a stop never waits a
 * whole period; a tick's error goes to `onError` and the next tick tries again.
 */
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runEvery(everyMs: number, stopping: () => boolean, tick: () => Promise<void>, onError: (e: unknown) => Promise<void>): Promise<void> {
  while (!stopping()) {
    const until = Date.now() + everyMs;
    while (!stopping() && Date.now() < until) await sleep(Math.min(200, until - Date.now()));
    if (stopping()) break;
    try {
      await tick();
    } catch (e) {
      await onError(e);
    }
  }
}
