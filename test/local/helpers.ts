/** Helpers for the tests of the local pipeline. */

/** Polls `check` until it is true; throws naming `what` after `timeoutMs` (a deadline, not a timing assertion). */
export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
