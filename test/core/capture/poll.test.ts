/**
 * The polling core (lambda/core/capture/poll.ts, docs/polling.md): the page query, poll-column checks,
 * positions from the poll column, the raw records (`capture: "poll"`, masked like every path) and
 * their decoding, and one pass over ports: cursor stored only after the page is published, pages
 * sized by the pacer, a crash before the cursor moves reads the page again.
 */
import { describe, expect, it } from 'vitest';
import { pollSpaceOfType, PositionSpaceMismatchError, type PositionSpace } from '../../../lambda/core/shared/position-space.ts';
import { horizonBound, pollWatermark } from '../../../lambda/core/capture/poll-snapshot.ts';
import { snapshotPosition, type SnapshotTableShape } from '../../../lambda/core/snapshot/snapshot.ts';
import {
  POLL_VERSION_REFUSED,
  pollColumnKindOf,
  pollCursorAfter,
  pollPass,
  pollPosition,
  pollQuery,
  pollRecords,
  PollTableError,
  type PollCursor,
  type PollPage,
} from '../../../lambda/core/capture/poll.ts';
import { decodeSlotRecord } from '../../../lambda/core/capture/slot-decoder.ts';
import { validateSlotRecord } from '../../../lambda/core/capture/slot-record.ts';
import { maskValue } from '../../../lambda/core/tables/masking.ts';
import { FixedPacer } from '../../../lambda/core/snapshot/snapshot-pacer.ts';

const shape: SnapshotTableShape = {
  table: 'public.acct',
  columns: [
    { name: 'id', type: 'integer', typeOid: 23 },
    { name: 'email', type: 'text', typeOid: 25 },
    { name: 'updated_at', type: 'timestamp with time zone', typeOid: 1184 },
  ],
  key: ['id'],
};

describe('poll query and records', () => {
  it('reads after the cursor in (poll column, key) order, below the horizon, without NULL poll values', () => {
    const h = '2026-01-02 00:00:00.000001+00';
    expect(pollQuery(shape, 'updated_at', null, 10, h)).toEqual({
      text: `SELECT "id", "email", "updated_at", floor(extract(epoch FROM "updated_at") * 1000000)::bigint::text AS "?cdc_poll_position", to_char("updated_at" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS "?cdc_poll_time" FROM "public"."acct" WHERE "updated_at" IS NOT NULL AND "updated_at" < $1::timestamptz ORDER BY "updated_at", "id" LIMIT 10`,
      values: [h],
    });
    const q = pollQuery(shape, 'updated_at', ['2026-01-01 00:00:00+00', '7'], 5, h);
    expect(q.text).toContain(
      'WHERE "updated_at" IS NOT NULL AND "updated_at" < $1::timestamptz AND ("updated_at", "id") > ($2, $3) ORDER BY "updated_at", "id" LIMIT 5',
    );
    expect(q.values).toEqual([h, '2026-01-01 00:00:00+00', '7']);
    // A timestamp without time zone is compared as UTC wall-clock time.
    const local = { ...shape, columns: shape.columns.map((c) => (c.name === 'updated_at' ? { ...c, type: 'timestamp without time zone', typeOid: 1114 } : c)) };
    expect(pollQuery(local, 'updated_at', null, 1, h).text).toContain(`"updated_at" < ($1::timestamptz AT TIME ZONE 'UTC')`);
    // Without its horizon a timestamp page is not built.
    expect(() => pollQuery(shape, 'updated_at', null, 10)).toThrow(/needs its horizon/);
  });
  it("reads a transaction-id column below its own snapshot's xmin, at the xmin as position", () => {
    const xs: SnapshotTableShape = { ...shape, columns: [...shape.columns, { name: 'cdc_xid', type: 'xid8', typeOid: 5069 }] };
    const q = pollQuery(xs, 'cdc_xid', ['812', '7'], 5);
    expect(q.text).toContain(`pg_snapshot_xmin(pg_current_snapshot())::text AS "?cdc_poll_position"`);
    expect(q.text).toContain(`to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS "?cdc_poll_time"`);
    expect(q.text).toContain(
      'WHERE "cdc_xid" IS NOT NULL AND "cdc_xid" < pg_snapshot_xmin(pg_current_snapshot()) AND ("cdc_xid", "id") > ($1, $2) ORDER BY "cdc_xid", "id" LIMIT 5',
    );
    expect(q.values).toEqual(['812', '7']);
  });
  it('refuses a poll column that is missing or cannot order without a gap', () => {
    expect(() => pollQuery(shape, 'nope', null, 1)).toThrow(PollTableError);
    expect(() => pollQuery(shape, 'email', null, 1)).toThrow(
      /poll column email is text; a modified-at column must be a timestamp or timestamptz, a transaction-id column xid8/,
    );
    // An integer version is refused, naming the safe alternatives.
    for (const type of ['smallint', 'integer', 'bigint']) {
      expect(() => pollColumnKindOf('public.acct', 'v', type)).toThrow(PollTableError);
      expect(() => pollColumnKindOf('public.acct', 'v', type)).toThrow(`public.acct: poll column v is ${type}: ${POLL_VERSION_REFUSED}`);
    }
    expect(POLL_VERSION_REFUSED).toMatch(/clock_timestamp\(\).*xid8.*pg_current_xact_id\(\).*from the log/);
    expect(pollColumnKindOf('t', 'c', 'timestamp with time zone')).toBe('timestamp');
    expect(pollColumnKindOf('t', 'c', 'timestamp without time zone')).toBe('timestamp');
    expect(pollColumnKindOf('t', 'c', 'xid8')).toBe('xid');
    expect(() => pollQuery({ ...shape, key: [] }, 'updated_at', null, 1)).toThrow(/no primary key/);
    expect(() => pollPosition('-5', 'public.acct')).toThrow(/negative/);
  });
  it('builds masked capture "poll" records whose position is the poll column, decoded as updates without a transaction', () => {
    const rows = [['1', 'a@x', '2026-01-01 00:00:00.5+00', '1767225600500000', '2026-01-01T00:00:00.500000Z']];
    const [r] = pollRecords('shop', shape, { rows }, { mask: ['email'], exclude: [] });
    expect(r!.capture).toBe('poll');
    expect(r!.op).toBe('update');
    expect(r!.columns!.find((c) => c.name === 'email')).toEqual({ name: 'email', type: 'text', value: maskValue('a@x') });
    const decoded = decodeSlotRecord(JSON.parse(JSON.stringify(r)));
    if (decoded.kind !== 'changes') throw new Error('not changes');
    const c = decoded.changes[0]!;
    expect(c).toMatchObject({
      op: 'update',
      capture: 'poll',
      txId: null,
      before: null,
      commitTs: '2026-01-01T00:00:00.500000Z',
      position: pollPosition('1767225600500000', 'x'),
    });
    expect(pollCursorAfter(shape, 'updated_at', { rows }, null)).toEqual(['2026-01-01 00:00:00.5+00', '1']);
    expect(() => validateSlotRecord({ ...r, capture: 'dms' })).toThrow(/capture/);
    expect(() => validateSlotRecord({ ...r, op: 'insert' })).toThrow(/a polled row is an update/);
  });
});

describe('one poll pass', () => {
  function table(n: number): (string | null)[][] {
    return Array.from({ length: n }, (_, i) => [
      String(i + 1),
      `e${i}`,
      `2026-01-01 00:00:${String(i).padStart(2, '0')}+00`,
      String(1767225600000000 + i * 1000000),
      '2026-01-01T00:00:00.000000Z',
    ]);
  }
  function reader(rows: (string | null)[][], reads: Array<PollCursor | null>) {
    return {
      describe: async () => shape,
      readPollPage: async (_s: SnapshotTableShape, _c: string, cursor: PollCursor | null, limit: number): Promise<PollPage> => {
        reads.push(cursor);
        const from = cursor === null ? 0 : rows.findIndex((r) => r[0] === cursor[1]) + 1;
        return { rows: rows.slice(from, from + limit), readMs: 1 };
      },
    };
  }
  it('pages by the pacer, publishes before it stores each cursor, and resumes from the stored cursor', async () => {
    const stored = new Map<string, PollCursor>();
    const published: string[] = [];
    const reads: Array<PollCursor | null> = [];
    let failOn = 2;
    const o = {
      source: 'shop',
      tables: [{ table: 'public.acct', pollColumn: 'updated_at', rules: { mask: [], exclude: [] } }],
      reader: reader(table(7), reads),
      cursors: { get: async (t: string) => stored.get(t) ?? null, put: async (t: string, c: PollCursor) => void stored.set(t, c) },
      publish: async (records: { columns: { value: unknown }[] | null }[]) => {
        if (--failOn === 0) throw new Error('stream down');
        published.push(...records.map((r) => String(r.columns![0]!.value)));
      },
      pacerFor: () => new FixedPacer(3),
    };
    await expect(pollPass(o)).rejects.toThrow('stream down');
    expect(stored.get('public.acct')).toEqual(['2026-01-01 00:00:02+00', '3']); // the failed page's cursor never moved
    expect(await pollPass(o)).toEqual(new Map([['public.acct', 4]]));
    expect(published).toEqual(['1', '2', '3', '4', '5', '6', '7']);
    expect(reads.at(-2)).toEqual(['2026-01-01 00:00:02+00', '3']);
    expect(stored.get('public.acct')).toEqual(['2026-01-01 00:00:06+00', '7']);
  });

  it('reads a table only in the position space recorded for it (docs/architecture.md §5.2)', async () => {
    const reads: Array<PollCursor | null> = [];
    const o = (recorded: PositionSpace | null) => ({
      source: 'shop',
      tables: [{ table: 'public.acct', pollColumn: 'updated_at', rules: { mask: [], exclude: [] } }],
      reader: reader(table(2), reads),
      cursors: { get: async () => null, put: async () => undefined },
      publish: async () => undefined,
      pacerFor: () => new FixedPacer(3),
      spaceOf: async () => recorded,
    });
    expect(await pollPass(o('poll-timestamp'))).toEqual(new Map([['public.acct', 2]]));
    expect(await pollPass(o(null))).toEqual(new Map([['public.acct', 2]])); // not registered yet
    expect(reads).toHaveLength(2);
    // Registered log-captured (its sinks hold log positions), or by a transaction-id column: refused before any read.
    await expect(pollPass(o('wal'))).rejects.toThrow(
      /POSITION_SPACE_MISMATCH|positions of space poll-timestamp cannot be compared with or mixed into space wal/,
    );
    await expect(pollPass(o('poll-xid'))).rejects.toBeInstanceOf(PositionSpaceMismatchError);
    expect(reads).toHaveLength(2);
  });

  it("a polled table's re-snapshot bound: the microsecond below the horizon, none while a prepared transaction holds it; rows at (H, ffffffff) (docs/polling.md)", () => {
    expect(horizonBound('public.acct', '2026-01-01 00:00:00+00', '1767225600000000')).toBe('1767225599999999');
    expect(() => horizonBound('public.acct', '-infinity', null)).toThrow(/POLL_HORIZON_HELD|prepared transaction/);
    expect(snapshotPosition(pollWatermark('1767225599999999'))).toBe(`${1767225599999999n.toString(16).padStart(16, '0')}ffffffff`);
    expect(() => pollWatermark('-1')).toThrow(/negative/);
    // The spaces of the two accepted kinds; an integer type has none (refused).
    expect([pollSpaceOfType('xid8'), pollSpaceOfType('timestamp with time zone'), pollSpaceOfType('bigint')]).toEqual(['poll-xid', 'poll-timestamp', null]);
  });
});
