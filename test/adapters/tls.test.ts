/**
 * TLS to PostgreSQL as the functions open it (lambda/adapters/tls.ts, docs/deploy.md 2.7),
 * against a real embedded PostgreSQL with `ssl = on` and a certificate from a private CA made
 * here with openssl: `verify-full` (the default) refuses a server whose CA it does not trust and a
 * host name the certificate does not name, and connects with the CA given; `require` is the
 * explicit opt-out that encrypts without verifying; `disable` is plain TCP. The builder every
 * function uses (`sourceConnectionFromEnvironment`) connects to the private-CA server with the CA
 * the environment names and refuses a secret or URL weaker than the environment's minimum.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { chownSync, chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { parseSourceSecret, sourceConnectionFromEnvironment } from '../../lambda/adapters/source-postgres.ts';
import { SslModeTooWeakError } from '../../lambda/core/shared/ssl-mode.ts';

let cluster: PostgresCluster;
let dir: string;
let caPem: string;

function openssl(args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-tls-'));
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=cdc test CA']);
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost']);
  writeFileSync(path.join(dir, 'san.ext'), 'subjectAltName=DNS:localhost\n');
  openssl([
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '2',
    '-extfile',
    'san.ext',
  ]);
  caPem = readFileSync(path.join(dir, 'ca.pem'), 'utf8');
  // The server (run as the postgres OS user when we are root) must own its key, mode 0600.
  chmodSync(dir, 0o755);
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    for (const f of ['server.key', 'server.pem']) chownSync(path.join(dir, f), uid, gid);
  }
  chmodSync(path.join(dir, 'server.key'), 0o600);
  cluster = await startPostgres({
    fast: true,
    settings: { ssl: 'on', ssl_cert_file: path.join(dir, 'server.pem'), ssl_key_file: path.join(dir, 'server.key') },
  });
}, 180_000);

afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Connects with the settings a secret (and the deployment's mode) give, and says whether the session is encrypted. */
async function connect(host: string, tls: Parameters<typeof parseSourceSecret>[2], sslmode?: string): Promise<boolean> {
  const secret = JSON.stringify({ host, port: cluster.port, username: 'postgres', password: 'unused', dbname: 'postgres', ...(sslmode ? { sslmode } : {}) });
  const client = new pg.Client({ ...parseSourceSecret(secret, 'test secret', tls), connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    const r = await client.query<{ ssl: boolean }>('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
    return r.rows[0]!.ssl;
  } finally {
    await client.end();
  }
}

describe('TLS to PostgreSQL', () => {
  it('verify-full by default refuses a certificate from a CA it does not trust', async () => {
    await expect(connect('localhost', {})).rejects.toThrow(/self[- ]signed|unable to (get|verify)|certificate/i);
  });

  it('verify-full with the CA given connects, encrypted; the host name must be the certificate', async () => {
    expect(await connect('localhost', { minimumSslMode: 'verify-full', caPem })).toBe(true);
    // The certificate names localhost only: 127.0.0.1 is refused.
    await expect(connect('127.0.0.1', { minimumSslMode: 'verify-full', caPem })).rejects.toThrow(/altnames|does not match|IP: 127\.0\.0\.1/i);
  });

  it('require is the explicit opt-out: encrypted, not verified; disable is plain TCP', async () => {
    expect(await connect('localhost', { minimumSslMode: 'require' })).toBe(true);
    expect(await connect('127.0.0.1', {}, 'require')).toBe(true);
    expect(await connect('127.0.0.1', {}, 'disable')).toBe(false);
  });
});

/** Whether a session opened with these settings is encrypted. */
async function encrypted(config: pg.ClientConfig): Promise<boolean> {
  const client = new pg.Client({ ...config, connectionTimeoutMillis: 10_000 });
  await client.connect();
  try {
    return (await client.query<{ ssl: boolean }>('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()')).rows[0]!.ssl;
  } finally {
    await client.end();
  }
}

describe('the source connection every function builds from its environment', () => {
  const arn = 'arn:aws:secretsmanager:us-east-1:123456789012:secret:source-AbCdEf';
  const secretsWith = (fields: Record<string, unknown>): SecretsManagerClient =>
    ({
      send: async () => ({
        SecretString: JSON.stringify({ host: 'localhost', port: cluster.port, username: 'postgres', password: 'unused', dbname: 'postgres', ...fields }),
      }),
    }) as unknown as SecretsManagerClient;

  it('a private CA named in the environment: verified and encrypted', async () => {
    const env = { CDC_SOURCE_SECRET_ARN: arn, CDC_SOURCE_SSL_MODE: 'verify-full', CDC_SOURCE_CA_PEM: caPem };
    expect(await encrypted(await sourceConnectionFromEnvironment({ secrets: secretsWith({}), applicationName: 't', env }))).toBe(true);
    // Without the CA the same server is refused (verify-full against the RDS CAs).
    const withoutCa = await sourceConnectionFromEnvironment({
      secrets: secretsWith({}),
      applicationName: 't',
      env: { CDC_SOURCE_SECRET_ARN: arn, CDC_SOURCE_SSL_MODE: 'verify-full' },
    });
    await expect(encrypted(withoutCa)).rejects.toThrow(/self[- ]signed|unable to (get|verify)|certificate/i);
  });

  it('a secret weaker than the minimum is refused; one stronger keeps its own mode', async () => {
    const env = { CDC_SOURCE_SECRET_ARN: arn, CDC_SOURCE_SSL_MODE: 'require' };
    await expect(sourceConnectionFromEnvironment({ secrets: secretsWith({ sslmode: 'disable' }), applicationName: 't', env })).rejects.toBeInstanceOf(
      SslModeTooWeakError,
    );
    const stronger = await sourceConnectionFromEnvironment({ secrets: secretsWith({ sslmode: 'verify-full' }), applicationName: 't', env });
    await expect(encrypted(stronger)).rejects.toThrow(/self[- ]signed|unable to (get|verify)|certificate/i);
    expect(await encrypted(await sourceConnectionFromEnvironment({ secrets: secretsWith({}), applicationName: 't', env }))).toBe(true);
  });

  it('a URL is held to the minimum the environment sets, and left alone without one', async () => {
    const plain = `postgres://postgres@127.0.0.1:${cluster.port}/postgres`;
    const secrets = secretsWith({});
    await expect(
      sourceConnectionFromEnvironment({ secrets, applicationName: 't', env: { CDC_SOURCE_URL: plain, CDC_SOURCE_SSL_MODE: 'require' } }),
    ).rejects.toThrow(/the sslmode of CDC_SOURCE_URL is "disable", weaker than the minimum "require"/);
    expect(
      await encrypted(
        await sourceConnectionFromEnvironment({
          secrets,
          applicationName: 't',
          env: { CDC_SOURCE_URL: `${plain}?sslmode=no-verify`, CDC_SOURCE_SSL_MODE: 'require' },
        }),
      ),
    ).toBe(true);
    expect(await encrypted(await sourceConnectionFromEnvironment({ secrets, applicationName: 't', env: { CDC_SOURCE_URL: plain } }))).toBe(false);
  });
});
