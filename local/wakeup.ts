/**
 * A wake-up call for one waiter: `wait(ms)` returns after `ms`, or as soon as `notify()` is
 * called; a notify while nobody waits is kept for the next wait, so none is lost between a check
 * and the wait that follows it.
 */
export class Wakeup {
  private pending = false;
  private waiter: (() => void) | null = null;

  notify(): void {
    const w = this.waiter;
    if (w) {
      this.waiter = null;
      w();
    } else this.pending = true;
  }

  /** Forgets a notify kept for the next wait (what it was about is already being looked at). */
  clear(): void {
    this.pending = false;
  }

  wait(ms: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const timer = setTimeout(
        () => {
          this.waiter = null;
          resolve();
        },
        Math.max(0, ms),
      );
      this.waiter = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}
