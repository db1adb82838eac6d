/**
 * `cdc status|pause|resume|audit` on AWS through the operator API's front door, against a local
 * stand-in of it (test/helpers/operator-front-door.ts: SigV4 verified with its own
 * implementation, a policy per principal over the route ARNs the construct's grants name, an API
 * Gateway proxy event into the operator Lambda's entry point on DynamoDB Local). `cdc` signs with
 * the credentials of the SDK's default chain (here the environment). Not run against real API
 * Gateway.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PassThrough } from 'node:stream';
import { main } from '../../bin/cli/main.ts';
import { setDoorOpener } from '../../bin/cli/operator.ts';
import { EnvName } from '../../contracts/env.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { AuditEntry, TableRecord } from '../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { handler } from '../../lambda/handlers/operator.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { sigV4Signature, startOperatorFrontDoor, type FrontDoorStandIn, type StandInPrincipal } from '../helpers/operator-front-door.ts';

const REGION = 'eu-west-1';
const TABLE = 'cdc-control-aws-door';
const viewer: StandInPrincipal = {
  accessKeyId: 'AKIAVIEWER0000000001',
  secretAccessKey: 'viewer-secret-key-for-tests-only',
  arn: 'arn:aws:sts::111111111111:assumed-role/cdc-viewer/alice',
  allow: [],
};
const oncall: StandInPrincipal = {
  accessKeyId: 'AKIAONCALL0000000002',
  secretAccessKey: 'oncall-secret-key-for-tests-only',
  arn: 'arn:aws:sts::111111111111:assumed-role/cdc-oncall/bob',
  allow: [],
};

/** The commands that write an audit entry: the only ones that take --actor. */
const WRITES = new Set(['pause', 'resume', 'resnapshot', 'rebuild']);
let ddb: DynamoDbLocal;
let cp: DynamoDbControlPlane;
let door: FrontDoorStandIn;
const saved = { ...process.env };

async function as(who: { accessKeyId: string; secretAccessKey: string }, ...args: string[]): Promise<{ code: number; out: string; err: string }> {
  process.env.AWS_ACCESS_KEY_ID = who.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = who.secretAccessKey;
  delete process.env.AWS_SESSION_TOKEN;
  delete process.env.AWS_PROFILE;
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await main([...args, '--url', door.url, '--region', REGION, ...(WRITES.has(args[0]!) ? ['--actor', 'typed by the caller'] : [])], {
    stdin: new PassThrough(),
    stdout,
    stderr,
  });
  return { code, out, err };
}

beforeAll(async () => {
  ddb = await startDynamoDbLocal();
  const client = dynamoDbClient(ddb.endpoint);
  await createControlTable(client, TABLE);
  cp = new DynamoDbControlPlane(client, TABLE);
  const at = new Date(Date.now() - 60_000).toISOString();
  const rec: TableRecord = {
    source: 'shop',
    table: 'public.orders',
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
      table: 'public.orders',
      version: 1,
      columns: [{ name: 'id', type: 'integer', nullable: false }],
      key: ['id'],
      effectivePosition: makePosition(1n, 0),
      registeredAt: at,
    },
    { at, actor: 'test', action: 'register', source: 'shop', table: 'public.orders', outcome: 'done', detail: {} },
  );
  // The operator Lambda's entry point, configured as the construct configures it.
  process.env[EnvName.CONTROL_TABLE] = TABLE;
  process.env[EnvName.CHANGE_LOG_RETENTION_MS] = String(24 * 3_600_000);
  process.env[EnvName.AWS_ENDPOINT] = ddb.endpoint;
  door = await startOperatorFrontDoor({ region: REGION, accountId: '111111111111', apiId: 'a1b2c3d4e5', principals: [viewer, oncall], handler });
  // The policies grantReadStatus and grantOperate give (the construct test checks they name these routes).
  viewer.allow = door.classArns('read');
  oncall.allow = door.classArns('read', 'operate');
  setDoorOpener(null);
}, 120_000);

afterEach(() => {
  for (const k of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_PROFILE']) {
    if (saved[k] === undefined) delete process.env[k];
    else process.env[k] = saved[k];
  }
});

afterAll(async () => {
  for (const name of [EnvName.CONTROL_TABLE, EnvName.CHANGE_LOG_RETENTION_MS, EnvName.AWS_ENDPOINT]) delete process.env[name];
  await door?.stop();
  await ddb?.stop();
});

describe('cdc on AWS through the operator API (local stand-in of the front door)', () => {
  it('the stand-in verifies SigV4 as AWS documents it (the published IAM ListUsers example)', () => {
    expect(
      sigV4Signature({
        method: 'GET',
        path: '/',
        query: 'Action=ListUsers&Version=2010-05-08',
        headers: { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8', host: 'iam.amazonaws.com', 'x-amz-date': '20150830T123600Z' },
        signedHeaders: ['content-type', 'host', 'x-amz-date'],
        payloadHash: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
        secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
        amzDate: '20150830T123600Z',
        region: 'us-east-1',
        service: 'iam',
      }),
    ).toBe('5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7');
  });

  it('status works for a status-only caller; their pause is refused by IAM before the function runs', async () => {
    const status = await as(viewer, 'status', '--json');
    expect(status.code, status.err).toBe(0);
    expect(JSON.parse(status.out)).toMatchObject({ tables: [{ source: 'shop', table: 'public.orders', state: 'active' }] });
    const before = door.log.length;
    const pause = await as(viewer, 'pause', 'public.orders', '--for', '10m', '--reason', 'not mine to pause');
    expect(pause.code).toBe(3);
    expect(pause.err).toContain(
      `cdc pause: refused (NOT_AUTHORIZED): the operator API refused /operate/pause: User: ${viewer.arn} is not authorized to perform: execute-api:Invoke on resource: ${door.routeArn('/operate/pause')}`,
    );
    expect(door.log.slice(before)).toEqual([{ route: '/operate/pause', caller: viewer.arn, status: 403 }]);
    expect((await cp.getTable('shop', 'public.orders'))?.state).toBe('active');
    expect((await cp.listAudit('shop', 'public.orders')).filter((e) => e.action === 'pause')).toEqual([]);
  });

  it('pause works for an operator, audited with their IAM ARN; accept-schema is not in their grant', async () => {
    const pause = await as(oncall, 'pause', 'public.orders', '--for', '10m', '--reason', 'maintenance');
    expect(pause.code, pause.err).toBe(0);
    expect(pause.out).toMatch(/^shop\/public\.orders paused until /);
    const audit = await as(oncall, 'audit', '--table', 'public.orders', '--json');
    expect(audit.code, audit.err).toBe(0);
    const entries = (JSON.parse(audit.out) as AuditEntry[]).filter((e) => e.action === 'pause');
    expect(entries).toEqual([
      expect.objectContaining({ actor: oncall.arn, outcome: 'done', detail: expect.objectContaining({ note: 'typed by the caller', reason: 'maintenance' }) }),
    ]);
    const accept = await as(oncall, 'resume', 'public.orders', '--accept-schema');
    expect(accept.code).toBe(3);
    expect(accept.err).toContain('refused (NOT_AUTHORIZED): the operator API refused /destructive/accept-schema');
    expect(await as(oncall, 'resume', 'public.orders')).toMatchObject({ code: 0 });
    expect((await cp.getTable('shop', 'public.orders'))?.state).toBe('active');
  });

  it('a request signed with the wrong secret is refused by the front door', async () => {
    const before = door.log.length;
    const r = await as({ accessKeyId: oncall.accessKeyId, secretAccessKey: 'not-the-secret' }, 'status');
    expect(r.code).toBe(3);
    expect(r.err).toContain('The request signature we calculated does not match');
    expect(door.log.slice(before)).toEqual([{ route: '/read/status', caller: null, status: 403 }]);
  });
});
