/**
 * Every function that connects to the source refuses a secret whose `sslmode` is weaker than the
 * minimum its environment sets (docs/deploy.md, "TLS to the source"), with `SslModeTooWeakError`,
 * before it opens any connection. Each handler's Lambda entry point runs as on AWS: the
 * environment the construct sets, the secret read through the Secrets Manager API (a local
 * stand-in of `GetSecretValue`), and a TCP listener where the secret's host points, which must
 * see no connection at all.
 */
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import type { Context } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { EnvName } from '../../contracts/env.ts';
import { SSL_MODES, type SslMode } from '../../lambda/core/shared/ssl-mode.ts';

const PRIMARY = 'arn:aws:secretsmanager:us-east-1:123456789012:secret:source-AbCdEf';
const REPLICA = 'arn:aws:secretsmanager:us-east-1:123456789012:secret:replica-AbCdEf';

let secretsApi: http.Server;
let database: net.Server;
let responses: http.Server;
/** Secret ARN → secret text the stand-in returns. */
const secrets = new Map<string, string>();
/** Connections the database listener accepted. */
let connections = 0;
/** CloudFormation responses the lifecycle function sent. */
const cfnResponses: Array<{ Status: string; Reason: string }> = [];
/** The environment between the tests (with the stand-in's endpoint). */
let saved: NodeJS.ProcessEnv = {};

function secretText(sslmode?: SslMode): string {
  const { port } = database.address() as net.AddressInfo;
  return JSON.stringify({ host: '127.0.0.1', port, username: 'u', password: 'p', dbname: 'd', ...(sslmode ? { sslmode } : {}) });
}

async function listen<T extends http.Server | net.Server>(server: T): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as net.AddressInfo).port;
}

beforeAll(async () => {
  secretsApi = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const id = (JSON.parse(body) as { SecretId: string }).SecretId;
      const text = req.headers['x-amz-target'] === 'secretsmanager.GetSecretValue' ? secrets.get(id) : undefined;
      res.writeHead(text === undefined ? 400 : 200, { 'content-type': 'application/x-amz-json-1.1' });
      res.end(
        JSON.stringify(text === undefined ? { __type: 'ResourceNotFoundException', message: `no secret ${id}` } : { ARN: id, Name: id, SecretString: text }),
      );
    });
  });
  database = net.createServer((socket) => {
    connections++;
    socket.destroy();
  });
  responses = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      cfnResponses.push(JSON.parse(body) as { Status: string; Reason: string });
      res.end();
    });
  });
  const [api] = await Promise.all([listen(secretsApi), listen(database), listen(responses)]);
  Object.assign(process.env, {
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    AWS_ENDPOINT_URL_SECRETS_MANAGER: `http://127.0.0.1:${api}`,
  });
  saved = { ...process.env };
});

afterEach(() => {
  for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
  Object.assign(process.env, saved);
  secrets.clear();
  cfnResponses.length = 0;
  connections = 0;
  vi.resetModules();
});

afterAll(async () => {
  await Promise.all([secretsApi, database, responses].map((s) => new Promise((r) => s.close(r))));
});

const context = { getRemainingTimeInMillis: () => 600_000, functionName: 'test', awsRequestId: 'r' } as unknown as Context;

/** The functions that connect to the source: the environment their construct sets besides the secret and TLS, and how their entry point is run. */
const FUNCTIONS: Record<string, { env: Record<string, string>; run: () => Promise<unknown>; named?: false }> = {
  'snapshot worker': {
    env: { [EnvName.SOURCE_ID]: 'shop', [EnvName.RAW_STREAM]: 'raw' },
    run: async () => (await import('../../lambda/handlers/snapshot-worker.ts')).handler({}, context),
  },
  'poll worker': {
    env: { [EnvName.SOURCE_ID]: 'shop', [EnvName.RAW_STREAM]: 'raw' },
    run: async () => (await import('../../lambda/handlers/poll-worker.ts')).handler({}, context),
  },
  'slot monitor': {
    env: { [EnvName.SOURCE_ID]: 'shop', [EnvName.SLOT_NAME]: 'cdc_shop' },
    run: async () => (await import('../../lambda/handlers/slot-monitor.ts')).handler({}, context),
  },
  'heartbeat writer': {
    env: { [EnvName.SOURCE_ID]: 'shop', [EnvName.HEARTBEAT_BEATS]: '1' },
    run: async () => (await import('../../lambda/handlers/heartbeat-writer.ts')).handler({}, context),
  },
  reconciler: {
    env: { [EnvName.SOURCE_ID]: 'shop', [EnvName.SINK_ID]: 'warehouse' },
    run: async () => (await import('../../lambda/handlers/reconciler.ts')).handler({ tier: 'default' }, context),
  },
  'task lifecycle (slot preparation)': {
    env: {},
    // The secret arrives with the custom resource; the function answers CloudFormation, never throws.
    run: async () => {
      const { port } = responses.address() as net.AddressInfo;
      await (
        await import('../../lambda/handlers/task-lifecycle.ts')
      ).handler(
        {
          RequestType: 'Create',
          ServiceToken: 'x',
          ResponseURL: `http://127.0.0.1:${port}/`,
          StackId: 's',
          RequestId: 'r',
          LogicalResourceId: 'ReplicationSlot',
          ResourceType: 'Custom::CdcReplicationSlot',
          ResourceProperties: {
            ServiceToken: 'x',
            Action: 'prepare-slot',
            SecretArn: PRIMARY,
            DatabaseName: 'd',
            SlotName: 'cdc_shop',
            Ssl: 'verify-full',
            TaskIdentifier: 't',
            ConfigHash: 'h',
            RemoveSlotOnDelete: 'false',
            SourceId: 'shop',
          },
        },
        context,
      );
      const [answer] = cfnResponses;
      if (answer?.Status !== 'FAILED') throw new Error(`expected a FAILED response, got ${JSON.stringify(answer)}`);
      // The reason CloudFormation shows is the error's message (without its name).
      throw new Error(answer.Reason);
    },
    named: false,
  },
};

/** Every (secret sslmode, minimum) pair where the secret asks for less. */
const WEAKER: Array<[SslMode, SslMode]> = SSL_MODES.flatMap((minimum, i) => SSL_MODES.slice(0, i).map((asked): [SslMode, SslMode] => [asked, minimum]));

describe('every function that connects to the source refuses an sslmode weaker than the deployment minimum, before connecting', () => {
  it('covers every weaker pair', () => {
    expect(WEAKER).toEqual([
      ['disable', 'require'],
      ['disable', 'verify-full'],
      ['require', 'verify-full'],
    ]);
  });

  for (const [name, fn] of Object.entries(FUNCTIONS)) {
    it.each(WEAKER)(`${name}: secret sslmode %s, minimum %s`, async (asked, minimum) => {
      secrets.set(PRIMARY, secretText(asked));
      Object.assign(process.env, fn.env, { [EnvName.SOURCE_SECRET_ARN]: PRIMARY, [EnvName.SOURCE_SSL_MODE]: minimum });
      const error = await fn.run().then(
        () => null,
        (e: unknown) => e as Error,
      );
      expect(error, name).not.toBeNull();
      expect(fn.named === false ? error!.message : `${error!.name}: ${error!.message}`).toMatch(
        new RegExp(
          `${fn.named === false ? '^' : 'SslModeTooWeakError: .*'}${PRIMARY}: field 'sslmode' is "${asked}", weaker than the minimum "${minimum}" the deployment sets \\(CDC_SOURCE_SSL_MODE\\)`,
        ),
      );
      expect(connections, `${name} opened a connection`).toBe(0);
    });
  }

  it.each(['snapshot worker', 'poll worker'])("%s: the read replica's secret is held to the same minimum", async (name) => {
    secrets.set(PRIMARY, secretText());
    secrets.set(REPLICA, secretText('disable'));
    Object.assign(process.env, FUNCTIONS[name]!.env, {
      [EnvName.SOURCE_SECRET_ARN]: PRIMARY,
      [EnvName.SNAPSHOT_REPLICA_SECRET_ARN]: REPLICA,
      [EnvName.SOURCE_SSL_MODE]: 'require',
    });
    await expect(FUNCTIONS[name]!.run()).rejects.toThrow(new RegExp(`${REPLICA}: field 'sslmode' is "disable", weaker than the minimum "require"`));
    expect(connections).toBe(0);
  });

  it('without a mode in the environment, a secret is held to verify-full', async () => {
    secrets.set(PRIMARY, secretText('disable'));
    Object.assign(process.env, FUNCTIONS['slot monitor']!.env, { [EnvName.SOURCE_SECRET_ARN]: PRIMARY });
    await expect(FUNCTIONS['slot monitor']!.run()).rejects.toThrow(
      /weaker than the minimum "verify-full" the deployment sets \(the default, CDC_SOURCE_SSL_MODE being unset\)/,
    );
    expect(connections).toBe(0);
  });
});
