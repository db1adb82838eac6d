/**
 * Where the source PostgreSQL is: a `postgres://` URL (local runs and tests) or a Secrets Manager
 * secret holding `host`, `port`, `username`, `password`, `dbname` (the shape RDS writes), read
 * once per execution environment.
 *
 * TLS with a secret (lambda/adapters/tls.ts): `verify-full` by default — the certificate chain
 * and host name are verified against Node's trusted CAs plus the Amazon RDS CAs (or the CA PEM
 * the deployment names). The mode the construct sets (`CDC_SOURCE_SSL_MODE`) wins over an
 * `sslmode` field in the secret; `require` (encrypted, not verified) is the explicit opt-out for
 * self-signed test servers, `disable` plain TCP. A `postgres://` URL keeps its own `sslmode`
 * (none: plain TCP, as the local pipeline uses with its embedded PostgreSQL).
 */
import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type pg from 'pg';
import { EnvName } from '../../contracts/env.ts';
import { CdcError } from '../core/errors.ts';
import { DEFAULT_SSL_MODE, parseSslMode, pgSsl, type SslMode } from './tls.ts';

/** The source connection cannot be worked out from the configuration. */
export class SourceConnectionError extends CdcError {
  constructor(message: string) {
    super('SOURCE_CONNECTION_CONFIG', message);
  }
}

/** TLS the deployment chose (it wins over the secret's `sslmode`). */
export interface SourceTlsOptions {
  sslMode?: SslMode | undefined;
  /** PEM of the CA(s) of the server certificate, instead of the Amazon RDS CAs. */
  caPem?: string | undefined;
}

/** Parses the JSON text of a source secret into pg connection settings. `where` names the secret in errors. */
export function parseSourceSecret(text: string, where: string, tlsOptions: SourceTlsOptions = {}): pg.ClientConfig {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new SourceConnectionError(`${where}: the secret is not JSON (${(e as Error).message})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new SourceConnectionError(`${where}: expected a JSON object with host, port, username, password, dbname`);
  const s = v as Record<string, unknown>;
  const str = (field: string, required = true): string | undefined => {
    const x = s[field];
    if (x === undefined || x === null || x === '') {
      if (required) throw new SourceConnectionError(`${where}: field '${field}' is missing`);
      return undefined;
    }
    if (typeof x !== 'string') throw new SourceConnectionError(`${where}: field '${field}' must be a string`);
    return x;
  };
  const port = s.port === undefined ? 5432 : Number(s.port);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) throw new SourceConnectionError(`${where}: field 'port' must be a TCP port, got ${JSON.stringify(s.port)}`);
  let sslmode: SslMode;
  try {
    sslmode = tlsOptions.sslMode ?? parseSslMode(str('sslmode', false) ?? DEFAULT_SSL_MODE, `${where}: field 'sslmode'`);
  } catch (e) {
    throw new SourceConnectionError((e as Error).message);
  }
  return {
    host: str('host'),
    port,
    user: str('username'),
    password: str('password'),
    database: str('dbname'),
    ssl: pgSsl(sslmode, tlsOptions.caPem),
  };
}

/** Connection settings from a URL, or else from a Secrets Manager secret. */
export async function sourceConnectionConfig(o: { url?: string | undefined; secretArn?: string | undefined; secrets?: SecretsManagerClient | undefined; applicationName: string; tls?: SourceTlsOptions }): Promise<pg.ClientConfig> {
  if (o.url) return { connectionString: o.url, application_name: o.applicationName };
  if (!o.secretArn) throw new SourceConnectionError('neither a source URL nor a source secret ARN is configured');
  if (!o.secrets) throw new SourceConnectionError('a source secret ARN is configured but no Secrets Manager client was given');
  const out = await o.secrets.send(new GetSecretValueCommand({ SecretId: o.secretArn }));
  if (typeof out.SecretString !== 'string') throw new SourceConnectionError(`${o.secretArn}: the secret has no string value`);
  return { ...parseSourceSecret(out.SecretString, o.secretArn, o.tls), application_name: o.applicationName };
}

/** The source TLS the construct set in the environment (`CDC_SOURCE_SSL_MODE`, `CDC_SOURCE_CA_PEM`). */
export function sourceTlsFromEnvironment(env: NodeJS.ProcessEnv = process.env): SourceTlsOptions {
  const mode = env[EnvName.SOURCE_SSL_MODE];
  return { sslMode: mode ? parseSslMode(mode, EnvName.SOURCE_SSL_MODE) : undefined, caPem: env[EnvName.SOURCE_CA_PEM] || undefined };
}
