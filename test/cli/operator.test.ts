/**
 * The operator commands (`cdc status|pause|resume|resnapshot|audit`):
 * - the CLI → operator API path: the operator Lambda's handler invoked in process through the
 *   same JSON request/response the Lambda Invoke carries, on DynamoDB Local; the status-only
 *   function refuses changes; a malformed payload is an error naming the field;
 * - the local door on a `cdc local` state folder when `cdc local` is NOT running: the command
 *   starts DynamoDB Local and kinesalite on the folder's data, holds the folder's lock meanwhile,
 *   and reads the change log's retention from kinesalite;
 * - usage errors (exit 2), refusals (exit 3, reason on stderr), `--json`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { CreateStreamCommand, IncreaseStreamRetentionPeriodCommand } from '@aws-sdk/client-kinesis';
import { main } from '../../bin/cli/main.ts';
import { setDoorOpener } from '../../bin/cli/operator.ts';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { AuditEntry, TableRecord } from '../../lambda/core/shared/control-plane.ts';
import type { StatusReport } from '../../lambda/core/operator/operator.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { createOperatorHandler } from '../../lambda/handlers/operator.ts';
import { EnvName } from '../../contracts/env.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startKinesalite } from '../../local/kinesis.ts';
import { CONTROL_TABLE, type LocalState } from '../../local/stack.ts';

/** The commands that write an audit entry: the only ones that take --actor. */
const WRITES = new Set(['pause', 'resume', 'resnapshot', 'rebuild']);
let dir: string;
let ddb: DynamoDbLocal;
let cp: DynamoDbControlPlane;
const quiet = { info: () => undefined, warn: () => undefined };
const API_URL = 'https://abcdef1234.execute-api.eu-west-1.amazonaws.com/v1/';

async function run(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await main([...args, ...(WRITES.has(args[0]!) ? ['--actor', 'on-call note'] : [])], { stdin: new PassThrough(), stdout, stderr });
  return { code, out, err };
}

async function register(table: string): Promise<void> {
  const at = new Date(Date.now() - 60_000).toISOString();
  const rec: TableRecord = { source: 'shop', table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at };
  await cp.registerTable(
    rec,
    {
      source: 'shop',
      table,
      version: 1,
      columns: [{ name: 'id', type: 'integer', nullable: false }],
      key: ['id'],
      effectivePosition: makePosition(1n, 0),
      registeredAt: at,
    },
    { at, actor: 'test', action: 'register', source: 'shop', table, outcome: 'done', detail: {} },
  );
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-cli-operator-'));
  // A cdc local state folder as a stopped run leaves it: state.json, the DynamoDB Local database
  // file, kinesalite's LevelDB with the change-log stream.
  const state: LocalState = {
    version: 1,
    createdAt: new Date().toISOString(),
    postgresDataDir: null,
    embeddedSource: false,
    ports: { postgres: null, dynamodb: 1, kinesis: 1 },
    pids: { dynamodb: null },
    streams: { raw: 'cdc-raw-shop', changeLog: 'cdc-change-log' },
    source: null,
  };
  await writeFile(path.join(dir, 'state.json'), JSON.stringify(state));
  const k = await startKinesalite({ path: path.join(dir, 'kinesis') });
  const kin = kinesisClient(k.endpoint);
  await kin.send(new CreateStreamCommand({ StreamName: 'cdc-change-log', ShardCount: 1 }));
  await new Promise((r) => setTimeout(r, 100));
  await kin.send(new IncreaseStreamRetentionPeriodCommand({ StreamName: 'cdc-change-log', RetentionPeriodHours: 48 }));
  kin.destroy();
  await k.stop();
  ddb = await startDynamoDbLocal({ dbPath: path.join(dir, 'dynamodb') });
  const client = dynamoDbClient(ddb.endpoint);
  await createControlTable(client, CONTROL_TABLE);
  cp = new DynamoDbControlPlane(client, CONTROL_TABLE);
  await register('public.orders');
  await register('public.items');
}, 120_000);

afterAll(async () => {
  setDoorOpener(null);
  await ddb?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('the CLI → operator API path (the Lambda handler in process, JSON in and out)', () => {
  const door = (actions?: string) => {
    const handler = createOperatorHandler({
      controlPlane: cp,
      env: { [EnvName.CHANGE_LOG_RETENTION_MS]: String(24 * 3_600_000), ...(actions ? { [EnvName.OPERATOR_ACTIONS]: actions } : {}) },
      logger: quiet,
    });
    return async () => ({
      running: true,
      // What the front door hands the function: the route, the caller it established, the JSON body.
      invoke: async (path: string, body: unknown) =>
        JSON.parse(JSON.stringify(await handler({ path, caller: 'tester', body: JSON.parse(JSON.stringify(body)) }))),
      close: async () => undefined,
    });
  };

  it('pauses, refuses with exit 3 and the reason on stderr, and lists the audit', async () => {
    setDoorOpener(door());
    const ok = await run('pause', 'public.orders', '--for', '10m', '--reason', 'maintenance', '--url', API_URL);
    expect(ok).toMatchObject({ code: 0, err: '' });
    expect(ok.out).toMatch(/^shop\/public\.orders paused until \S+: its events keep entering the change log/);
    const refused = await run('pause', 'public.items', '--for', '400d', '--reason', 'too long', '--url', API_URL, '--json');
    expect(refused.code).toBe(3);
    expect(refused.err).toMatch(
      /^cdc pause: refused \(PAUSE_OUTLIVES_RETENTION\): a pause of 400d would outlive the change log's retention \(1d\).*\n  what to do: pause for less than 1d/,
    );
    expect(JSON.parse(refused.out)).toMatchObject({ outcome: 'refused', code: 'PAUSE_OUTLIVES_RETENTION' });
    const resnap = await run('resnapshot', 'public.items', '--reason', 'gap', '--url', API_URL);
    expect(resnap.code, resnap.err).toBe(0);
    const status = await run('status', '--url', API_URL);
    expect(status.out).toMatch(/SOURCE +TABLE +STATE +VERSION/);
    expect(status.out).toMatch(/shop +public\.items +needs-resnapshot +1 +- +- +- +- +0 +queued 0\/0 rows, idle +RESNAPSHOT_REQUESTED: gap \(by tester\)/);
    expect(status.out).toMatch(/shop +public\.orders +paused/);
    expect(status.out).toContain('end-to-end lag: unknown');
    const audit = await run('audit', '--json', '--url', API_URL);
    const entries = (JSON.parse(audit.out) as AuditEntry[]).filter((e) => e.actor === 'tester');
    expect(entries.map((e) => [e.action, e.table, e.outcome])).toEqual([
      ['pause', 'public.orders', 'done'],
      ['pause', 'public.items', 'refused'],
      ['resnapshot', 'public.items', 'done'],
      ['request-snapshot', 'public.items', 'done'],
    ]);
    // --actor is a note in the entry's detail; the actor is the caller the door established.
    expect(entries.filter((e) => e.action !== 'request-snapshot').map((e) => e.detail.note)).toEqual(['on-call note', 'on-call note', 'on-call note']);
    const one = await run('audit', '--table', 'public.items', '--url', API_URL);
    expect(one.out).toMatch(/tester +pause +shop\/public\.items +refused +PAUSE_OUTLIVES_RETENTION: a pause of 400d/);
    expect(await run('resume', 'public.orders', '--url', API_URL)).toMatchObject({ code: 0 });
    expect((await run('resume', 'public.orders', '--url', API_URL)).err).toMatch(/refused \(NOTHING_TO_RESUME\)/);
  });

  it('the status-only function serves status and audit and refuses changes', async () => {
    setDoorOpener(door('status,audit'));
    expect((await run('status', 'public.orders', '--json', '--url', API_URL)).code).toBe(0);
    const pause = await run('pause', 'public.orders', '--for', '1m', '--reason', 'x', '--url', API_URL);
    expect(pause.code).toBe(3);
    expect(pause.err).toMatch(/refused \(ACTION_NOT_ALLOWED\): this operator function serves only status, audit/);
    expect(pause.code).toBe(3);
  });

  it('cdc rebuild through a door without a rebuild worker (the operator Lambda): refused with exit 3 and audited; bad --from is a usage error', async () => {
    setDoorOpener(door());
    const refused = await run('rebuild', 'public.orders', '--sink', 'warehouse', '--url', API_URL, '--json');
    expect(refused.code).toBe(3);
    expect(refused.err).toMatch(/^cdc rebuild: refused \(REBUILD_NOT_AVAILABLE\): this operator door has no rebuild worker wired/);
    expect(JSON.parse(refused.out)).toMatchObject({ outcome: 'refused', action: 'rebuild', code: 'REBUILD_NOT_AVAILABLE' });
    const audit = (JSON.parse((await run('audit', '--json', '--url', API_URL)).out) as AuditEntry[]).filter((e) => e.action === 'rebuild');
    expect(audit.at(-1)).toMatchObject({
      table: 'public.orders',
      outcome: 'refused',
      detail: { code: 'REBUILD_NOT_AVAILABLE', sink: 'warehouse', rehearse: false },
    });
    expect((await run('rebuild', 'public.orders', '--from', 'yesterday', '--url', API_URL)).code).toBe(2);
    const help = await run('rebuild', '--help');
    expect(help.out).toMatch(/^Usage: cdc rebuild TABLE \[--sink ID\] \[--from POSITION\] \[--rehearse\]/);
  });

  it('answers a malformed payload with an error naming the field', async () => {
    const handler = createOperatorHandler({ controlPlane: cp, env: { [EnvName.CHANGE_LOG_RETENTION_MS]: '1000' }, logger: quiet });
    const call = (path: string, body: unknown) => handler({ path, caller: 'x', body });
    expect(await call('/operate/pause', { request: { action: 'pause', table: 'public.orders', durationMs: -5, reason: 'r' } })).toEqual({
      ok: false,
      error: { code: 'INVALID_REQUEST', message: 'request.durationMs must be a positive number of milliseconds, got -5' },
    });
    expect(await call('/operate/pause', { request: { action: 'drop' } })).toMatchObject({
      ok: false,
      error: { message: expect.stringContaining('request.action must be one of status, pause, resume, resnapshot, audit') },
    });
    // Who asks is never read from the body.
    expect(await call('/read/status', { request: { action: 'status' }, actor: 'someone-else' })).toMatchObject({
      ok: false,
      error: { message: expect.stringContaining('actor is not read from the body') },
    });
    expect(() => createOperatorHandler({ controlPlane: cp, env: {} })).toThrow(/CDC_CHANGE_LOG_RETENTION_MS must be a positive number/);
    expect(() => createOperatorHandler({ controlPlane: cp, env: { [EnvName.CHANGE_LOG_RETENTION_MS]: '1', [EnvName.PAUSE_BUDGETS]: '{"a":-1}' } })).toThrow(
      /CDC_PAUSE_BUDGETS must be a JSON object/,
    );
  });

  it('says what is wrong with a command line (exit 2)', async () => {
    setDoorOpener(door());
    expect((await run('pause', 'public.orders', '--reason', 'x')).err).toContain('--for DURATION is required');
    expect((await run('pause', 'public.orders', '--for', '10x', '--reason', 'x')).code).toBe(2);
    expect((await run('resume')).err).toMatch(/takes one table/);
    expect((await run('audit', '--since', 'yesterday')).code).toBe(2);
    expect((await run('status', '--stack', 's', '--function', 'f')).code).toBe(2);
    const help = await run('resume', '--help');
    expect(help.code).toBe(0);
    expect(help.out).toContain('--accept-schema');
  });
});

describe('the local door when cdc local is not running', () => {
  it('starts DynamoDB Local and kinesalite on the state folder for the command, under the folder lock', async () => {
    setDoorOpener(null);
    await ddb.stop(); // the folder's data now belongs to nobody, as after cdc local stopped
    const status = await run('status', '--json', '--state-dir', dir);
    expect(status.code, status.err).toBe(0);
    const report = JSON.parse(status.out) as StatusReport;
    expect(report.changeLogRetentionMs).toBe(48 * 3_600_000);
    expect(report.tables.map((t) => [t.table, t.state])).toEqual([
      ['public.items', 'needs-resnapshot'],
      ['public.orders', 'active'],
    ]);
    expect(existsSync(path.join(dir, 'lock'))).toBe(false);
    // The same action classes locally: a pause goes to its route, audited as the OS user, --actor a note.
    const pause = await run('pause', 'public.orders', '--for', '1m', '--reason', 'local', '--state-dir', dir);
    expect(pause.code, pause.err).toBe(0);
    const audit = await run('audit', '--table', 'public.orders', '--json', '--state-dir', dir);
    const last = (JSON.parse(audit.out) as AuditEntry[]).filter((e) => e.action === 'pause').at(-1);
    expect(last).toMatchObject({ actor: `os-user:${os.userInfo().username}`, outcome: 'done', detail: { note: 'on-call note', reason: 'local' } });
    const missing = await run('status', '--state-dir', path.join(dir, 'nope'));
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/holds no cdc local state \(no state\.json\): run cdc local there first/);
  }, 120_000);
});
