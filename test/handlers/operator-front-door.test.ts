/**
 * The operator function behind its IAM-authorized front door (docs/deploy.md "Security: operators, who may do what"), on
 * DynamoDB Local:
 * - a pause by a caller whose grant covers only `status` (so the request can only come in on
 *   `/read/status`) is refused before the control plane is touched: no read, no write, no audit;
 * - the audit entry of an allowed action carries the caller's IAM ARN from the API Gateway event,
 *   the body's text only as a note, and a body that names an actor is refused;
 * - the Lambda entry point refuses a direct invoke with a self-typed `{ request, actor }` payload.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Context } from 'aws-lambda';
import { EnvName } from '../../contracts/env.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { ControlPlane, TableRecord } from '../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { createOperatorHandler, handler } from '../../lambda/handlers/operator.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';

const TABLE = 'cdc-control-front-door';
const VIEWER = 'arn:aws:sts::111111111111:assumed-role/cdc-viewer/alice';
const ONCALL = 'arn:aws:sts::111111111111:assumed-role/cdc-oncall/bob';
const quiet = { info: () => undefined, warn: () => undefined };
const context = { awsRequestId: 'r', functionName: 'cdc-operator', getRemainingTimeInMillis: () => 30_000 } as unknown as Context;

let ddb: DynamoDbLocal;
let cp: DynamoDbControlPlane;

/** An API Gateway REST proxy event of the operator API, as API Gateway builds it after SigV4 and IAM passed. */
const event = (resource: string, userArn: string, body: unknown) => ({
  resource,
  path: resource,
  httpMethod: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
  isBase64Encoded: false,
  requestContext: { resourcePath: resource, httpMethod: 'POST', stage: 'v1', identity: { userArn, caller: 'AROAEXAMPLE:x', accountId: '111111111111' } },
});

/** The control plane with every call counted (what reached it). */
function counted(inner: ControlPlane): { controlPlane: ControlPlane; calls: string[] } {
  const calls: string[] = [];
  const controlPlane = new Proxy(inner, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls.push(String(prop));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { controlPlane, calls };
}

beforeAll(async () => {
  ddb = await startDynamoDbLocal();
  const client = dynamoDbClient(ddb.endpoint);
  await createControlTable(client, TABLE);
  cp = new DynamoDbControlPlane(client, TABLE);
  const at = new Date(Date.now() - 60_000).toISOString();
  for (const table of ['public.orders', 'public.items']) {
    const rec: TableRecord = {
      source: 'shop',
      table,
      state: 'active',
      currentVersion: 1,
      deleteMode: 'soft',
      preImage: 'key',
      stateReason: null,
      updatedAt: at,
    };
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
  process.env[EnvName.CONTROL_TABLE] = TABLE;
  process.env[EnvName.CHANGE_LOG_RETENTION_MS] = String(24 * 3_600_000);
  process.env[EnvName.AWS_ENDPOINT] = ddb.endpoint;
}, 120_000);

afterAll(async () => {
  for (const name of [EnvName.CONTROL_TABLE, EnvName.CHANGE_LOG_RETENTION_MS, EnvName.AWS_ENDPOINT]) delete process.env[name];
  await ddb?.stop();
});

describe('the operator function behind the front door', () => {
  it('refuses a pause by a caller allowed only status before it reaches the control plane', async () => {
    const { controlPlane, calls } = counted(cp);
    // The status function (read class), the one /read/status reaches.
    const status = createOperatorHandler({
      controlPlane,
      env: { [EnvName.CHANGE_LOG_RETENTION_MS]: String(24 * 3_600_000), [EnvName.OPERATOR_ACTIONS]: 'status,audit' },
      logger: quiet,
    });
    const pause = { request: { action: 'pause', table: 'public.orders', durationMs: 60_000, reason: 'sneaky' } };
    // IAM lets the viewer call /read/status only, so that is the only route a pause of theirs can come in on.
    const onStatus = await status({ path: '/read/status', caller: VIEWER, body: pause });
    expect(onStatus).toMatchObject({ ok: true, result: { outcome: 'refused', action: 'pause', table: 'public.orders', code: 'ACTION_NOT_ON_THIS_ROUTE' } });
    expect((onStatus as { result: { reason: string } }).result.reason).toContain('belongs on /operate/pause (operate class)');
    // Even on the pause route, the read-class function does not serve it.
    expect(await status({ path: '/operate/pause', caller: VIEWER, body: pause })).toMatchObject({
      ok: true,
      result: { outcome: 'refused', code: 'ACTION_NOT_ALLOWED' },
    });
    expect(calls).toEqual([]);
    // What the caller is allowed does work, and does read.
    expect(await status({ path: '/read/status', caller: VIEWER, body: { request: { action: 'status', table: 'public.orders' } } })).toMatchObject({
      ok: true,
      result: { tables: [{ table: 'public.orders', state: 'active' }] },
    });
    expect(calls).toContain('listTables');
    expect((await cp.getTable('shop', 'public.orders'))?.state).toBe('active');
    expect((await cp.listAudit('shop', 'public.orders')).filter((e) => e.action === 'pause')).toEqual([]);
  });

  it('the Lambda entry point: the audit entry carries the caller ARN, the body text only as a note; a wrong route is a 403 that writes nothing', async () => {
    const wrong = await handler(
      event('/read/status', VIEWER, { request: { action: 'pause', table: 'public.items', durationMs: 60_000, reason: 'x' } }),
      context,
    );
    expect(wrong.statusCode).toBe(403);
    expect(JSON.parse(wrong.body)).toMatchObject({ ok: true, result: { outcome: 'refused', code: 'ACTION_NOT_ON_THIS_ROUTE' } });
    expect((await cp.getTable('shop', 'public.items'))?.state).toBe('active');

    const ok = await handler(
      event('/operate/pause', ONCALL, { request: { action: 'pause', table: 'public.items', durationMs: 60_000, reason: 'maintenance' }, note: 'alice@laptop' }),
      context,
    );
    expect(ok.statusCode, ok.body).toBe(200);
    expect(JSON.parse(ok.body)).toMatchObject({ ok: true, result: { outcome: 'done', action: 'pause' } });
    const entries = (await cp.listAudit('shop', 'public.items')).filter((e) => e.action === 'pause');
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ actor: ONCALL, outcome: 'done', detail: { note: 'alice@laptop', reason: 'maintenance' } });

    // A body that names who asks is refused: who asks comes from IAM.
    const forged = await handler(
      event('/operate/resume', ONCALL, { request: { action: 'resume', table: 'public.items' }, actor: 'arn:aws:iam::111111111111:user/someone-else' }),
      context,
    );
    expect(forged.statusCode).toBe(400);
    expect(JSON.parse(forged.body)).toMatchObject({
      ok: false,
      error: { code: 'INVALID_REQUEST', message: expect.stringContaining('actor is not read from the body') },
    });
    // accept-schema is its own (destructive) route: a plain resume route does not carry it.
    const accept = await handler(event('/operate/resume', ONCALL, { request: { action: 'resume', table: 'public.items', acceptSchema: true } }), context);
    expect(accept.statusCode).toBe(403);
    expect(JSON.parse(accept.body)).toMatchObject({
      result: { code: 'ACTION_NOT_ON_THIS_ROUTE', reason: expect.stringContaining('/destructive/accept-schema') },
    });
    expect((await cp.getTable('shop', 'public.items'))?.state).toBe('paused');
    expect((await cp.listAudit('shop', 'public.items')).filter((e) => e.action === 'resume')).toEqual([]);
  });

  it('the Lambda entry point refuses a direct invoke with a self-typed identity', async () => {
    const before = (await cp.listAudit()).length;
    for (const payload of [
      { request: { action: 'pause', table: 'public.orders', durationMs: 60_000, reason: 'x' }, actor: 'admin' },
      { ...event('/operate/pause', 'not-an-arn', { request: { action: 'pause', table: 'public.orders', durationMs: 60_000, reason: 'x' } }) },
    ]) {
      const r = await handler(payload, context);
      expect(r.statusCode).toBe(403);
      expect(JSON.parse(r.body)).toMatchObject({
        ok: false,
        error: { code: 'NOT_A_FRONT_DOOR_REQUEST', message: expect.stringContaining('requestContext.identity.userArn') },
      });
    }
    expect((await cp.listAudit()).length).toBe(before);
    expect((await cp.getTable('shop', 'public.orders'))?.state).toBe('active');
  });
});
