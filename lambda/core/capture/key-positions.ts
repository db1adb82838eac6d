/**
 * Per-key monotonicity of positions on a shard (docs/positions.md): what the normalizer accepted
 * last for each key, and the check of a batch's changes against it.
 */
import { PositionRegressionError } from '../shared/errors.ts';
import { keyText } from '../shared/event.ts';
import { POSITION_ZERO } from '../shared/position.ts';
import type { Position } from '../shared/position.ts';
import type { DecodedChange } from './decoded.ts';

/** What the normalizer saw of one key on one shard (per-key monotonicity, docs/positions.md). */
interface KeySeen {
  /** Highest position accepted. */
  position: Position;
  /** Latest commit time seen. */
  commitTs: string;
  /** `Date.parse(commitTs)`, once it was needed (NaN for a text it cannot read, as `Date.parse` gives). */
  commitMs?: number;
}

/** `Date.parse` of what was seen of a key, parsed at most once. */
function seenMs(s: KeySeen): number {
  return (s.commitMs ??= Date.parse(s.commitTs));
}

/** How many keys per shard the monotonicity check remembers (the oldest are forgotten first). @default */
const KEYS_REMEMBERED = 100_000;

/** Per shard (`<stream>/<shard>`): table + key text → what was last accepted for it. */
export class KeyPositions {
  private readonly shards = new Map<string, Map<string, KeySeen>>();
  /** The last commit time parsed, and its `Date.parse`: a transaction's changes share one text. */
  private parsedTs = '';
  private parsedMs = NaN;

  /** `Date.parse(text)`, parsed once for a run of changes with the same commit time. */
  private ms(text: string): number {
    if (text !== this.parsedTs) {
      this.parsedTs = text;
      this.parsedMs = Date.parse(text);
    }
    return this.parsedMs;
  }

  /**
   * Checks that `changes` do not go backwards for their keys on the shard of `origin`
   * and remembers them; returns the first regression, or null. A lower position that committed
   * no later than the one seen is a replay or duplicate (a DMS task resumed from its checkpoint,
   * a retried batch): sinks ignore it, so it passes. A lower position that committed LATER is
   * a regression: positions disagree with commit order (for one key, commit order is the order
   * of its changes, since each waits for the row lock of the one before).
   */
  check(origin: string, changes: readonly DecodedChange[]): PositionRegressionError | null {
    const shard = origin.includes('/') ? origin.slice(0, origin.lastIndexOf('/')) : origin;
    let keys = this.shards.get(shard);
    if (!keys) this.shards.set(shard, (keys = new Map()));
    const updates: [string, KeySeen][] = [];
    for (const c of changes) {
      if (c.position === POSITION_ZERO || c.op === 'truncate' || c.op === 'snapshot') continue; // load rows order before every change; snapshot rows get their position from the stitching (docs/snapshot.md), below changes their read did not see
      const id = `${c.table}|${keyText(c.key)}`;
      const last = keys.get(id);
      if (last && c.position < last.position) {
        // Against the latest commit time seen for the key, so a replay after a backward step of
        // the source's clock is still a replay.
        if (this.ms(c.commitTs) > seenMs(last)) {
          return new PositionRegressionError(
            c.table,
            keyText(c.key),
            shard,
            c.position,
            last.position,
            `It committed at ${c.commitTs}, after the change at ${last.position} (committed ${last.commitTs}): the capture's positions do not follow commit order here, and a sink would keep the older value. ` +
              `The record is dead-lettered and the table marked for re-snapshot (docs/positions.md)`,
          );
        }
        continue; // a replay: nothing new to remember
      }
      // The later of the two commit times: parsed only when the texts differ, the remembered one only once.
      if (!last || last.commitTs === c.commitTs) updates.push([id, { position: c.position, commitTs: c.commitTs, commitMs: last?.commitMs }]);
      else {
        const ms = this.ms(c.commitTs);
        updates.push([
          id,
          seenMs(last) > ms
            ? { position: c.position, commitTs: last.commitTs, commitMs: last.commitMs }
            : { position: c.position, commitTs: c.commitTs, commitMs: ms },
        ]);
      }
    }
    for (const [id, s] of updates) {
      keys.delete(id); // re-insert: the Map's order is then the order of last use
      keys.set(id, s);
    }
    while (keys.size > KEYS_REMEMBERED) keys.delete(keys.keys().next().value!);
    return null;
  }
}
