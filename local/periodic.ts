/**
 * The loop of `cdc local`'s catalog watches (discovery, partitions): runs `tick` every `everyMs`
 * until `stopping()` says so, looking at `stopping` at least every 200 ms so a stop never waits a
 * whole period; a tick's error goes to `onError` and the next tick tries again. `SourceWatch`
 * holds such a loop with the watch's one connection to the source.
 */
import pg from 'pg';

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

/**
 * A catalog watch's connection to the source and its loop: the connection is opened on first use
 * (`client`, then `opened` runs on it) and closed after a failed tick (the next use opens another);
 * `start` runs `tick` every `everyMs`, `stop` ends the loop and closes the connection.
 */
export class SourceWatch {
  private connection: pg.Client | null = null;
  private stopping = false;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly o: { url: string; applicationName: string; onError?: ((e: unknown) => void) | undefined; opened?: (c: pg.Client) => Promise<void> },
  ) {}

  async client(): Promise<pg.Client> {
    if (this.connection) return this.connection;
    const c = new pg.Client({ connectionString: this.o.url, application_name: this.o.applicationName });
    c.on('error', (e) => {
      this.connection = null;
      this.o.onError?.(e);
    });
    await c.connect();
    await this.o.opened?.(c);
    this.connection = c;
    return c;
  }

  start(everyMs: number, tick: () => Promise<void>): void {
    this.loop = runEvery(
      everyMs,
      () => this.stopping,
      tick,
      async (e) => {
        await this.close();
        this.o.onError?.(e);
      },
    );
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop;
    await this.close();
  }

  private async close(): Promise<void> {
    await this.connection?.end().catch(() => undefined);
    this.connection = null;
  }
}
