/**
 * How `cdc local` stops on a signal (docs/local.md, "Stopping"). The first SIGINT (Ctrl-C) or
 * SIGTERM asks for a clean stop: `requested` resolves and `abort` fires, so whatever the run is
 * waiting for gives up, and the run stops its consumers, then its servers, then removes the lock.
 * A second signal exits at once with 130 after telling the servers to stop (`onForce`).
 */
export class StopSignals {
  /** Fires at the first signal: waits (the drain of a bounded run) give up. */
  readonly abort = new AbortController();
  /** Resolves with the first signal. */
  readonly requested: Promise<NodeJS.Signals>;
  private first: NodeJS.Signals | null = null;
  private resolve: (signal: NodeJS.Signals) => void = () => undefined;
  private force: () => void = () => undefined;
  private readonly handler = (signal: NodeJS.Signals): void => this.receive(signal);

  constructor(
    private say: (text: string) => void,
    private readonly exit: (code: number) => void = (code) => process.exit(code),
  ) {
    this.requested = new Promise((r) => (this.resolve = r));
  }

  /** The first signal received, or null. */
  get signal(): NodeJS.Signals | null {
    return this.first;
  }

  install(): void {
    process.on('SIGINT', this.handler);
    process.on('SIGTERM', this.handler);
  }

  uninstall(): void {
    process.off('SIGINT', this.handler);
    process.off('SIGTERM', this.handler);
  }

  /** Where the lines about signals go from now on. */
  sayWith(say: (text: string) => void): void {
    this.say = say;
  }

  /** What a forced exit does first (tell the servers to stop). */
  onForce(force: () => void): void {
    this.force = force;
  }

  receive(signal: NodeJS.Signals): void {
    if (this.first === null) {
      this.first = signal;
      this.say(
        `\ncdc local: ${signal} received: stopping cleanly (consumers first, then the servers; state is kept; ${signal === 'SIGINT' ? 'Ctrl-C' : 'a signal'} again exits at once)\n`,
      );
      this.abort.abort();
      this.resolve(signal);
      return;
    }
    this.say(
      `\ncdc local: second signal (${signal}), exiting at once without a clean stop; the servers were told to stop (PostgreSQL: fast shutdown); run again to resume from the checkpoints\n`,
    );
    try {
      this.force();
    } finally {
      this.exit(130);
    }
  }
}
