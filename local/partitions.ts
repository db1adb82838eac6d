/**
 * The source's partition trees as `cdc local` follows them (docs/partitioned-tables.md): the
 * capture maps each leaf partition's changes to its root with the latest tree it read; this
 * watch keeps that tree, reads it again every `everyMs` (and whenever the capture reads it), and
 * turns what the log does not carry as row changes into a re-snapshot of the captured root:
 * a partition detached (its rows leave the root's copy), a filled table attached (its rows join
 * it), a `TRUNCATE` of some of the root's partitions. A re-snapshot that cannot be requested yet
 * (one is running) is requested again on the next round, until it is.
 */
import pg from 'pg';
import { readPartitionTree, tablesHoldingRows } from '../lambda/adapters/source-facts-pg.ts';
import type { AuditEntry, ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { attachedLeaves, EMPTY_PARTITION_TREE, treeChanges, type PartitionTree } from '../lambda/core/tables/partitions.ts';
import { requestSnapshot } from '../lambda/core/snapshot/snapshot-worker.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import { SourceWatch } from './periodic.ts';

type Queryable = Pick<pg.ClientBase, 'query'>;

export interface PartitionWatchOptions {
  source: string;
  sourceUrl: string;
  controlPlane: ControlPlane;
  /** The capture's table index: only captured roots are re-snapshotted. */
  index: TableConfigIndex;
  /** @default 2000 */
  everyMs?: number;
  onError?: (err: unknown) => void;
}

const ACTOR = 'partition-watch';

export class PartitionWatch {
  private current: PartitionTree = EMPTY_PARTITION_TREE;
  private first = true;
  private reading: Promise<unknown> = Promise.resolve();
  /** Roots whose re-snapshot is still to be requested, with why. */
  private readonly due = new Map<string, Record<string, unknown>>();
  private readonly watch: SourceWatch;

  constructor(private readonly o: PartitionWatchOptions) {
    this.watch = new SourceWatch({ url: o.sourceUrl, applicationName: `cdc-local-partitions-${o.source}`, onError: o.onError });
  }

  /** The latest tree read. */
  get tree(): PartitionTree {
    return this.current;
  }

  /**
   * Reads the tree on `client` and takes it as the current one; what changed since the last
   * reading (a leaf detached, a filled leaf attached) queues a re-snapshot of its root. The first
   * reading is the baseline (a restart does not re-snapshot every partitioned table).
   */
  async refresh(client: Queryable): Promise<PartitionTree> {
    // One reading at a time (the capture's and the loop's), so each is compared with the one before it.
    const run = this.reading.then(async () => {
      const next = await readPartitionTree(client);
      const before = this.current;
      this.current = next;
      if (this.first) {
        this.first = false;
        return next;
      }
      const attached = attachedLeaves(before, next);
      const filled = attached.length === 0 ? new Set<string>() : await tablesHoldingRows(client, attached);
      for (const c of treeChanges(before, next, filled)) this.queue(c.root, { [c.kind]: c.leaf });
      return next;
    });
    this.reading = run.catch(() => undefined);
    return run;
  }

  /** Queues a re-snapshot of `root` (if it is captured), e.g. after a TRUNCATE of some of its partitions. */
  queue(root: string, why: Record<string, unknown>): void {
    if (!this.o.index.has(root)) return;
    this.due.set(root, { ...(this.due.get(root) ?? {}), ...why });
  }

  /** Requests the queued re-snapshots; one refused (a run is pending) stays queued. */
  async flush(now = new Date()): Promise<void> {
    for (const [root, why] of [...this.due]) {
      const r = await requestSnapshot(this.o.controlPlane, { source: this.o.source, table: root, reason: 'resnapshot', actor: ACTOR, now });
      if (r.outcome !== 'requested') continue;
      this.due.delete(root);
      const audit: AuditEntry = {
        at: now.toISOString(),
        actor: ACTOR,
        action: 'partition-tree-changed',
        source: this.o.source,
        table: root,
        outcome: 'done',
        detail: { ...why, run: r.state.run },
      };
      await this.o.controlPlane.appendAudit(audit);
    }
  }

  /** Reads the baseline, then reads and flushes every `everyMs` until stopped. */
  async start(): Promise<void> {
    await this.refresh(await this.watch.client());
    this.watch.start(this.o.everyMs ?? 2000, async () => {
      await this.refresh(await this.watch.client());
      await this.flush();
    });
  }

  async stop(): Promise<void> {
    await this.watch.stop();
  }
}
