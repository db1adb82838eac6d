/**
 * The heartbeat writer against embedded PostgreSQL. Secrets Manager has no local stand-in: the
 * secret-path test passes a client whose `send` answers GetSecretValue with a secret that points
 * at the embedded server (and says so).
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import pg from 'pg';
import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { createHeartbeatHandler, HeartbeatFailedError } from '../../lambda/handlers/heartbeat-writer.ts';
import { HeartbeatWriter } from '../../lambda/adapters/heartbeat-pg.ts';
import tls from 'node:tls';
import { parseSourceSecret, sourceConnectionConfig, sourceTlsFromEnvironment } from '../../lambda/adapters/source-postgres.ts';
import { RDS_CA_CERTIFICATES } from '../../lambda/adapters/tls.ts';

let cluster: PostgresCluster;
let db = 0;
let url: string;
let admin: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});
afterAll(async () => {
  await cluster?.stop();
});
beforeEach(async () => {
  const name = `hb${++db}`;
  await cluster.createDatabase(name);
  url = cluster.url(name);
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
});
afterEach(async () => {
  await admin?.end();
  vi.restoreAllMocks();
});

/** EMF lines printed while `fn` runs (Powertools prints metrics to stdout). */
async function captureStdout<T>(fn: () => Promise<T>): Promise<{ result: T | undefined; error: unknown; lines: Array<Record<string, unknown>> }> {
  const lines: Array<Record<string, unknown>> = [];
  for (const stream of [process.stdout, process.stderr]) {
    const write = stream.write.bind(stream);
    vi.spyOn(stream, 'write').mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
      const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      if (text.trimStart().startsWith('{')) {
        for (const l of text.split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
        return true;
      }
      return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
    });
  }
  try {
    return { result: await fn(), error: undefined, lines };
  } catch (error) {
    return { result: undefined, error, lines };
  } finally {
    vi.restoreAllMocks();
  }
}

async function rows(schema = 'public'): Promise<Array<{ source_id: string; beat_at: Date }>> {
  return (await admin.query(`SELECT source_id, beat_at FROM ${schema}.cdc_heartbeat ORDER BY source_id`)).rows;
}

describe('heartbeat writer', () => {
  it('creates the table when missing and upserts one row per source, beat after beat', async () => {
    expect((await admin.query("SELECT to_regclass('public.cdc_heartbeat') AS t")).rows[0].t).toBeNull();
    const seen: Date[] = [];
    const writer = new HeartbeatWriter({ source: 'shop', connection: { connectionString: url } });
    const handler = createHeartbeatHandler({
      writer,
      beats: 3,
      intervalMs: 10_000,
      // Between beats: record what the source holds, and let time move on instead of waiting 10 s.
      sleep: async (ms) => {
        expect(ms).toBeGreaterThan(9_000);
        seen.push((await rows())[0]!.beat_at);
        await new Promise((r) => setTimeout(r, 5));
      },
    });
    const { result, lines } = await captureStdout(() => handler());
    expect(result).toEqual({ written: 3, failed: 0 });
    const final = await rows();
    expect(final.map((r) => r.source_id)).toEqual(['shop']);
    seen.push(final[0]!.beat_at);
    expect(seen).toHaveLength(3);
    expect(seen[1]!.getTime()).toBeGreaterThan(seen[0]!.getTime());
    expect(seen[2]!.getTime()).toBeGreaterThan(seen[1]!.getTime());
    const cols = (
      await admin.query(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_name = 'cdc_heartbeat' ORDER BY ordinal_position",
      )
    ).rows;
    expect(cols).toEqual([
      { column_name: 'source_id', data_type: 'text', is_nullable: 'NO' },
      { column_name: 'beat_at', data_type: 'timestamp with time zone', is_nullable: 'NO' },
      { column_name: 'seq', data_type: 'bigint', is_nullable: 'NO' },
      { column_name: 'system_identifier', data_type: 'text', is_nullable: 'YES' },
      { column_name: 'timeline', data_type: 'integer', is_nullable: 'YES' },
    ]);
    // Each beat carries the next sequence number and the source's identity (lambda/core/capture/continuity.ts).
    const beat = (await admin.query("SELECT seq::int AS seq, system_identifier, timeline FROM public.cdc_heartbeat WHERE source_id = 'shop'")).rows[0];
    const control = (await admin.query('SELECT system_identifier::text AS s, (SELECT timeline_id FROM pg_control_checkpoint()) AS t FROM pg_control_system()'))
      .rows[0];
    expect(beat).toEqual({ seq: 3, system_identifier: control.s, timeline: control.t });
    const emf = lines.filter((l) => typeof l._aws === 'object');
    const total = emf.reduce(
      (n, l) => n + (Array.isArray(l.HeartbeatsWritten) ? (l.HeartbeatsWritten as number[]).reduce((a, b) => a + b, 0) : Number(l.HeartbeatsWritten ?? 0)),
      0,
    );
    expect(total).toBe(3);
    expect(emf[0]).toMatchObject({ Source: 'shop', _aws: { CloudWatchMetrics: [{ Namespace: 'CdcPlatform', Dimensions: [['Source']] }] } });
    // The connection is closed at the end of the invocation.
    const open = await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'cdc-heartbeat-writer'");
    expect(open.rows[0].n).toBe(0);
  });

  it('uses an existing table and a non-default schema, one row per source', async () => {
    await admin.query('CREATE SCHEMA cdc');
    await admin.query('CREATE TABLE cdc.cdc_heartbeat (source_id text PRIMARY KEY, beat_at timestamptz NOT NULL)');
    await admin.query("INSERT INTO cdc.cdc_heartbeat VALUES ('other', '2000-01-01')");
    for (const sourceId of ['shop', 'crm', 'shop']) {
      const writer = new HeartbeatWriter({ source: sourceId, schema: 'cdc', connection: { connectionString: url } });
      await writer.beat();
      await writer.close();
    }
    const r = await rows('cdc');
    expect(r.map((x) => x.source_id)).toEqual(['crm', 'other', 'shop']);
    expect(r.find((x) => x.source_id === 'other')!.beat_at.toISOString()).toBe('2000-01-01T00:00:00.000Z');
    expect(Date.now() - r.find((x) => x.source_id === 'shop')!.beat_at.getTime()).toBeLessThan(60_000);
    // The table from before the sequence number was migrated: the existing row keeps 0, beats count on.
    const seqs = (await admin.query('SELECT source_id, seq::int AS seq FROM cdc.cdc_heartbeat ORDER BY source_id')).rows;
    expect(seqs).toEqual([
      { source_id: 'crm', seq: 1 },
      { source_id: 'other', seq: 0 },
      { source_id: 'shop', seq: 2 },
    ]);
  });

  it('reconnects after the connection is killed between beats', async () => {
    const writer = new HeartbeatWriter({ source: 'shop', connection: { connectionString: url } });
    let first = true;
    const handler = createHeartbeatHandler({
      writer,
      beats: 3,
      intervalMs: 0,
      sleep: async () => {
        if (!first) return;
        first = false;
        await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'cdc-heartbeat-writer'");
        await new Promise((r) => setTimeout(r, 200));
      },
    });
    const { result, error } = await captureStdout(() => handler());
    // Either the dropped connection was noticed before the next beat (no failure), or that beat failed loudly; the last one reconnected.
    if (error) {
      expect(error).toBeInstanceOf(HeartbeatFailedError);
      expect((error as HeartbeatFailedError).failed).toBe(1);
    } else {
      expect(result).toEqual({ written: 3, failed: 0 });
    }
    expect((await rows()).map((x) => x.source_id)).toEqual(['shop']);
  });

  it('fails loudly, naming how many beats failed, when the source is unreachable', async () => {
    const writer = new HeartbeatWriter({
      source: 'shop',
      connection: { host: '127.0.0.1', port: 1, user: 'postgres', database: 'x', connectionTimeoutMillis: 2000 },
    });
    const handler = createHeartbeatHandler({ writer, beats: 2, intervalMs: 0, sleep: () => Promise.resolve() });
    const { error, lines } = await captureStdout(() => handler());
    expect(error).toBeInstanceOf(HeartbeatFailedError);
    expect((error as Error).message).toMatch(/^2 of 2 heartbeats failed; last error: .*ECONNREFUSED/);
    expect(lines.filter((l) => l.message === 'Heartbeat failed; the next beat reconnects' && l.level === 'ERROR')).toHaveLength(2);
  });

  it('refuses a bad source id, schema or beat count', () => {
    expect(() => new HeartbeatWriter({ source: 'Shop', connection: {} })).toThrow(/source id/);
    expect(() => new HeartbeatWriter({ source: 'shop', schema: 'x; drop table y', connection: {} })).toThrow(/heartbeat schema/);
    const writer = new HeartbeatWriter({ source: 'shop', connection: {} });
    expect(() => createHeartbeatHandler({ writer, beats: 0 })).toThrow(/CDC_HEARTBEAT_BEATS/);
  });

  it('connects with a Secrets Manager secret (client answered in-process: no local stand-in)', async () => {
    const secret = JSON.stringify({ host: '127.0.0.1', port: cluster.port, username: 'postgres', password: 'unused', dbname: `hb${db}`, sslmode: 'disable' });
    const asked: string[] = [];
    const secrets = {
      send: async (cmd: GetSecretValueCommand) => {
        asked.push(String(cmd.input.SecretId));
        return { SecretString: secret };
      },
    } as unknown as SecretsManagerClient;
    const arn = 'arn:aws:secretsmanager:us-east-1:123456789012:secret:src-abc';
    const writer = new HeartbeatWriter({
      source: 'shop',
      connection: () => sourceConnectionConfig({ secretArn: arn, secrets, applicationName: 'cdc-heartbeat-writer' }),
    });
    await writer.beat();
    await writer.close();
    expect(asked).toEqual([arn]);
    expect((await rows()).map((x) => x.source_id)).toEqual(['shop']);
  });
});

describe('source connection settings', () => {
  it('reads a secret in the RDS shape', () => {
    // verify-full by default: Node's trusted CAs plus the Amazon RDS CAs.
    const verified = parseSourceSecret(JSON.stringify({ host: 'db', port: 5433, username: 'u', password: 'p', dbname: 'd' }), 'S');
    expect(verified).toMatchObject({ host: 'db', port: 5433, user: 'u', password: 'p', database: 'd', ssl: { rejectUnauthorized: true } });
    const ca = (verified.ssl as { ca: string[] }).ca;
    expect(ca).toEqual(expect.arrayContaining([...RDS_CA_CERTIFICATES, ...tls.rootCertificates]));
    expect(parseSourceSecret(JSON.stringify({ host: 'db', port: '5432', username: 'u', password: 'p', dbname: 'd', sslmode: 'require' }), 'S')).toMatchObject({
      port: 5432,
      ssl: { rejectUnauthorized: false },
    });
    expect(parseSourceSecret(JSON.stringify({ host: 'db', username: 'u', password: 'p', dbname: 'd', sslmode: 'disable' }), 'S')).toMatchObject({
      port: 5432,
      ssl: false,
    });
  });

  it('the TLS mode of the deployment is a minimum over the secret, and a named CA replaces the RDS CAs', () => {
    const text = JSON.stringify({ host: 'db', username: 'u', password: 'p', dbname: 'd' });
    expect(parseSourceSecret(text, 'S', { minimumSslMode: 'verify-full' }).ssl).toMatchObject({ rejectUnauthorized: true });
    expect(parseSourceSecret(text, 'S', { minimumSslMode: 'require' }).ssl).toEqual({ rejectUnauthorized: false });
    // A secret asking for more than the minimum keeps it.
    expect(parseSourceSecret(JSON.stringify({ ...JSON.parse(text), sslmode: 'verify-full' }), 'S', { minimumSslMode: 'require' }).ssl).toMatchObject({
      rejectUnauthorized: true,
    });
    const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
    const ca = (parseSourceSecret(text, 'S', { minimumSslMode: 'verify-full', caPem: pem }).ssl as { ca: string[] }).ca;
    expect(ca).toContain(pem);
    expect(ca).not.toContain(RDS_CA_CERTIFICATES[0]);
    expect(sourceTlsFromEnvironment({ CDC_SOURCE_SSL_MODE: 'require' })).toEqual({ minimumSslMode: 'require', caPem: undefined });
    expect(() => sourceTlsFromEnvironment({ CDC_SOURCE_SSL_MODE: 'prefer' })).toThrow(/CDC_SOURCE_SSL_MODE must be one of disable, require, verify-full/);
  });

  it.each([
    ['not json', /S: the secret is not JSON/],
    ['[]', /expected a JSON object/],
    [JSON.stringify({ port: 1, username: 'u', password: 'p', dbname: 'd' }), /field 'host' is missing/],
    [JSON.stringify({ host: 'h', port: 'x', username: 'u', password: 'p', dbname: 'd' }), /field 'port' must be a TCP port/],
    [JSON.stringify({ host: 'h', username: 7, password: 'p', dbname: 'd' }), /field 'username' must be a string/],
    [JSON.stringify({ host: 'h', username: 'u', password: 'p', dbname: 'd', sslmode: 'prefer' }), /field 'sslmode' must be one of/],
  ])('refuses %s', (text, message) => {
    expect(() => parseSourceSecret(text, 'S')).toThrow(message);
  });

  it('prefers a URL and needs one of URL or secret', async () => {
    expect(await sourceConnectionConfig({ url: 'postgres://a@b/c', secretArn: 'arn', applicationName: 'x' })).toEqual({
      connectionString: 'postgres://a@b/c',
      application_name: 'x',
    });
    await expect(sourceConnectionConfig({ applicationName: 'x' })).rejects.toThrow(/neither a source URL nor a source secret ARN/);
  });
});
