/**
 * The normalizer (lambda/core/capture/normalize.ts) over DMS records, with the in-memory control plane
 * (a collaborator double; see its doc) and the real apply plan: exact numbers, masked column
 * types, schema drift seen in DMS records, and ordering of interleaved transactions with the
 * per-key monotonicity check (docs/positions.md).
 *
 * The ordering property simulates PostgreSQL transactions that interleave (row locks make the
 * second writer of a row wait for the first to commit), emits their DMS records in commit order
 * with a `stream-position` whose first part is the commit LSN (the platform's assumption) or the
 * begin LSN (the alternative AWS does not rule out), replays suffixes as a resumed DMS task
 * would, and checks that the last committed value of every row wins, or, when positions are not
 * commit positions, that the normalizer stops loudly with POSITION_REGRESSION. Count
 * `CDC_PROPERTY_RUNS` (default 400 per mode), seed `CDC_PROPERTY_SEED` (default random), both
 * printed.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Normalizer, type ChangeLogWriter, type NormalizerLogger, type NormalizerMetrics } from '../../../lambda/core/capture/normalize.ts';
import type { ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { validateChangeEvent } from '../../../lambda/core/shared/event.ts';
import { TableConfigIndex, type TableConfig, type TableRule } from '../../../lambda/core/tables/table-config.ts';
import { partitionTree, publishPartitionTree, readPublishedPartitionTree, type PartitionTree } from '../../../lambda/core/tables/partitions.ts';
import { planTable } from '../../../lambda/core/sink/apply-plan.ts';
import { maskValue } from '../../../lambda/core/tables/masking.ts';
import { pollRecords } from '../../../lambda/core/capture/poll.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 400);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

const quiet: NormalizerLogger = { debug() {}, info() {}, warn() {}, error() {} };
const noMetrics: NormalizerMetrics = { count() {}, milliseconds() {} };

function setup(tables: TableConfig[], extra: { partitionTree?: () => Promise<PartitionTree | null>; rules?: TableRule[]; now?: () => Date } = {}) {
  const controlPlane = new MemoryControlPlane();
  const published: ChangeEvent[] = [];
  const changeLog: ChangeLogWriter<string> = {
    encode: (e) => JSON.stringify(e),
    async publishEncoded(records) {
      // what every consumer of the change log does: plain JSON.parse, then validation
      for (const r of records) published.push(validateChangeEvent(JSON.parse(r)));
    },
  };
  const normalizer = new Normalizer({
    source: 'shop',
    tables: new TableConfigIndex(tables, extra.rules ?? []),
    controlPlane,
    changeLog,
    metrics: noMetrics,
    logger: quiet,
    ...(extra.partitionTree ? { partitionTree: extra.partitionTree } : {}),
    ...(extra.now ? { now: extra.now } : {}),
  });
  let seq = 0;
  async function run(records: readonly string[], shard = 'shardId-000000000000'): Promise<void> {
    const batch = normalizer.startBatch();
    for (const text of records) await batch.add({ text, origin: `raw/${shard}/${++seq}` });
    await batch.flush();
  }
  return { controlPlane, published, run, normalizer, origin: (shard = 'shardId-000000000000') => `raw/${shard}/${++seq}` };
}

const lsnText = (n: number): string => `00000002/${n.toString(16).toUpperCase().padStart(8, '0')}`;

/** A DMS data record as text (numbers given as literal text so that any digit count can be written). */
function dmsText(op: string, table: string, data: string, o: { lsn: number; rid?: number; commitMs?: number; xid?: number; before?: string }): string {
  const [schema, name] = table.split('.');
  const commit = new Date(Date.UTC(2026, 11, 1) + (o.commitMs ?? o.lsn)).toISOString().replace('Z', '000Z');
  return (
    `{"data":${data},${o.before ? `"before-image":${o.before},` : ''}"metadata":{"timestamp":"${commit}","record-type":"data","operation":"${op}",` +
    `"partition-key-type":"schema-table","schema-name":"${schema}","table-name":"${name}","commit-timestamp":"${commit}",` +
    `"stream-position":"${lsnText(o.lsn)}.1.${lsnText(o.lsn)}","transaction-id":${o.xid ?? 1000 + o.lsn},"transaction-record-id":${o.rid ?? 1}}}`
  );
}

function controlText(operation: string, table: string, columns: Record<string, Record<string, unknown>>, key = ['id']): string {
  const [schema, name] = table.split('.');
  return JSON.stringify({
    control: { 'table-def': { columns, 'primary-key': key } },
    metadata: {
      timestamp: '2026-12-01T00:00:00.000000Z',
      'record-type': 'control',
      operation,
      'partition-key-type': 'task-id',
      'schema-name': schema,
      'table-name': name,
    },
  });
}

describe('normalizer over DMS records: exact numbers', () => {
  it('two keys 9007199254740993 and 9007199254740992 stay two keys, every digit kept, through the change log', async () => {
    const env = setup([{ table: 'public.big', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }]);
    await env.run([
      dmsText('insert', 'public.big', '{"id":9007199254740993,"amount":12.30,"n":7}', { lsn: 0x100 }),
      dmsText('insert', 'public.big', '{"id":9007199254740992,"amount":123456789012345678901234567890.5,"n":8}', { lsn: 0x200 }),
    ]);
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
    expect(env.published.map((e) => e.key)).toEqual([{ id: '9007199254740993' }, { id: '9007199254740992' }]);
    expect(env.published.map((e) => e.after)).toEqual([
      { id: '9007199254740993', amount: '12.30', n: 7 },
      { id: '9007199254740992', amount: '123456789012345678901234567890.5', n: 8 },
    ]);
    const plan = planTable({ events: env.published, keyColumns: ['id'], stored: new Map() });
    expect(plan.writes).toHaveLength(2);
  });
});

describe('normalizer over DMS records: masked columns', () => {
  it('registers a masked column as text on the DMS path, from data records and from a table definition typed INT32', async () => {
    const env = setup([
      { table: 'public.people', key: ['id'], deleteMode: 'soft', mask: ['pin', 'born'], exclude: [] },
      { table: 'public.staff', key: ['id'], deleteMode: 'soft', mask: ['pin'], exclude: [] },
    ]);
    await env.run([
      // DMS masks with its hash mask rule: the value arrives as the 64-character hash
      dmsText('insert', 'public.people', `{"id":1,"pin":"${maskValue('1234')}","born":"${maskValue('1980-05-17')}"}`, { lsn: 0x100 }),
      controlText('create-table', 'public.staff', { id: { type: 'INT32', nullable: false }, pin: { type: 'INT32', nullable: true } }),
    ]);
    const people = await env.controlPlane.listSchemaVersions('shop', 'public.people');
    expect(people[0]!.columns.map((c) => [c.name, c.type])).toEqual([
      ['id', null],
      ['pin', 'text'],
      ['born', 'text'],
    ]);
    const staff = await env.controlPlane.listSchemaVersions('shop', 'public.staff');
    expect(staff[0]!.columns.map((c) => [c.name, c.type])).toEqual([
      ['id', 'INT32'],
      ['pin', 'text'],
    ]);
  });
});

describe('normalizer over DMS records: excluded columns', () => {
  it('drops an excluded column a DMS record still carries, from the event and from the registry', async () => {
    const env = setup([{ table: 'public.people', key: ['id'], deleteMode: 'soft', mask: ['pin'], exclude: ['ssn'] }]);
    await env.run([dmsText('insert', 'public.people', `{"id":1,"pin":"${maskValue('1234')}","ssn":"123-45-6789"}`, { lsn: 0x100 })]);
    expect(env.published[0]!.after).toEqual({ id: 1, pin: maskValue('1234') }); // masked once, not twice
    expect(JSON.stringify(env.published)).not.toContain('123-45-6789');
    expect((await env.controlPlane.listSchemaVersions('shop', 'public.people'))[0]!.columns.map((c) => c.name)).toEqual(['id', 'pin']);
  });
});

describe('normalizer over DMS records: schema drift', () => {
  const TABLES: TableConfig[] = [{ table: 'public.t', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }];

  it('a rename seen in data (a column disappears as a new one appears) pauses the table instead of adding a nullable column', async () => {
    const env = setup(TABLES);
    await env.run([dmsText('insert', 'public.t', '{"id":1,"name":"a","qty":1}', { lsn: 0x100 })]);
    await env.run([dmsText('update', 'public.t', '{"id":1,"full_name":"a","qty":2}', { lsn: 0x200 })]);
    const table = await env.controlPlane.getTable('shop', 'public.t');
    expect(table!.state).toBe('paused');
    expect(table!.stateReason).toMatch(/column name was dropped or renamed \(to full_name\?\)/);
    // its events still enter the log (the sinks hold them)
    expect(env.published).toHaveLength(2);
  });

  it('a new column in a record that carries every registered column is compatible', async () => {
    const env = setup(TABLES);
    await env.run([
      dmsText('insert', 'public.t', '{"id":1,"name":"a"}', { lsn: 0x100 }),
      dmsText('insert', 'public.t', '{"id":2,"name":"b","note":null}', { lsn: 0x200 }),
    ]);
    expect((await env.controlPlane.getTable('shop', 'public.t'))!.state).toBe('active');
    expect((await env.controlPlane.listSchemaVersions('shop', 'public.t')).at(-1)!.columns.map((c) => c.name)).toEqual(['id', 'name', 'note']);
  });

  it('lengths and precision from a DMS table definition are seen: narrowing is breaking, widening compatible', async () => {
    const env = setup(TABLES);
    const def = (len: number, p: number) => ({
      id: { type: 'INT32', nullable: false },
      name: { type: 'WSTRING', length: len, nullable: true },
      amount: { type: 'NUMERIC', precision: p, scale: 2, nullable: true },
    });
    await env.run([controlText('create-table', 'public.t', def(20, 10))]);
    expect((await env.controlPlane.listSchemaVersions('shop', 'public.t'))[0]!.columns.map((c) => c.type)).toEqual(['INT32', 'WSTRING(20)', 'NUMERIC(10,2)']);
    await env.run([controlText('column-type-change', 'public.t', def(30, 12))]);
    expect((await env.controlPlane.getTable('shop', 'public.t'))!.state).toBe('active');
    await env.run([controlText('column-type-change', 'public.t', def(10, 12))]);
    const t = await env.controlPlane.getTable('shop', 'public.t');
    expect(t!.state).toBe('paused');
    expect(t!.stateReason).toMatch(/column name changed type from WSTRING\(30\) to WSTRING\(10\)/);
  });
});

interface Tx {
  xid: number;
  beginLsn: number;
  commitLsn: number | null;
  commitMs: number;
  changes: { lsn: number; id: number; v: string }[];
}

/** Random interleaved transactions over a few rows, as PostgreSQL would allow them (row locks), in commit order. */
function schedule(actions: readonly number[], keys: number): Tx[] {
  let lsn = 0x1000;
  let xid = 700;
  const open: Tx[] = [];
  const committed: Tx[] = [];
  const lockedBy = new Map<number, Tx>();
  for (const a of actions) {
    lsn += 0x10;
    const kind = a % 3;
    if (kind === 0 || open.length === 0) {
      open.push({ xid: ++xid, beginLsn: lsn, commitLsn: null, commitMs: 0, changes: [] });
    } else if (kind === 1) {
      const tx = open[Math.floor(a / 3) % open.length]!;
      const id = 1 + (Math.floor(a / 7) % keys);
      const holder = lockedBy.get(id);
      if (holder && holder !== tx) continue; // would wait for the holder's commit
      lockedBy.set(id, tx);
      tx.changes.push({ lsn, id, v: `x${tx.xid}-${lsn}` });
    } else {
      const tx = open.splice(Math.floor(a / 3) % open.length, 1)[0]!;
      tx.commitLsn = lsn;
      tx.commitMs = committed.length + 1;
      for (const [id, holder] of lockedBy) if (holder === tx) lockedBy.delete(id);
      committed.push(tx);
    }
  }
  for (const tx of open) {
    lsn += 0x10;
    tx.commitLsn = lsn;
    tx.commitMs = committed.length + 1;
    committed.push(tx);
  }
  return committed.filter((t) => t.changes.length > 0);
}

function recordsOf(txs: readonly Tx[], mode: 'commit' | 'begin', seen: Set<number>): string[] {
  const out: string[] = [];
  for (const tx of txs) {
    tx.changes.forEach((c, i) => {
      const op = seen.has(c.id) ? 'update' : 'insert';
      seen.add(c.id);
      out.push(
        dmsText(op, 'public.acct', `{"id":${c.id},"v":"${c.v}"}`, {
          lsn: mode === 'commit' ? tx.commitLsn! : tx.beginLsn,
          rid: i + 1,
          commitMs: tx.commitMs * 1000,
          xid: tx.xid,
        }),
      );
    });
  }
  return out;
}

/** The last committed value of every row. */
function expected(txs: readonly Tx[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const tx of txs) for (const c of tx.changes) out.set(String(c.id), c.v);
  return out;
}

describe('normalizer over DMS records: ordering of interleaved transactions', () => {
  const TABLES: TableConfig[] = [{ table: 'public.acct', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }];

  it('a later-committed update of a row wins although its transaction began first', async () => {
    // T1 (xid 1) begins at 0x100 and touches row 2; T2 (xid 2) updates row 1 and commits at 0x200;
    // then T1 updates row 1 (after T2's lock is gone) and commits at 0x300.
    const env = setup(TABLES);
    await env.run([
      dmsText('insert', 'public.acct', '{"id":1,"v":"initial"}', { lsn: 0x80, commitMs: 0 }),
      dmsText('update', 'public.acct', '{"id":1,"v":"T2"}', { lsn: 0x200, rid: 1, commitMs: 2000, xid: 2 }),
      dmsText('insert', 'public.acct', '{"id":2,"v":"T1"}', { lsn: 0x300, rid: 1, commitMs: 3000, xid: 1 }),
      dmsText('update', 'public.acct', '{"id":1,"v":"T1"}', { lsn: 0x300, rid: 2, commitMs: 3000, xid: 1 }),
    ]);
    const plan = planTable({ events: [...env.published].reverse(), keyColumns: ['id'], stored: new Map() });
    expect(Object.fromEntries(plan.writes.map((w) => [w.key.id, w.values.v]))).toEqual({ 1: 'T1', 2: 'T1' });
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
  });

  it('a position that goes backwards for a key although it committed later is POSITION_REGRESSION: dead-lettered, table marked for re-snapshot', async () => {
    // the same history with the BEGIN position of T1 in stream-position (what a non-commit LSN would give)
    const env = setup(TABLES);
    await env.run([
      dmsText('insert', 'public.acct', '{"id":1,"v":"initial"}', { lsn: 0x80, commitMs: 0 }),
      dmsText('update', 'public.acct', '{"id":1,"v":"T2"}', { lsn: 0x150, rid: 1, commitMs: 2000, xid: 2 }),
      dmsText('update', 'public.acct', '{"id":1,"v":"T1"}', { lsn: 0x100, rid: 2, commitMs: 3000, xid: 1 }),
    ]);
    const letters = await env.controlPlane.listDeadLetters();
    expect(letters).toHaveLength(1);
    expect(letters[0]!.code).toBe('POSITION_REGRESSION');
    expect(letters[0]!.reason).toMatch(/^position 000000027?0*100\d* of public\.acct key .* on raw\/shardId-000000000000 is lower than position /);
    expect(letters[0]!.record).toContain('"v":"T1"');
    const t = await env.controlPlane.getTable('shop', 'public.acct');
    expect(t!.state).toBe('needs-resnapshot');
    expect(t!.stateReason).toMatch(/^POSITION_REGRESSION: /);
    expect((await env.controlPlane.listAudit('shop', 'public.acct')).map((a) => a.action)).toContain('needs-resnapshot');
  });

  it('a replay (a resumed DMS task sends older records again) and duplicates are not regressions', async () => {
    const env = setup(TABLES);
    const recs = [
      dmsText('insert', 'public.acct', '{"id":1,"v":"a"}', { lsn: 0x100, commitMs: 1000 }),
      dmsText('update', 'public.acct', '{"id":1,"v":"b"}', { lsn: 0x200, commitMs: 2000 }),
      dmsText('update', 'public.acct', '{"id":1,"v":"c"}', { lsn: 0x300, commitMs: 3000 }),
    ];
    await env.run(recs);
    await env.run([recs[1]!, recs[1]!, recs[2]!]);
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
    expect((await env.controlPlane.getTable('shop', 'public.acct'))!.state).toBe('active');
    // the source's clock stepped back between two commits: a replay of the older one is still a replay
    await env.run([
      dmsText('update', 'public.acct', '{"id":2,"v":"p"}', { lsn: 0x400, commitMs: 9000 }),
      dmsText('update', 'public.acct', '{"id":2,"v":"q"}', { lsn: 0x500, commitMs: 7000 }),
    ]);
    await env.run([dmsText('update', 'public.acct', '{"id":2,"v":"p"}', { lsn: 0x400, commitMs: 9000 })]);
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
    // positions are per shard: the same key on another shard is tracked apart
    await env.run([recs[0]!], 'shardId-000000000001');
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
  });

  it(`random interleavings: the last committed value wins with commit positions, and a begin position is caught, never silent (${RUNS} runs per mode)`, async () => {
    console.log(`dms ordering property: ${RUNS} schedules per mode, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    let caught = 0;
    let silentWrong = 0;
    for (const mode of ['commit', 'begin'] as const) {
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.nat({ max: 10_000 }), { minLength: 8, maxLength: 60 }),
          fc.integer({ min: 1, max: 2 }),
          fc.option(fc.nat(), { nil: null }),
          async (actions, keys, replayFrom) => {
            const txs = schedule(actions, keys);
            if (txs.length === 0) return;
            const env = setup(TABLES);
            const records = recordsOf(txs, mode, new Set());
            await env.run(records);
            // a resumed task re-sends a suffix
            if (replayFrom !== null) await env.run(records.slice(replayFrom % records.length));
            const letters = await env.controlPlane.listDeadLetters();
            const plan = planTable({ events: env.published, keyColumns: ['id'], stored: new Map() });
            const got = new Map(plan.writes.map((w) => [String(w.key.id), w.values.v]));
            const right = JSON.stringify([...got].sort()) === JSON.stringify([...expected(txs)].sort());
            if (mode === 'commit') {
              expect(letters).toEqual([]);
              expect(right).toBe(true);
            } else {
              if (letters.length > 0) {
                caught++;
                expect(letters.every((l) => l.code === 'POSITION_REGRESSION')).toBe(true);
                expect((await env.controlPlane.getTable('shop', 'public.acct'))!.state).toBe('needs-resnapshot');
              } else if (!right) silentWrong++;
            }
          },
        ),
        { numRuns: RUNS, seed: SEED },
      );
    }
    console.log(`dms ordering property: begin positions caught as POSITION_REGRESSION in ${caught} of ${RUNS} schedules, silently wrong in ${silentWrong}`);
    expect(silentWrong).toBe(0);
    if (RUNS >= 100) expect(caught).toBeGreaterThan(0);
  });
});

describe('position spaces in the normalizer (docs/architecture.md §5.2)', () => {
  const SPACED: TableConfig[] = [
    { table: 'public.t', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] },
    { table: 'public.stamped', capture: 'poll', pollColumn: 'updated_at', deleteMode: 'soft', mask: [], exclude: [] },
  ];
  const stampedShape = {
    table: 'public.stamped',
    columns: [
      { name: 'id', type: 'integer', typeOid: 23 },
      { name: 'updated_at', type: 'timestamp with time zone', typeOid: 1184 },
    ],
    key: ['id'],
  };
  const polled = (id: number, micros: bigint) =>
    JSON.stringify(
      pollRecords(
        'shop',
        stampedShape,
        { rows: [[String(id), new Date(Number(micros / 1000n)).toISOString(), String(micros), new Date(Number(micros / 1000n)).toISOString()]] },
        { mask: [], exclude: [] },
      )[0],
    );

  it("a DMS control record without a position takes effect at the highest LOG position, never a polled row's; one for a polled table is refused by name", async () => {
    const env = setup(SPACED);
    await env.run([dmsText('insert', 'public.t', '{"id":1,"name":"a"}', { lsn: 0x100 })]);
    const logPosition = env.published[0]!.position;
    // A timestamp-polled row: its position (epoch microseconds) is far above every log position of the source.
    await env.run([polled(1, 1_764_547_201_000_000n)]);
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
    expect(env.published[1]!.position > logPosition).toBe(true);
    expect((await env.controlPlane.getTable('shop', 'public.stamped'))!.positionSpace).toBe('poll-timestamp');
    expect((await env.controlPlane.getTable('shop', 'public.t'))!.positionSpace).toBe('wal');
    await env.run([
      controlText('add-column', 'public.t', {
        id: { type: 'INT32', nullable: false },
        name: { type: 'STRING', nullable: true },
        note: { type: 'STRING', nullable: true },
      }),
    ]);
    const versions = await env.controlPlane.listSchemaVersions('shop', 'public.t');
    expect(versions.map((v) => v.effectivePosition)).toEqual([logPosition, logPosition]);
    // DMS never reads a polled table: a control record for one would mix the spaces.
    await env.run([
      controlText('add-column', 'public.stamped', {
        id: { type: 'INT32', nullable: false },
        updated_at: { type: 'DATETIME', nullable: false },
        note: { type: 'STRING', nullable: true },
      }),
    ]);
    const letters = await env.controlPlane.listDeadLetters();
    expect(letters.map((l) => l.code)).toEqual(['POSITION_SPACE_MISMATCH']);
    expect(letters[0]!.reason).toMatch(
      /control record of shop\/public\.stamped without a position: positions of space wal cannot be compared with or mixed into space poll-timestamp/,
    );
    expect(await env.controlPlane.listSchemaVersions('shop', 'public.stamped')).toHaveLength(1);
  });
});

describe('normalizer over DMS records of a partitioned table (docs/partitioned-tables.md)', () => {
  it("with the published partition tree, every partition's records become one table named after the root; a partition created later joins", async () => {
    const rules: TableRule[] = [{ match: 'public.*', excludeTables: [], key: ['id', 'at'], deleteMode: 'soft', mask: [], exclude: [] }];
    const tree = partitionTree(
      [
        { partition: 'public.ev_2024_01', root: 'public.ev', leaf: true },
        { partition: 'public.ev_2024_02', root: 'public.ev', leaf: true },
      ],
      ['public.ev'],
    );
    let reads = 0;
    let published = tree;
    const env = setup([], {
      rules,
      partitionTree: async () => {
        reads++;
        return published;
      },
    });
    // Stored and read back the way the snapshot worker and the normalizer pass it on AWS.
    expect(await publishPartitionTree(env.controlPlane, 'shop', tree)).toBe(true);
    expect(await publishPartitionTree(env.controlPlane, 'shop', tree)).toBe(false);
    expect((await readPublishedPartitionTree(env.controlPlane, 'shop'))!.rootOf).toEqual(tree.rootOf);
    await env.run([
      dmsText('insert', 'public.ev_2024_01', '{"id":1,"at":"2024-01-02 00:00:00+00","v":"a"}', { lsn: 0x100 }),
      dmsText('insert', 'public.ev_2024_02', '{"id":2,"at":"2024-02-02 00:00:00+00","v":"b"}', { lsn: 0x200 }),
      // A move: out of one partition, into another, one transaction.
      dmsText('delete', 'public.ev_2024_01', '{"id":1,"at":"2024-01-02 00:00:00+00","v":null}', { lsn: 0x300, rid: 1, xid: 77 }),
      dmsText('insert', 'public.ev_2024_02', '{"id":1,"at":"2024-02-09 00:00:00+00","v":"moved"}', { lsn: 0x300, rid: 2, xid: 77 }),
    ]);
    // A partition created while running: the tree is read again when a record names it.
    published = partitionTree(
      [...tree.rootOf]
        .map(([partition, root]) => ({ partition, root, leaf: true }))
        .concat([{ partition: 'public.ev_2024_03', root: 'public.ev', leaf: true }]),
      ['public.ev'],
    );
    await new Promise((r) => setTimeout(r, 2_100));
    await env.run([dmsText('insert', 'public.ev_2024_03', '{"id":3,"at":"2024-03-02 00:00:00+00","v":"c"}', { lsn: 0x400 })]);
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
    expect(new Set(env.published.map((e) => e.table))).toEqual(new Set(['public.ev']));
    expect((await env.controlPlane.listTables('shop')).map((t) => t.table)).toEqual(['public.ev']);
    expect(env.published.map((e) => [e.op, e.key])).toEqual([
      ['insert', { id: 1, at: '2024-01-02 00:00:00+00' }],
      ['insert', { id: 2, at: '2024-02-02 00:00:00+00' }],
      ['delete', { id: 1, at: '2024-01-02 00:00:00+00' }],
      ['insert', { id: 1, at: '2024-02-09 00:00:00+00' }],
      ['insert', { id: 3, at: '2024-03-02 00:00:00+00' }],
    ]);
    expect(reads).toBe(2);
  });

  it('a partition created while one batch runs joins its root from the tree read again within that batch', async () => {
    const rules: TableRule[] = [{ match: 'public.*', excludeTables: [], key: ['id', 'at'], deleteMode: 'soft', mask: [], exclude: [] }];
    const edges = [{ partition: 'public.ev_2024_01', root: 'public.ev', leaf: true }];
    let published = partitionTree(edges, ['public.ev']);
    let reads = 0;
    let clock = Date.parse('2026-12-07T12:00:00Z');
    const env = setup([], {
      rules,
      now: () => new Date(clock),
      partitionTree: async () => {
        reads++;
        return published;
      },
    });
    const batch = env.normalizer.startBatch();
    await batch.add({ text: dmsText('insert', 'public.ev_2024_01', '{"id":1,"at":"2024-01-02 00:00:00+00","v":"a"}', { lsn: 0x100 }), origin: env.origin() });
    // The capture publishes the new partition before its records; the batch reads the tree again once its last reading is 2 s old.
    published = partitionTree([...edges, { partition: 'public.ev_2024_03', root: 'public.ev', leaf: true }], ['public.ev']);
    clock += 2_100;
    await batch.add({ text: dmsText('insert', 'public.ev_2024_03', '{"id":3,"at":"2024-03-02 00:00:00+00","v":"c"}', { lsn: 0x200 }), origin: env.origin() });
    await batch.flush();
    expect(reads).toBe(2);
    expect(await env.controlPlane.listDeadLetters()).toEqual([]);
    expect(env.published.map((e) => [e.table, e.key])).toEqual([
      ['public.ev', { id: 1, at: '2024-01-02 00:00:00+00' }],
      ['public.ev', { id: 3, at: '2024-03-02 00:00:00+00' }],
    ]);
  });
});
