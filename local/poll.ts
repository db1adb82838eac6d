/**
 * The polling fallback in `cdc local` (docs/polling.md): the same core (lambda/core/capture/poll.ts) and
 * reader as the Lambda (lambda/handlers/poll-worker.ts), run as a loop next to the capture for the
 * tables configured `"capture": "poll"`. Each pass reads every polled table from its cursor to its
 * end, paced by the snapshot worker's pacer against the same source budget, then waits `intervalMs`.
 */
import { recordedSpace } from '../lambda/core/shared/position-space.ts';
import { createHash } from 'node:crypto';
import pg from 'pg';
import { PostgresPressureProbe, PostgresSnapshotReader } from '../lambda/adapters/snapshot-postgres.ts';
import type { ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { checkpointCursorStore, pollPass, type PollProgress } from '../lambda/core/capture/poll.ts';
import { AdaptivePacer, DEFAULT_SOURCE_BUDGET, FixedPacer, type SourceBudget } from '../lambda/core/snapshot/snapshot-pacer.ts';
import { snapshotPartitionKey } from '../lambda/core/snapshot/snapshot.ts';
import type { TableConfig } from '../lambda/core/tables/table-config.ts';
import type { RawPublisher } from './raw-publisher.ts';

export interface LocalPollsOptions {
  source: string;
  sourceUrl: string;
  /** The polled tables (`capture: 'poll'`, with `pollColumn`). */
  tables: TableConfig[];
  controlPlane: ControlPlane;
  publish: RawPublisher;
  budget?: SourceBudget;
  /** A fixed page size instead of the adaptive pacer (tests). */
  fixedPage?: number;
  /** Time between passes, ms. @default 1000 */
  intervalMs?: number;
  onError?: (err: unknown) => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A horizon as PostgreSQL prints a timestamptz in UTC (`2026-12-06 02:40:45.123456+00`, `-infinity`), epoch ms. */
function horizonMs(text: string): number {
  if (text === '-infinity') return -Infinity;
  if (text === 'infinity') return Infinity;
  const ms = Date.parse(text.replace(' ', 'T').replace(/\+00$/, 'Z'));
  if (Number.isNaN(ms)) throw new Error(`unreadable poll horizon ${JSON.stringify(text)}`);
  return ms;
}
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** One polled table as the status shows it. */
export interface PollStatusLine {
  table: string;
  pollColumn: string;
  rows: number;
  lastPassAt: number | null;
  throttle: PollProgress['throttle'];
}

export class LocalPolls {
  private stopping = false;
  private loop: Promise<void> | null = null;
  private readonly reader: PostgresSnapshotReader;
  private readonly probe: PostgresPressureProbe;
  private probeClient: pg.Client | null = null;
  private readonly status = new Map<string, PollStatusLine>();
  /** Start time of the last pass that completed (epoch ms). */
  private passStartedDone = 0;
  /** The lowest timestamp horizon of the last pass that completed (epoch ms; null: no timestamp-polled page). */
  private passHorizonDone: number | null = null;

  constructor(private readonly o: LocalPollsOptions) {
    this.reader = new PostgresSnapshotReader({ primary: { connectionString: o.sourceUrl }, applicationName: `cdc-local-poll-${o.source}` });
    this.probe = new PostgresPressureProbe(async () => {
      if (!this.probeClient) {
        const c = new pg.Client({ connectionString: o.sourceUrl, application_name: `cdc-local-poll-probe-${o.source}` });
        c.on('error', () => undefined);
        await c.connect();
        this.probeClient = c;
      }
      return this.probeClient;
    });
    for (const t of o.tables) this.status.set(t.table, { table: t.table, pollColumn: t.pollColumn!, rows: 0, lastPassAt: null, throttle: 'full-speed' });
  }

  start(): void {
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    const cursors = checkpointCursorStore(this.o.controlPlane, this.o.source);
    let calibrated = false;
    while (!this.stopping) {
      const started = Date.now();
      let horizon: number | null = null;
      try {
        if (!this.o.fixedPage && !calibrated) {
          await this.probe.calibrate(20);
          calibrated = true;
        }
        await pollPass({
          source: this.o.source,
          tables: this.o.tables.map((t) => ({ table: t.table, pollColumn: t.pollColumn!, rules: { mask: t.mask, exclude: t.exclude } })),
          reader: this.reader,
          cursors,
          spaceOf: async (t) => recordedSpace(await this.o.controlPlane.getTable(this.o.source, t)),
          publish: (records) =>
            this.o.publish(
              records.map((r) => ({ partitionKey: snapshotPartitionKey(r, sha256), data: JSON.stringify(r), label: `${r.source}/${r.table}@poll` })),
            ),
          pacerFor: () => (this.o.fixedPage ? new FixedPacer(this.o.fixedPage) : new AdaptivePacer({ budget: this.o.budget ?? DEFAULT_SOURCE_BUDGET })),
          ...(this.o.fixedPage ? {} : { pressure: () => this.probe.read(1) }),
          shouldStop: () => this.stopping,
          onPage: (table, p) => {
            this.status.set(table, { ...this.status.get(table)!, throttle: p.throttle });
            if (p.horizon !== undefined) horizon = Math.min(horizon ?? Infinity, horizonMs(p.horizon));
          },
        }).then((rows) => {
          const at = Date.now();
          for (const [table, n] of rows) {
            const s = this.status.get(table)!;
            this.status.set(table, { ...s, rows: s.rows + n, lastPassAt: at });
          }
        });
        if (!this.stopping) [this.passStartedDone, this.passHorizonDone] = [started, horizon];
      } catch (e) {
        this.o.onError?.(e);
        await this.reader.close();
      }
      const until = Date.now() + (this.o.intervalMs ?? 1000);
      while (!this.stopping && Date.now() < until) await sleep(Math.min(100, until - Date.now()));
    }
  }

  /**
   * True when a pass that started at or after `t` has completed and its timestamp pages read up
   * to `t` (their horizon stays below open transactions and the clock's margin, docs/polling.md).
   */
  passedSince(t: number): boolean {
    return this.passStartedDone >= t && (this.passHorizonDone === null || this.passHorizonDone >= t);
  }

  lines(): PollStatusLine[] {
    return [...this.status.values()];
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop;
    await this.reader.close();
    await this.probeClient?.end().catch(() => undefined);
  }
}
