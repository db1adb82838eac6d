/**
 * The operator core against the DynamoDB control plane on DynamoDB Local: each action's accept
 * and refusal (all audited), two concurrent actions on one table (exactly one wins, both are
 * audited), and the sink's resume replay protocol (a hold recorded during a replay is never
 * released unreplayed).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../../local/dynamodb.ts';
import { dynamoDbClient } from '../../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { ControlPlane, TableRecord, TableAction } from '../../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { controlPlaneSnapshots, Operator, stateOnlySnapshots, type ActionResult } from '../../../lambda/core/operator/operator.ts';
import { parseDurationText, type SnapshotScheduler } from '../../../lambda/core/operator/operator-decisions.ts';
import { createHeldRangeReplayer } from '../../../lambda/core/sink/held-range-replay.ts';
import { formatStatus } from '../../../bin/cli/operator.ts';
import type { LogRecord } from '../../../lambda/adapters/change-log-reader.ts';
import type { ChangeRecord } from '../../../lambda/handlers/warehouse-applier.ts';

let ddb: DynamoDbLocal;
let client: DynamoDBClient;
let cp: DynamoDbControlPlane;

const DAY = 86_400_000;
const pos = (n: number) => makePosition(BigInt(n), 0);
const settings = { changeLogRetentionMs: DAY, pauseBudgetMs: { budgeted: 3_600_000 } };

beforeAll(async () => {
  ddb = await startDynamoDbLocal();
  client = dynamoDbClient(ddb.endpoint);
});
afterAll(async () => {
  client?.destroy();
  await ddb?.stop();
});
beforeEach(async () => {
  const name = `op-${randomUUID()}`;
  await createControlTable(client, name);
  cp = new DynamoDbControlPlane(client, name);
});

async function register(table: string, sourceId = 'shop', over: Partial<TableRecord> = {}): Promise<void> {
  const at = new Date(Date.now() - 60_000).toISOString();
  const rec: TableRecord = {
    source: sourceId,
    table,
    state: 'active',
    currentVersion: 1,
    deleteMode: 'soft',
    preImage: 'key',
    stateReason: null,
    updatedAt: at,
    ...over,
  };
  await cp.registerTable(
    rec,
    {
      source: sourceId,
      table,
      version: rec.currentVersion,
      columns: [{ name: 'id', type: 'integer', nullable: false }],
      key: ['id'],
      effectivePosition: pos(1),
      registeredAt: at,
    },
    { at, actor: 'test', action: 'register', source: sourceId, table, outcome: 'done', detail: {} },
  );
}

const operator = (over: { controlPlane?: ControlPlane; snapshots?: SnapshotScheduler; now?: () => Date } = {}) =>
  new Operator({ controlPlane: over.controlPlane ?? cp, settings, snapshots: over.snapshots ?? stateOnlySnapshots, now: over.now });
const refused = (r: ActionResult) => (r.outcome === 'refused' ? r.code : null);

describe('pause', () => {
  it('is accepted for less than the retention, committed with its audit entry', async () => {
    await register('public.orders');
    const r = await operator().pause('alice', { table: 'public.orders', durationMs: 10 * 60_000, reason: 'vendor migration' });
    expect(r).toMatchObject({ outcome: 'done', action: 'pause', source: 'shop', table: 'public.orders' });
    const t = await cp.getTable('shop', 'public.orders');
    expect(t?.state).toBe('paused');
    expect(t?.stateReason).toMatch(/^OPERATOR_PAUSE: vendor migration \(by alice, until /);
    const audit = (await cp.listAudit('shop', 'public.orders')).filter((a) => a.action === 'pause');
    expect(audit).toEqual([
      expect.objectContaining({
        actor: 'alice',
        outcome: 'done',
        detail: expect.objectContaining({ for: '10m', reason: 'vendor migration', from: 'active', to: 'paused' }),
      }),
    ]);
  });

  it('is refused (and audited) when it would outlive the change log, exceed the source budget, or the table is already paused', async () => {
    await register('public.orders');
    await register('public.items', 'budgeted');
    const op = operator();
    const long = await op.pause('bob', { table: 'public.orders', durationMs: parseDurationText('400d')!, reason: 'long' });
    expect(long).toMatchObject({ outcome: 'refused', code: 'PAUSE_OUTLIVES_RETENTION' });
    expect(long.outcome === 'refused' && long.reason).toContain("would outlive the change log's retention (1d)");
    expect(refused(await op.pause('bob', { table: 'public.items', durationMs: 2 * 3_600_000, reason: 'x' }))).toBe('PAUSE_EXCEEDS_SOURCE_BUDGET');
    expect(refused(await op.pause('bob', { table: 'public.nope', durationMs: 1000, reason: 'x' }))).toBe('TABLE_NOT_FOUND');
    expect((await op.pause('bob', { table: 'public.orders', durationMs: 60_000, reason: 'ok' })).outcome).toBe('done');
    expect(refused(await op.pause('bob', { table: 'public.orders', durationMs: 60_000, reason: 'again' }))).toBe('ALREADY_PAUSED');
    const snapshotRunning: SnapshotScheduler = { ...stateOnlySnapshots, status: async () => ({ state: 'running', chunksDone: 3, chunksTotal: 10 }) };
    expect(refused(await operator({ snapshots: snapshotRunning }).pause('bob', { table: 'public.items', durationMs: 60_000, reason: 'x' }))).toBe(
      'SNAPSHOT_RUNNING',
    );
    expect((await cp.getTable('shop', 'public.orders'))?.stateReason).toContain('ok');
    const refusals = (await cp.listAudit()).filter((a) => a.outcome === 'refused');
    expect(refusals.map((a) => [a.actor, a.action, a.table, a.detail.code])).toEqual([
      ['bob', 'pause', 'public.orders', 'PAUSE_OUTLIVES_RETENTION'],
      ['bob', 'pause', 'public.items', 'PAUSE_EXCEEDS_SOURCE_BUDGET'],
      ['bob', 'pause', 'public.nope', 'TABLE_NOT_FOUND'],
      ['bob', 'pause', 'public.orders', 'ALREADY_PAUSED'],
      ['bob', 'pause', 'public.items', 'SNAPSHOT_RUNNING'],
    ]);
    for (const a of refusals) expect(a.detail.reason).toEqual(expect.any(String));
  });

  it('counts the age of events already held against the retention', async () => {
    await register('public.orders');
    await cp.holdSinkTable('warehouse', 'shop', 'public.orders', pos(5));
    const later = () => new Date(Date.now() + 20 * 3_600_000);
    const r = await operator({ now: later }).pause('carol', { table: 'public.orders', durationMs: 5 * 3_600_000, reason: 'x' });
    expect(r).toMatchObject({ outcome: 'refused', code: 'PAUSE_OUTLIVES_RETENTION' });
    expect(r.outcome === 'refused' && r.reason).toMatch(/of which (4h|3h59m)(\d+m)?(\d+s)? is left/);
  });
});

describe('two concurrent actions on one table', () => {
  /** Holds every commit until `n` commits are waiting, so all of them decided on the same read. */
  function barrier(n: number): ControlPlane {
    let waiting: Array<() => void> = [];
    return new Proxy(cp, {
      get(target, prop, receiver) {
        if (prop !== 'commitTableAction') {
          const v = Reflect.get(target, prop, receiver) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        }
        return async (action: TableAction) => {
          await new Promise<void>((resolve) => {
            waiting.push(resolve);
            if (waiting.length === n) {
              for (const w of waiting) w();
              waiting = [];
            }
          });
          return target.commitTableAction(action);
        };
      },
    });
  }

  it('exactly one of two pauses decided on the same read wins; the other is refused; both are audited', async () => {
    await register('public.orders');
    const op = operator({ controlPlane: barrier(2) });
    const results = await Promise.all([
      op.pause('alice', { table: 'public.orders', durationMs: 60_000, reason: 'a' }),
      op.pause('bob', { table: 'public.orders', durationMs: 120_000, reason: 'b' }),
    ]);
    expect(results.map((r) => r.outcome).sort()).toEqual(['done', 'refused']);
    const loser = results.find((r) => r.outcome === 'refused')!;
    expect(loser).toMatchObject({ code: 'CONCURRENT_CHANGE' });
    const winner = results.find((r) => r.outcome === 'done')!;
    const reason = (await cp.getTable('shop', 'public.orders'))!.stateReason!;
    expect(reason).toContain(winner === results[0] ? 'by alice' : 'by bob');
    const audit = (await cp.listAudit('shop', 'public.orders')).filter((a) => a.action === 'pause');
    expect(audit.map((a) => a.outcome).sort()).toEqual(['done', 'refused']);
  });

  it('a pause racing a resume, repeated: exactly one action wins each time, every attempt is audited', async () => {
    await register('public.orders', 'shop', { state: 'paused', stateReason: 'OPERATOR_PAUSE: x' });
    const op = operator();
    let done = 0;
    const rounds = 8;
    for (let i = 0; i < rounds; i++) {
      const [a, b] = await Promise.all([op.resume('alice', { table: 'public.orders' }), op.resume('bob', { table: 'public.orders' })]);
      expect([a.outcome, b.outcome].filter((o) => o === 'done')).toHaveLength(1);
      done++;
      expect((await cp.getTable('shop', 'public.orders'))!.state).toBe('active');
      const [c, d] = await Promise.all([
        op.pause('alice', { table: 'public.orders', durationMs: 1000, reason: 'r' }),
        op.pause('bob', { table: 'public.orders', durationMs: 1000, reason: 'r' }),
      ]);
      expect([c.outcome, d.outcome].filter((o) => o === 'done')).toHaveLength(1);
      for (const r of [a, b, c, d]) if (r.outcome === 'refused') expect(['CONCURRENT_CHANGE', 'ALREADY_PAUSED', 'NOTHING_TO_RESUME']).toContain(r.code);
    }
    const audit = (await cp.listAudit('shop', 'public.orders')).filter((x) => x.action === 'pause' || x.action === 'resume');
    expect(audit).toHaveLength(rounds * 4);
    expect(audit.filter((x) => x.outcome === 'done')).toHaveLength(done * 2);
  });
});

describe('resume', () => {
  it('for a breaking schema change: refused without --accept-schema (naming the decision), accepted with it; held sinks are marked for release', async () => {
    await register('public.orders', 'shop', { state: 'paused', currentVersion: 2, stateReason: 'SCHEMA_BREAKING: column note was dropped (schema version 2)' });
    await cp.holdSinkTable('warehouse', 'shop', 'public.orders', pos(7));
    await cp.holdSinkTable('search', 'shop', 'public.orders', pos(9));
    await cp.advanceSinkProgress('other', 'shop', 'public.orders', pos(3));
    const op = operator();
    const no = await op.resume('alice', { table: 'public.orders' });
    expect(no).toMatchObject({ outcome: 'refused', code: 'SCHEMA_DECISION_NEEDED' });
    expect(no.outcome === 'refused' && no.hint).toContain('--accept-schema');
    expect((await cp.getTable('shop', 'public.orders'))!.state).toBe('paused');
    const yes = await op.resume('alice', { table: 'public.orders', acceptSchema: true });
    expect(yes).toMatchObject({ outcome: 'done', detail: expect.objectContaining({ decision: 'continue with schema version 2', acceptedVersion: 2 }) });
    expect((await cp.getTable('shop', 'public.orders'))!.state).toBe('active');
    const sinks = await cp.listSinkProgress();
    expect(sinks.map((s) => [s.sink, s.heldFrom, s.releaseRequested !== null])).toEqual([
      ['other', null, false],
      ['search', pos(9), true],
      ['warehouse', pos(7), true],
    ]);
    const status = await op.status();
    expect(status.tables[0]!.sinks.filter((s) => s.releasePending).map((s) => s.sink)).toEqual(['search', 'warehouse']);
    expect(refused(await op.resume('alice', { table: 'public.orders' }))).toBe(null); // still held: a resume again is allowed (replays again)
  });

  it('refuses a held range older than the change log, with the re-snapshot hint', async () => {
    await register('public.orders', 'shop', { state: 'paused', stateReason: 'OPERATOR_PAUSE: x' });
    await cp.holdSinkTable('warehouse', 'shop', 'public.orders', pos(7));
    const r = await operator({ now: () => new Date(Date.now() + 2 * DAY) }).resume('dave', { table: 'public.orders' });
    expect(r).toMatchObject({ outcome: 'refused', code: 'HELD_RANGE_BEYOND_RETENTION' });
    expect(r.outcome === 'refused' && r.hint).toContain('cdc resnapshot public.orders');
    expect(refused(await operator().resume('dave', { table: 'public.missing' }))).toBe('TABLE_NOT_FOUND');
    await register('public.idle');
    expect(refused(await operator().resume('dave', { table: 'public.idle' }))).toBe('NOTHING_TO_RESUME');
  });
});

describe('resume of a polled table marked by a log discontinuity', () => {
  it("is accepted (its history is its poll cursor's, intact): the held range is released; a polled table needing a re-snapshot for another reason is refused", async () => {
    const gap = 'SOURCE_DISCONTINUITY: heartbeat-missed: heartbeats 4 never arrived';
    await register('public.legacy', 'shop', { state: 'needs-resnapshot', stateReason: gap, capture: 'poll' });
    await register('public.versioned', 'shop', { state: 'needs-resnapshot', stateReason: gap, capture: 'poll', positionSpace: 'poll-xid' });
    await register('public.orders', 'shop', { state: 'needs-resnapshot', stateReason: gap, positionSpace: 'wal' });
    await register('public.regressed', 'shop', {
      state: 'needs-resnapshot',
      stateReason: 'POSITION_REGRESSION: v went back',
      capture: 'poll',
      positionSpace: 'poll-xid',
    });
    await cp.holdSinkTable('warehouse', 'shop', 'public.versioned', pos(5));
    expect(await operator().resume('erin', { table: 'public.legacy' })).toMatchObject({ outcome: 'done' });
    expect(await operator().resume('erin', { table: 'public.versioned' })).toMatchObject({ outcome: 'done' });
    expect((await cp.getTable('shop', 'public.versioned'))!.state).toBe('active');
    expect((await cp.getSinkProgress('warehouse', 'shop', 'public.versioned'))!.releaseRequested).not.toBeNull();
    expect(refused(await operator().resume('erin', { table: 'public.orders' }))).toBe('NEEDS_RESNAPSHOT');
    expect(refused(await operator().resume('erin', { table: 'public.regressed' }))).toBe('NEEDS_RESNAPSHOT');
  });
});

describe('resnapshot and audit', () => {
  it('is accepted (state and audit), refused while a snapshot runs or when the budget says no', async () => {
    await register('public.orders');
    await register('public.items');
    const requests: string[] = [];
    const scheduler: SnapshotScheduler = {
      status: async () => null,
      budget: async () => ({ allowed: true, reason: null }),
      request: async (s, t, r) => void requests.push(`${s}/${t} by ${r.requestedBy}`),
    };
    expect(await operator({ snapshots: scheduler }).resnapshot('erin', { table: 'public.orders', reason: 'gap' })).toMatchObject({ outcome: 'done' });
    expect(requests).toEqual(['shop/public.orders by erin']);
    expect((await cp.getTable('shop', 'public.orders'))!.state).toBe('needs-resnapshot');
    expect(
      refused(await operator({ snapshots: { ...scheduler, status: async () => ({ state: 'running' }) } }).resnapshot('erin', { table: 'public.items' })),
    ).toBe('SNAPSHOT_RUNNING');
    expect(
      refused(
        await operator({ snapshots: { ...scheduler, budget: async () => ({ allowed: false, reason: 'two snapshots already run on shop' }) } }).resnapshot(
          'erin',
          { table: 'public.items' },
        ),
      ),
    ).toBe('SNAPSHOT_BUDGET');
    expect(requests).toHaveLength(1);
    expect(refused(await operator().resume('erin', { table: 'public.orders' }))).toBe('NEEDS_RESNAPSHOT');
    const all = await operator().audit({});
    const cut = all[all.length - 3]!.at;
    expect((await operator().audit({ since: cut })).length).toBeGreaterThanOrEqual(3);
    expect((await operator().audit({ table: 'public.items' })).filter((a) => a.action === 'resnapshot').map((a) => a.detail.code)).toEqual([
      'SNAPSHOT_RUNNING',
      'SNAPSHOT_BUDGET',
    ]);
  });
});

describe('the resume replay', () => {
  const ev = (table: string, n: number) => JSON.stringify({ source: 'shop', table, position: pos(n) });

  it('replays the held range in stream order and releases only when no hold was recorded during the pass', async () => {
    await register('public.orders', 'shop', { state: 'paused', stateReason: 'OPERATOR_PAUSE: x' });
    await cp.holdSinkTable('warehouse', 'shop', 'public.orders', pos(10));
    const log: LogRecord[] = [5, 10, 11, 12].map((n, i) => ({ shardId: 's0', sequenceNumber: String(100 + i), arrivedAt: null, text: ev('public.orders', n) }));
    log.push({ shardId: 's1', sequenceNumber: '200', arrivedAt: null, text: ev('public.other', 11) });
    expect(await operator().resume('alice', { table: 'public.orders' })).toMatchObject({ outcome: 'done' });
    const applied: string[][] = [];
    let passes = 0;
    const replayer = createHeldRangeReplayer({
      controlPlane: cp,
      sinkId: 'warehouse',
      settleMs: 0,
      applier: {
        applyRecords: async (records: readonly ChangeRecord[], options) => {
          expect(options).toEqual({ replayHeld: true });
          applied.push(records.map((r) => r.sequenceNumber));
          // During the first pass a live batch (that read the hold before the release) holds one more event.
          if (passes++ === 0) {
            log.push({ shardId: 's0', sequenceNumber: '104', arrivedAt: null, text: ev('public.orders', 13) });
            await cp.holdSinkTable('warehouse', 'shop', 'public.orders', pos(13));
          }
          return { failed: [], reasons: new Map(), applied: records.length, held: 0, deadLettered: 0 };
        },
      },
      readLog: async function* () {
        yield log.slice();
      },
    });
    expect(await replayer.pending()).toBe(1);
    const out = await replayer.replayPending();
    expect(out).toEqual([{ source: 'shop', table: 'public.orders', replayed: 4, released: true }]);
    // The second pass continues after the first one's progress (`replayedThrough`).
    expect(applied).toEqual([['101', '102', '103'], ['104']]);
    const p = (await cp.getSinkProgress('warehouse', 'shop', 'public.orders'))!;
    expect(p.heldFrom).toBeNull();
    expect(await replayer.pending()).toBe(0);
    const replays = (await cp.listAudit('shop', 'public.orders')).filter((a) => a.action === 'replay-held');
    expect(replays).toEqual([
      expect.objectContaining({ actor: 'applier:warehouse', outcome: 'done', detail: expect.objectContaining({ heldFrom: pos(10), replayed: 4, pass: 2 }) }),
    ]);
    await replayer.replayPending(); // nothing held: drops the request
    expect((await cp.getSinkProgress('warehouse', 'shop', 'public.orders'))!.releaseRequested).toBeNull();
  });

  it('cdc status says when a released hold is replayed from the trim horizon (several batches of one shard at once)', async () => {
    await register('public.orders', 'shop', { state: 'paused', stateReason: 'OPERATOR_PAUSE: x' });
    await cp.holdSinkTable('warehouse', 'shop', 'public.orders', pos(10), { s0: '100' }, true);
    await cp.holdSinkTable('search', 'shop', 'public.orders', pos(10), { s0: '100' });
    expect(await operator().resume('alice', { table: 'public.orders' })).toMatchObject({ outcome: 'done' });
    const status = await operator().status();
    expect(status.tables[0]!.sinks.map((s) => [s.sink, s.releasePending, s.fromTrimHorizon])).toEqual([
      ['search', true, false],
      ['warehouse', true, true],
    ]);
    const text = formatStatus(status);
    expect(text).toMatch(/search .*\(replaying\)/);
    expect(text).toMatch(/warehouse .*\(replaying from the trim horizon\)/);
  });

  it('leaves the hold in place when the table was paused again, or when the replay cannot apply', async () => {
    await register('public.orders', 'shop', { state: 'paused', stateReason: 'OPERATOR_PAUSE: x' });
    await cp.holdSinkTable('warehouse', 'shop', 'public.orders', pos(10));
    await operator().resume('alice', { table: 'public.orders' });
    const failing = createHeldRangeReplayer({
      controlPlane: cp,
      sinkId: 'warehouse',
      applier: {
        applyRecords: async (r: readonly ChangeRecord[]) => ({
          failed: [r[0]!.sequenceNumber],
          reasons: new Map([[r[0]!.sequenceNumber, 'warehouse down']]),
          applied: 0,
          held: 0,
          deadLettered: 0,
        }),
      },
      readLog: async function* () {
        yield [{ shardId: 's0', sequenceNumber: '1', arrivedAt: null, text: ev('public.orders', 10) }];
      },
    });
    await expect(failing.replayPending()).rejects.toThrow(/REPLAY_INCOMPLETE|did not complete: warehouse down/);
    expect((await cp.getSinkProgress('warehouse', 'shop', 'public.orders'))!.heldFrom).toBe(pos(10));
    await operator().pause('alice', { table: 'public.orders', durationMs: 60_000, reason: 'again' });
    expect(await failing.replayPending()).toEqual([]);
    expect((await cp.getSinkProgress('warehouse', 'shop', 'public.orders'))!.heldFrom).toBe(pos(10));
  });
});

describe("resnapshot through the snapshot worker's entry point", () => {
  it('records a snapshot request the worker picks up, and refuses a second one while it is queued (both audited)', async () => {
    await register('public.gapped', 'resnap');
    const op = operator({ snapshots: controlPlaneSnapshots(cp) });
    const first = await op.resnapshot('carol', { source: 'resnap', table: 'public.gapped', reason: 'history gap' });
    expect(first).toMatchObject({ outcome: 'done', action: 'resnapshot' });
    expect((await cp.getTable('resnap', 'public.gapped'))?.state).toBe('needs-resnapshot');
    const run = await cp.getSnapshot('resnap', 'public.gapped');
    expect(run).toMatchObject({ status: 'requested', reason: 'resnapshot', requestedBy: 'carol' });
    const second = await op.resnapshot('dave', { source: 'resnap', table: 'public.gapped', reason: 'again' });
    expect(refused(second)).toBe('SNAPSHOT_RUNNING');
    const audit = await cp.listAudit('resnap', 'public.gapped');
    expect(audit.map((a) => [a.actor, a.action, a.outcome])).toEqual(
      expect.arrayContaining([
        ['carol', 'resnapshot', 'done'],
        ['carol', 'request-snapshot', 'done'],
        ['dave', 'resnapshot', 'refused'],
      ]),
    );
  });
});
