/**
 * The SQL behind a polled table's reconcile stable point (lambda/core/capture/poll-stable-point.ts): the
 * table's highest poll position on the source, the position of the poller's cursor value, and the
 * cursor and the sink's progress from the control plane.
 */
import type pg from 'pg';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError } from '../core/shared/errors.ts';
import { quoteIdent, splitTableId } from '../core/shared/identifiers.ts';
import { checkpointCursorStore, type PollColumnKind } from '../core/capture/poll.ts';
import { positionNumber } from '../core/capture/poll-snapshot.ts';
import { pollKindOf, pollSpaceOfType } from '../core/shared/position-space.ts';
import { pollStablePoint } from '../core/capture/poll-stable-point.ts';
import type { StablePoint } from '../core/reconcile/reconcile.ts';

export interface PgPollStablePointOptions {
  /** A client of the source database. */
  client: Pick<pg.ClientBase, 'query'>;
  controlPlane: Pick<ControlPlane, 'getCheckpoint' | 'putCheckpoint' | 'getSinkProgress'>;
  source: string;
  sink: string;
  table: string;
  pollColumn: string;
}

/** Reads the poll column's type on first use, so a table that cannot be read fails its own verdict (INCONCLUSIVE), not the run. */
export async function pgPollStablePoint(o: PgPollStablePointOptions): Promise<StablePoint> {
  const { schema, table } = splitTableId(o.table);
  const rel = `${quoteIdent(schema)}.${quoteIdent(table)}`;
  let column: Promise<{ type: string; kind: PollColumnKind }> | null = null;
  const typed = () =>
    (column ??= o.client
      .query<{ type: string }>(
        'SELECT format_type(a.atttypid, NULL) AS type FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped',
        [rel, o.pollColumn],
      )
      .then((t) => {
        const type = t.rows[0]?.type ?? null;
        const space = pollSpaceOfType(type);
        if (type === null || space === null)
          throw new CdcError(
            'POLL_TABLE_UNSUPPORTED',
            `${o.table}: poll column ${o.pollColumn} is ${type ?? 'missing'}; a polled table is reconciled by its poll cursor (docs/polling.md)`,
          );
        return { type, kind: pollKindOf(space) };
      }));
  const cursors = checkpointCursorStore(o.controlPlane, o.source);
  return pollStablePoint({
    table: o.table,
    highest: async () => {
      const { kind } = await typed();
      return (
        (await o.client.query<{ h: string | null }>(`SELECT max(${positionNumber(kind, quoteIdent(o.pollColumn))})::text AS h FROM ${rel}`)).rows[0]?.h ?? null
      );
    },
    cursor: () => cursors.get(o.table),
    positionOf: async (value) => {
      const { kind, type } = await typed();
      return (await o.client.query<{ p: string }>(`SELECT ${positionNumber(kind, `$1::text::${type}`)}::text AS p`, [value])).rows[0]!.p;
    },
    applied: async () => (await o.controlPlane.getSinkProgress(o.sink, o.source, o.table))?.appliedPosition ?? null,
  });
}
