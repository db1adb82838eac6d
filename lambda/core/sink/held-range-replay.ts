/**
 * The resume replay of a warehouse sink (docs/operations.md, "How a resume replays"): the sink
 * itself replays the held range when an operator resume marks its hold `releaseRequested`.
 *
 * One pass, per table marked for release (and active again):
 * 1. read the hold (held-from position H and hold count c) strongly consistently;
 * 2. read the change log from its trim horizon to its tip, shard by shard in stream order, and
 *    apply the table's events from each held shard's first held sequence number on, through the
 *    applier's own code (`applyRecords(…, { replayHeld: true })`: same plan, same position guard)
 *    — one key's events are in one shard, so each key's events apply in position order. A shard
 *    that held nothing is left to its live consumer: its unapplied events of the table are all
 *    ahead of that consumer, and replaying them ahead of it could apply a key's newer event before
 *    an older one the consumer has not reached yet, which the position guard would then drop
 *    (`replaysRecord` in lambda/core/operator/operator-decisions.ts). A hold recorded by a
 *    consumer running several batches of one shard at once (`parallelBatches`) replays each held
 *    shard from its trim horizon instead (`{ catchUp: true }` before its first held event): a
 *    lagging lane's older events then apply before the newer ones of their keys, and those already
 *    applied are dropped as duplicates;
 * 3. release the hold in one transaction with its audit entry, conditional on H and c unchanged.
 *    The live path keeps holding the table until then. A hold recorded during the pass (a live
 *    batch that read the hold) moves c, so the release fails and the pass runs again: no held
 *    event is released without being replayed, and no live event of the table is applied before
 *    the held ones (the live path applies only after the release).
 * After each chunk the pass records how far it has applied each shard (`replayedThrough`), so a
 * pass that does not finish (a crash, the function's timeout) is continued by the next one rather
 * than started again; a shard that held nothing is not read at all.
 * A live batch that read the hold just before the release and holds after it sets the hold again;
 * the release request stays set until the hold has been clear for `settleMs`, so the replay
 * picks that up too.
 */
import type { ControlPlane } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import type { ApplyOptions, BatchOutcome, ChangeRecord } from '../warehouse/warehouse-apply.ts';
import { replayStarts, replaysRecord } from '../operator/operator-decisions.ts';

/** A record of the change log as read back (the shape lambda/adapters/change-log-reader.ts reads). */
interface LogRecord {
  shardId: string;
  sequenceNumber: string;
  text: string;
  /** An aggregate put for another shard (contracts/change-log-record.ts): no event of it is used. */
  otherShard?: string;
}

export interface ReplayDeps {
  controlPlane: ControlPlane;
  sinkId: string;
  /** The sink's own apply (both sinks' appliers have it). */
  applier: { applyRecords(records: readonly ChangeRecord[], options?: ApplyOptions): Promise<BatchOutcome> };
  /**
   * Reads the change log now, page by page in stream order (lambda/adapters/change-log-reader.ts
   * `readChangeLog`): the shards `starts` names, each from its sequence number (that record first)
   * or its trim horizon (null); every shard from its trim horizon when `starts` is null. A reader
   * may give more (records before a start, other shards): the replay leaves them alone.
   */
  readLog: (starts: ReadonlyMap<string, string | null> | null) => AsyncIterable<readonly LogRecord[]>;
  /** How long a released hold must stay clear before the release request is dropped. @default 30000 */
  settleMs?: number;
  log?: (message: string, detail: Record<string, unknown>) => void;
  now?: () => Date;
}

export interface ReplayOutcome {
  source: string;
  table: string;
  replayed: number;
  released: boolean;
}

/** A replay pass could not apply the held range (it is tried again on the next pass). */
export class ReplayIncompleteError extends CdcError {
  constructor(sourceId: string, table: string, why: string) {
    super('REPLAY_INCOMPLETE', `the resume replay of ${sourceId}/${table} did not complete: ${why}`);
  }
}

const PASSES = 5;
const CHUNK = 500;

export function createHeldRangeReplayer(deps: ReplayDeps): { replayPending(): Promise<ReplayOutcome[]>; pending(): Promise<number> } {
  const { controlPlane: cp, sinkId } = deps;
  const now = deps.now ?? (() => new Date());
  const settleMs = deps.settleMs ?? 30_000;

  async function marked() {
    return (await cp.listSinkProgress(sinkId)).filter((p) => p.sink === sinkId && (p.releaseRequested ?? null) !== null);
  }

  async function replayOne(sourceId: string, table: string): Promise<ReplayOutcome | null> {
    /** Events applied by this call's passes (a later pass continues after an earlier one's progress). */
    let replayed = 0;
    for (let pass = 1; pass <= PASSES; pass++) {
      const t = await cp.getTable(sourceId, table);
      if (!t || t.state !== 'active') return null; // paused again (or gone): the live path keeps holding
      const hold = await cp.getSinkProgress(sinkId, sourceId, table);
      if (!hold || hold.heldFrom === null) {
        const releasedAt = hold?.releasedAt ? Date.parse(hold.releasedAt) : 0;
        if (now().getTime() - releasedAt >= settleMs) await cp.clearReleaseRequest(sinkId, sourceId, table);
        return null;
      }
      const from = hold.heldFrom;
      const count = hold.holdCount ?? 0;
      // How far this hold's events are applied per shard: an earlier pass's progress, then this one's after each chunk.
      const through: Record<string, string> = { ...(hold.replayedThrough ?? {}) };
      for await (const page of deps.readLog(replayStarts(hold))) {
        const mine: Array<{ record: ChangeRecord; shardId: string; kind: 'held' | 'catch-up' }> = [];
        for (const r of page) {
          if (r.otherShard !== undefined) continue;
          let e: { source?: unknown; table?: unknown; position?: unknown };
          try {
            e = JSON.parse(r.text) as typeof e;
          } catch {
            continue; // the live path dead-lettered it already
          }
          if (e.source !== sourceId || e.table !== table || typeof e.position !== 'string') continue;
          const kind = replaysRecord(hold, r.shardId, r.sequenceNumber, e.position);
          if (kind !== null)
            mine.push({
              record: { sequenceNumber: r.sequenceNumber, origin: `replay/${r.shardId}/${r.sequenceNumber}`, text: r.text },
              shardId: r.shardId,
              kind,
            });
        }
        // In stream order, in chunks of one kind: a catch-up record (before its shard's first held
        // one, replayed because lanes may lag) is applied without a second dead letter.
        for (let i = 0; i < mine.length;) {
          const kind = mine[i]!.kind;
          let j = i + 1;
          while (j < mine.length && j - i < CHUNK && mine[j]!.kind === kind) j++;
          const chunk = mine.slice(i, j);
          i = j;
          const outcome = await deps.applier.applyRecords(
            chunk.map((m) => m.record),
            kind === 'held' ? { replayHeld: true } : { replayHeld: true, catchUp: true },
          );
          if (outcome.failed.length > 0) throw new ReplayIncompleteError(sourceId, table, outcome.reasons.get(outcome.failed[0]!) ?? 'records failed');
          if (outcome.held > 0) throw new ReplayIncompleteError(sourceId, table, `the sink held ${outcome.held} events again (cdc status says why)`);
          replayed += outcome.applied;
          // Every event of the table on these shards up to the chunk's last is applied: a later pass starts after it.
          for (const m of chunk) through[m.shardId] = m.record.sequenceNumber;
          await cp.noteReplayProgress(sinkId, sourceId, table, through);
        }
      }
      const released = await cp.completeSinkRelease(
        sinkId,
        sourceId,
        table,
        { heldFrom: from, holdCount: count },
        {
          at: now().toISOString(),
          actor: `applier:${sinkId}`,
          action: 'replay-held',
          source: sourceId,
          table,
          outcome: 'done',
          detail: { heldFrom: from, holdCount: count, replayed, pass },
        },
      );
      deps.log?.('held range replayed', { source: sourceId, table, from, replayed, released, pass });
      if (released) return { source: sourceId, table, replayed, released };
    }
    return { source: sourceId, table, replayed, released: false };
  }

  return {
    /** One pass over every table whose hold an operator released. */
    async replayPending(): Promise<ReplayOutcome[]> {
      const out: ReplayOutcome[] = [];
      for (const p of await marked()) {
        const r = await replayOne(p.source, p.table);
        if (r) out.push(r);
      }
      return out;
    },
    /** Tables marked for release that this sink still holds. */
    async pending(): Promise<number> {
      return (await marked()).filter((p) => p.heldFrom !== null).length;
    },
  };
}
