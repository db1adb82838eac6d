/**
 * The snapshot worker in `cdc local` (docs/snapshot.md): the same core and reader as the Lambda
 * (lambda/handlers/snapshot-worker.ts), run as a loop next to the capture. It starts after the
 * capture (stream first), requests a first snapshot for every configured table that has none,
 * then keeps working through pending runs, so a re-snapshot requested while `cdc local` runs
 * (`requestSnapshot`, lambda/core/snapshot/snapshot-worker.ts) is picked up within a second.
 *
 * The owner id is fixed (`cdc-local`): one `cdc local` runs per state folder, so after a crash
 * (kill -9) the restarted pipeline takes its own lease back at once and resumes at the first
 * incomplete chunk.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { METRICS_NAMESPACE } from '../contracts/metrics.ts';
import { PostgresPressureProbe, PostgresSnapshotReader } from '../lambda/adapters/snapshot-postgres.ts';
import type { ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { snapshotStreamRecords, type SnapshotState } from '../lambda/core/snapshot/snapshot.ts';
import { AdaptivePacer, DEFAULT_SOURCE_BUDGET, FixedPacer, type SourceBudget } from '../lambda/core/snapshot/snapshot-pacer.ts';
import { planSnapshots, runPendingSnapshots, sleepUnlessAborted, snapshotPendingRuns } from '../lambda/core/snapshot/snapshot-worker.ts';
import { TableConfigIndex, type TableConfig } from '../lambda/core/tables/table-config.ts';
import { emfSnapshotMetrics } from '../lambda/runtime/metrics.ts';
import type { RawPublisher } from './raw-publisher.ts';
import type { SnapshotStatusLine } from './status.ts';

export interface LocalSnapshotsOptions {
  source: string;
  sourceUrl: string;
  /** A read replica to read chunks from. @default the source */
  replicaUrl?: string;
  tables: TableConfig[];
  /** The capture's table index (declared tables and those that joined by a rule): the column rules of every snapshotted table. @default an index of `tables` */
  index?: TableConfigIndex;
  controlPlane: ControlPlane;
  publish: RawPublisher;
  budget?: SourceBudget;
  /** A fixed chunk size instead of the adaptive pacer (tests, benchmarks). */
  fixedChunk?: number;
  /** How often to look for new requests when idle, ms. @default 1000 */
  pollMs?: number;
  onError?: (err: unknown) => void;
}

const OWNER = 'cdc-local';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

export class LocalSnapshots {
  /** Latest state per table (for the live status). */
  readonly states = new Map<string, SnapshotState>();
  private stopping = false;
  /** Aborted by `stop()`: wakes the loop and a run resting between chunks at once. */
  private readonly stopSignal = new AbortController();
  private loop: Promise<void> | null = null;
  private reader: PostgresSnapshotReader;
  private probe: PostgresPressureProbe;
  private probeClient: pg.Client | null = null;
  private busy = false;

  constructor(private readonly o: LocalSnapshotsOptions) {
    this.reader = new PostgresSnapshotReader({
      primary: { connectionString: o.sourceUrl },
      ...(o.replicaUrl ? { replica: { connectionString: o.replicaUrl } } : {}),
      applicationName: `cdc-local-snapshot-${o.source}`,
    });
    this.probe = new PostgresPressureProbe(async () => {
      if (!this.probeClient) {
        const c = new pg.Client({ connectionString: o.sourceUrl, application_name: `cdc-local-snapshot-probe-${o.source}` });
        c.on('error', () => undefined);
        await c.connect();
        this.probeClient = c;
      }
      return this.probeClient;
    });
  }

  /** Requests first snapshots and starts the loop. Call after the capture started. */
  async start(): Promise<void> {
    for (const s of await this.o.controlPlane.listSnapshots(this.o.source)) this.states.set(s.table, s);
    this.loop = this.run();
  }

  private async run(): Promise<void> {
    const index = this.o.index ?? new TableConfigIndex(this.o.tables);
    const metrics = emfSnapshotMetrics(new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'cdc-snapshot-worker' }));
    while (!this.stopping) {
      try {
        await planSnapshots(this.o.controlPlane, this.o.source, this.o.tables, 'snapshot-planner');
        const runs = await this.o.controlPlane.listSnapshots(this.o.source);
        for (const s of runs) this.states.set(s.table, s);
        if (snapshotPendingRuns(runs).length === 0) {
          this.busy = false;
          await sleepUnlessAborted(this.o.pollMs ?? 1000, this.stopSignal.signal);
          continue;
        }
        this.busy = true;
        await runPendingSnapshots({
          controlPlane: this.o.controlPlane,
          reader: this.reader,
          publish: (records) => this.o.publish(snapshotStreamRecords(records, sha256)),
          source: this.o.source,
          owner: OWNER,
          rulesOf: (t) => index.columnRules(t),
          pollColumnOf: (t) => index.get(t)?.pollColumn,
          pacerFor: () => (this.o.fixedChunk ? new FixedPacer(this.o.fixedChunk) : new AdaptivePacer({ budget: this.o.budget ?? DEFAULT_SOURCE_BUDGET })),
          beforeRun: async () => {
            if (!this.o.fixedChunk) await this.probe.calibrate(20);
          },
          ...(this.o.fixedChunk ? {} : { pressure: () => this.probe.read() }),
          metrics,
          shouldStop: () => this.stopping,
          signal: this.stopSignal.signal,
          onState: (s) => this.states.set(s.table, s),
        });
      } catch (e) {
        this.o.onError?.(e);
        await this.reader.close();
        if (!this.stopping) await sleepUnlessAborted(1000, this.stopSignal.signal);
      }
    }
  }

  /** True when no run is requested or running (as last read). */
  idle(): boolean {
    return !this.busy && snapshotPendingRuns([...this.states.values()]).length === 0;
  }

  /** Waits until every run is done (throws after `timeoutMs`). */
  /** Waits until no snapshot run is pending; throws when the runs made no progress for `stallMs`. */
  async waitIdle(stallMs: number): Promise<void> {
    let seen = -1;
    let deadline = Date.now() + stallMs;
    for (;;) {
      const runs = await this.o.controlPlane.listSnapshots(this.o.source);
      const pending = snapshotPendingRuns(runs);
      if (pending.length === 0 && !this.busy) return;
      const progress = runs.reduce((n, r) => n + r.rowsDone, 0);
      if (progress !== seen) [seen, deadline] = [progress, Date.now() + stallMs];
      if (Date.now() > deadline)
        throw new Error(
          `the snapshot made no progress for ${Math.round(stallMs / 1000)} s (${pending.map((r) => `${r.table} ${r.rowsDone}/${r.estimatedRows}`).join(', ')})`,
        );
      await sleep(100);
    }
  }

  lines(now: number): SnapshotStatusLine[] {
    return [...this.states.values()].map((s) => ({
      table: s.table,
      status: s.status,
      rowsDone: s.rowsDone,
      estimatedRows: s.estimatedRows,
      rowsPerSecond: s.rowsPerSecond,
      etaSeconds: s.etaSeconds,
      throttle: s.throttle,
      chunkSize: s.chunkSize,
      sinceUpdateMs: now - Date.parse(s.updatedAt),
      error: s.error,
    }));
  }

  /** Stops the loop: a run stops at its next chunk boundary, a pause between chunks ends at once (docs/local.md, "Stopping"). */
  async stop(): Promise<void> {
    this.stopping = true;
    this.stopSignal.abort();
    await this.loop;
    await this.reader.close();
    await this.probeClient?.end().catch(() => undefined);
  }
}
