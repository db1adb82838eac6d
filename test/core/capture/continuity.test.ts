/**
 * Continuity decisions (lambda/core/capture/continuity.ts): identity, slot resume, the heartbeat sequence
 * (with a randomized property over delivery histories with replays and at most one fault), and the
 * normalizer's gap check on DMS heartbeat records: a missed beat, a regressed beat and a changed
 * system identifier each mark the source's log-captured tables needs-resnapshot with an audit
 * entry, a metric and a named error in the log; polled tables stay active (their own position space).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  checkBeatSequence,
  identityProblem,
  markSourceForResnapshot,
  parseIdentity,
  slotResume,
  formatIdentity,
  type Beat,
} from '../../../lambda/core/capture/continuity.ts';
import { pollRecords } from '../../../lambda/core/capture/poll.ts';
import { Normalizer, type NormalizerLogger } from '../../../lambda/core/capture/normalize.ts';
import { TableConfigIndex, type TableConfig } from '../../../lambda/core/tables/table-config.ts';
import type { ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { compareLsn } from '../../../local/slot.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 500);

describe('identity and slot resume', () => {
  it('tells another cluster and another timeline apart, and round-trips its text form', () => {
    const a = { systemIdentifier: '7312345678901234567', timeline: 1 };
    expect(identityProblem(a, { ...a })).toBeNull();
    expect(identityProblem(a, { ...a, systemIdentifier: '7399999999999999999' })?.problem).toBe('identity-changed');
    expect(identityProblem(a, { ...a, timeline: 2 })?.problem).toBe('timeline-changed');
    expect(parseIdentity(formatIdentity(a), 'x')).toEqual(a);
    expect(() => parseIdentity('7312/x', 'control/identity')).toThrow(/control\/identity: expected '<system identifier>\/<timeline>'/);
  });

  it('resumes at the checkpoint, advances only from exactly where the slot was acked, stops otherwise', () => {
    expect(slotResume('0/300', '0/300', '0/200', compareLsn)).toEqual({ action: 'resume' });
    expect(slotResume('0/200', '0/300', '0/200', compareLsn)).toEqual({ action: 'advance', to: '0/300' });
    expect(slotResume('0/100', '0/300', '0/200', compareLsn)).toMatchObject({ action: 'stop', problem: 'slot-restored' });
    expect(slotResume('0/200', '0/300', null, compareLsn)).toMatchObject({ action: 'stop', problem: 'slot-restored' });
    expect(slotResume('0/400', '0/300', '0/300', compareLsn)).toMatchObject({ action: 'stop', problem: 'slot-ahead' });
  });
});

describe('heartbeat sequence', () => {
  const at = (s: number): string => new Date(Date.UTC(2026, 11, 1) + s * 10_000).toISOString();
  it('accepts the next beat and replays, flags a skip and a rewind', () => {
    expect(checkBeatSequence(null, { seq: 5, beatAt: at(5) })).toEqual({ ok: true, advance: true });
    expect(checkBeatSequence({ seq: 5, beatAt: at(5) }, { seq: 6, beatAt: at(6) })).toEqual({ ok: true, advance: true });
    expect(checkBeatSequence({ seq: 6, beatAt: at(6) }, { seq: 4, beatAt: at(4) })).toEqual({ ok: true, advance: false });
    expect(checkBeatSequence({ seq: 6, beatAt: at(6) }, { seq: 9, beatAt: at(9) })).toMatchObject({
      ok: false,
      problem: 'heartbeat-missed',
      message: expect.stringMatching(/heartbeats 7…8 never arrived/),
    });
    expect(checkBeatSequence({ seq: 6, beatAt: at(6) }, { seq: 3, beatAt: at(20) })).toMatchObject({ ok: false, problem: 'heartbeat-regressed' });
    expect(checkBeatSequence({ seq: 6, beatAt: at(6) }, { seq: 0, beatAt: at(20) })).toMatchObject({ ok: false });
  });

  it(`property: over ${RUNS} delivery histories with replays, a fault is flagged exactly when one was injected (seed ${SEED})`, () => {
    console.log(`property: ${RUNS} heartbeat histories, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 40 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 39 }), fc.integer({ min: 1, max: 5 })), { maxLength: 6 }),
        fc.constantFrom('none', 'skip', 'rewind'),
        fc.integer({ min: 1, max: 39 }),
        (beats, replays, fault, where) => {
          // The source writes beats 1..n; a restore rewinds the counter but the clock moves on.
          const written: Beat[] = [];
          let seq = 0;
          for (let i = 0; i < beats; i++) {
            if (fault === 'rewind' && i === where % beats && seq > 1) seq = Math.max(0, seq - 2);
            seq++;
            written.push({ seq, beatAt: at(i) });
          }
          // Delivery: in order, some lost if skipping, with replays of earlier stretches (at least once).
          let delivered = written.slice();
          if (fault === 'skip' && beats > 2) delivered = written.filter((_, i) => i !== 1 + (where % (beats - 2)));
          const stream: Beat[] = [];
          delivered.forEach((b, i) => {
            stream.push(b);
            for (const [from, len] of replays) if (from === i) stream.push(...delivered.slice(Math.max(0, i - len), i + 1));
          });
          let last: Beat | null = null;
          let flagged = false;
          for (const b of stream) {
            const v = checkBeatSequence(last, b);
            if (!v.ok) {
              flagged = true;
              last = b;
            } else if (v.advance) last = b;
          }
          const injected = (fault === 'skip' && beats > 2) || (fault === 'rewind' && written.some((b, i) => i > 0 && b.seq <= written[i - 1]!.seq));
          expect(flagged).toBe(injected);
        },
      ),
      { numRuns: RUNS, seed: SEED },
    );
  });
});

describe("the normalizer's gap check on DMS heartbeats", () => {
  const LOGGED: TableConfig[] = [
    { table: 'public.orders', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] },
    { table: 'public.cdc_heartbeat', key: ['source_id'], deleteMode: 'soft', mask: [], exclude: [] },
  ];
  const TABLES = new TableConfigIndex(LOGGED);
  let lsn = 0;
  function dms(table: string, data: Record<string, unknown>): string {
    lsn++;
    const [schema, name] = table.split('.');
    const l = `00000000/${(0x2000 + lsn * 0x10).toString(16).toUpperCase().padStart(8, '0')}`;
    return JSON.stringify({
      data,
      metadata: {
        timestamp: '2026-12-01T10:00:01.000Z',
        'record-type': 'data',
        operation: 'update',
        'partition-key-type': 'schema-table',
        'schema-name': schema,
        'table-name': name,
        'commit-timestamp': '2026-12-01T10:00:00.000Z',
        'stream-position': `${l}.3.${l}`,
        'transaction-id': 1000 + lsn,
        'transaction-record-id': 1,
      },
    });
  }
  const beat = (seq: number, s: number, sysid = '7312345678901234567', timeline = 1): string =>
    dms('public.cdc_heartbeat', {
      source_id: 'shop',
      beat_at: `2026-12-01 10:${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}+00`,
      seq,
      system_identifier: sysid,
      timeline,
    });

  function normalizer(controlPlane: MemoryControlPlane) {
    const published: ChangeEvent[] = [];
    const metrics: string[] = [];
    const errors: Array<Record<string, unknown>> = [];
    const logger: NormalizerLogger = {
      debug: () => undefined,
      info: () => undefined,
      warn: () => undefined,
      error: (message, extra) => void errors.push({ message, ...extra }),
    };
    const n = new Normalizer({
      source: 'shop',
      tables: TABLES,
      controlPlane,
      changeLog: { encode: (e: ChangeEvent) => e, publishEncoded: async (es: readonly ChangeEvent[]) => void published.push(...es) },
      metrics: { count: (name) => void metrics.push(name), milliseconds: () => undefined },
      logger,
    });
    const run = async (texts: string[]): Promise<void> => {
      const b = n.startBatch();
      for (const [i, text] of texts.entries()) await b.add({ text, origin: `raw/shard/${lsn}-${i}` });
      await b.flush();
    };
    return { run, published, metrics, errors };
  }

  it('passes beats in sequence (a replayed one too), then a missed beat marks the tables needs-resnapshot, audited and counted', async () => {
    const controlPlane = new MemoryControlPlane();
    const n = normalizer(controlPlane);
    await n.run([beat(1, 0), dms('public.orders', { id: 1, v: 'a' }), beat(2, 10)]);
    await n.run([beat(2, 10), beat(3, 20)]); // a replay of beat 2
    // A row of another source in the same heartbeat table has its own numbers: not this source's gap.
    await n.run([
      dms('public.cdc_heartbeat', { source_id: 'crm', beat_at: '2026-12-01 10:00:25+00', seq: 77, system_identifier: '7312345678901234567', timeline: 1 }),
    ]);
    expect((await controlPlane.listTables('shop')).map((t) => t.state)).toEqual(['active', 'active']);
    expect(n.metrics).not.toContain('SourceDiscontinuities');
    await n.run([beat(5, 40)]);
    const tables = await controlPlane.listTables('shop');
    expect(tables.map((t) => [t.table, t.state])).toEqual([
      ['public.cdc_heartbeat', 'needs-resnapshot'],
      ['public.orders', 'needs-resnapshot'],
    ]);
    expect(tables[1]!.stateReason).toMatch(/^SOURCE_DISCONTINUITY: heartbeat-missed: heartbeats 4 never arrived/);
    const audit = (await controlPlane.listAudit('shop')).filter((a) => a.action === 'needs-resnapshot');
    expect(audit.map((a) => a.table).sort()).toEqual(['public.cdc_heartbeat', 'public.orders']);
    expect(n.metrics.filter((m) => m === 'SourceDiscontinuities')).toHaveLength(1);
    expect(n.errors.find((e) => e.code === 'SOURCE_DISCONTINUITY')).toMatchObject({ problem: 'heartbeat-missed' });
  });

  it("a discontinuity leaves polled tables active: their positions and continuity are the poll cursor's (docs/failures.md)", async () => {
    const tables = new TableConfigIndex([
      ...LOGGED,
      { table: 'public.legacy', capture: 'poll', pollColumn: 'cdc_xid', deleteMode: 'soft', mask: [], exclude: [] },
    ]);
    const controlPlane = new MemoryControlPlane();
    const n = new Normalizer({
      source: 'shop',
      tables,
      controlPlane,
      changeLog: { encode: (e: ChangeEvent) => e, publishEncoded: async () => undefined },
      metrics: { count: () => undefined, milliseconds: () => undefined },
      logger: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined },
    });
    const shape = {
      table: 'public.legacy',
      columns: [
        { name: 'id', type: 'integer', typeOid: 23 },
        { name: 'cdc_xid', type: 'xid8', typeOid: 5069 },
      ],
      key: ['id'],
    };
    const polled = pollRecords('shop', shape, { rows: [['1', '7', '7', '2026-12-01T10:00:00.000000Z']] }, { mask: [], exclude: [] }).map((r) =>
      JSON.stringify(r),
    );
    const run = async (texts: string[]) => {
      const b = n.startBatch();
      for (const [i, text] of texts.entries()) await b.add({ text, origin: `raw/shard/${lsn}-${i}` });
      await b.flush();
    };
    await run([beat(1, 0), dms('public.orders', { id: 1, v: 'a' }), ...polled, beat(2, 10)]);
    expect((await controlPlane.getTable('shop', 'public.legacy'))?.positionSpace).toBe('poll-xid');
    expect((await controlPlane.getTable('shop', 'public.orders'))?.positionSpace).toBe('wal');
    await run([beat(4, 30)]); // beat 3 never arrived
    expect((await controlPlane.listTables('shop')).map((t) => [t.table, t.state])).toEqual([
      ['public.cdc_heartbeat', 'needs-resnapshot'],
      ['public.legacy', 'active'],
      ['public.orders', 'needs-resnapshot'],
    ]);
    expect((await controlPlane.listAudit('shop')).filter((a) => a.action === 'needs-resnapshot').map((a) => a.table)).not.toContain('public.legacy');
    // A polled table registered before spaces were recorded (capture 'poll', no space) is left alone too.
    const old = new MemoryControlPlane();
    await old.registerTable(
      {
        source: 'shop',
        table: 'public.legacy',
        state: 'active',
        currentVersion: 1,
        deleteMode: 'soft',
        preImage: 'full',
        stateReason: null,
        updatedAt: '2026-12-01T10:00:00.000Z',
        capture: 'poll',
      },
      {
        source: 'shop',
        table: 'public.legacy',
        version: 1,
        columns: [{ name: 'id', type: 'integer', nullable: false }],
        key: ['id'],
        effectivePosition: '000000000000000700000000',
        registeredAt: '2026-12-01T10:00:00.000Z',
      },
      { at: '2026-12-01T10:00:00.000Z', actor: 'test', action: 'register-table', source: 'shop', table: 'public.legacy', outcome: 'done', detail: {} },
    );
    expect(
      await markSourceForResnapshot(old, {
        source: 'shop',
        actor: 'test',
        at: '2026-12-01T10:01:00.000Z',
        code: 'HISTORY_GAP',
        problem: 'slot-replaced',
        message: 'the slot was replaced',
        detail: {},
      }),
    ).toBe(0);
    expect((await old.getTable('shop', 'public.legacy'))?.state).toBe('active');
  });

  it('a regressed beat (a restore) and a changed system identifier each stop the tables', async () => {
    const regress = new MemoryControlPlane();
    const a = normalizer(regress);
    await a.run([beat(1, 0), dms('public.orders', { id: 1 }), beat(2, 10), beat(3, 20)]);
    await a.run([beat(2, 30)]); // newer clock, older number: the source was rewound
    expect((await regress.listTables('shop')).every((t) => t.state === 'needs-resnapshot')).toBe(true);
    expect(a.errors[0]).toMatchObject({ problem: 'heartbeat-regressed' });

    const other = new MemoryControlPlane();
    const b = normalizer(other);
    await b.run([beat(1, 0), dms('public.orders', { id: 1 }), beat(2, 10)]);
    await b.run([beat(3, 20, '7399999999999999999')]);
    expect((await other.listTables('shop')).every((t) => t.state === 'needs-resnapshot')).toBe(true);
    expect(b.errors[0]).toMatchObject({ problem: 'identity-changed' });
    const c = normalizer(new MemoryControlPlane());
    await c.run([beat(1, 0), beat(2, 10, '7312345678901234567', 2)]);
    expect(c.errors[0]).toMatchObject({ problem: 'timeline-changed' });
  });
});
