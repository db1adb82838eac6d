/**
 * Where the source PostgreSQL is: a `postgres://` URL (local runs and tests) or a Secrets Manager
 * secret holding `host`, `port`, `username`, `password`, `dbname` (the shape RDS writes), read
 * once per execution environment.
 *
 * Every function that connects to the source builds its connection with
 * `sourceConnectionFromEnvironment`, from the one environment the construct sets on each of them
 * (docs/deploy.md, "TLS to the source"): the secret's ARN and the TLS settings
 * (`CDC_SOURCE_SSL_MODE`, `CDC_SOURCE_CA_PEM`; lambda/adapters/tls.ts).
 *
 * The deployment's mode is a minimum: a secret without `sslmode` gets it, a secret whose `sslmode`
 * is stronger keeps its own, and one whose `sslmode` is weaker is refused before anything
 * connects (`SslModeTooWeakError`). Without a deployment mode a secret is held to `verify-full`.
 * `require` (encrypted, not verified) is the explicit opt-out for self-signed test servers,
 * `disable` plain TCP. A `postgres://` URL keeps its own `sslmode` (none: plain TCP, as the local
 * pipeline uses with its embedded PostgreSQL), and is held to the deployment's mode when one is set.
 */
import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type pg from 'pg';
import { EnvName } from '../../contracts/env.ts';
import { CdcError } from '../core/shared/errors.ts';
import { DEFAULT_SSL_MODE, parseSslMode, sslModeAtLeast, urlSslMode, type SslMode } from '../core/shared/ssl-mode.ts';
import { pgSsl } from './tls.ts';

/** The source connection cannot be worked out from the configuration. */
export class SourceConnectionError extends CdcError {
  constructor(message: string) {
    super('SOURCE_CONNECTION_CONFIG', message);
  }
}

/** TLS the deployment chose. */
export interface SourceTlsOptions {
  /** The weakest mode a connection may use (a secret's weaker `sslmode` is refused); unset: none (the secret's own, default `verify-full`). */
  minimumSslMode?: SslMode | undefined;
  /** The setting the minimum comes from, named in a refusal. @default `CDC_SOURCE_SSL_MODE` */
  minimumFrom?: string | undefined;
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
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new SourceConnectionError(`${where}: expected a JSON object with host, port, username, password, dbname`);
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
  if (!Number.isInteger(port) || port <= 0 || port > 65535)
    throw new SourceConnectionError(`${where}: field 'port' must be a TCP port, got ${JSON.stringify(s.port)}`);
  let requested: SslMode | undefined;
  try {
    const field = str('sslmode', false);
    requested = field === undefined ? undefined : parseSslMode(field, `${where}: field 'sslmode'`);
  } catch (e) {
    throw new SourceConnectionError((e as Error).message);
  }
  const sslmode = tlsOptions.minimumSslMode
    ? sslModeAtLeast(requested, tlsOptions.minimumSslMode, `${where}: field 'sslmode'`, tlsOptions.minimumFrom ?? EnvName.SOURCE_SSL_MODE)
    : (requested ?? DEFAULT_SSL_MODE);
  return {
    host: str('host'),
    port,
    user: str('username'),
    password: str('password'),
    database: str('dbname'),
    ssl: pgSsl(sslmode, tlsOptions.caPem),
  };
}

/** Connection settings from a URL, or else from a Secrets Manager secret; `tls.minimumSslMode` holds either to it. */
export async function sourceConnectionConfig(o: {
  url?: string | undefined;
  secretArn?: string | undefined;
  secrets?: SecretsManagerClient | undefined;
  applicationName: string;
  tls?: SourceTlsOptions;
}): Promise<pg.ClientConfig> {
  const minimum = o.tls?.minimumSslMode;
  if (o.url) {
    if (minimum)
      sslModeAtLeast(urlSslMode(o.url, EnvName.SOURCE_URL), minimum, `the sslmode of ${EnvName.SOURCE_URL}`, o.tls?.minimumFrom ?? EnvName.SOURCE_SSL_MODE);
    return { connectionString: o.url, application_name: o.applicationName };
  }
  if (!o.secretArn) throw new SourceConnectionError('neither a source URL nor a source secret ARN is configured');
  if (!o.secrets) throw new SourceConnectionError('a source secret ARN is configured but no Secrets Manager client was given');
  const out = await o.secrets.send(new GetSecretValueCommand({ SecretId: o.secretArn }));
  if (typeof out.SecretString !== 'string') throw new SourceConnectionError(`${o.secretArn}: the secret has no string value`);
  return { ...parseSourceSecret(out.SecretString, o.secretArn, o.tls), application_name: o.applicationName };
}

/** The source TLS the construct set in the environment (`CDC_SOURCE_SSL_MODE`, `CDC_SOURCE_CA_PEM`). */
export function sourceTlsFromEnvironment(env: NodeJS.ProcessEnv = process.env): SourceTlsOptions {
  const mode = env[EnvName.SOURCE_SSL_MODE];
  return { minimumSslMode: mode ? parseSslMode(mode, EnvName.SOURCE_SSL_MODE) : undefined, caPem: env[EnvName.SOURCE_CA_PEM] || undefined };
}

/**
 * The source connection of a function, from the environment the construct sets: `CDC_SOURCE_URL`
 * or the secret `CDC_SOURCE_SECRET_ARN` (or `secretArn`: another secret of the same source, e.g.
 * its read replica's), with the TLS of `CDC_SOURCE_SSL_MODE` and `CDC_SOURCE_CA_PEM`. A secret is
 * held to `verify-full` when the environment names no mode. The one place every function that
 * connects to the source builds its connection (docs/deploy.md, "TLS to the source").
 */
export async function sourceConnectionFromEnvironment(o: {
  secrets: SecretsManagerClient;
  applicationName: string;
  secretArn?: string | undefined;
  env?: NodeJS.ProcessEnv;
}): Promise<pg.ClientConfig> {
  const env = o.env ?? process.env;
  const tls = sourceTlsFromEnvironment(env);
  const url = o.secretArn ? undefined : env[EnvName.SOURCE_URL];
  const secretArn = o.secretArn ?? env[EnvName.SOURCE_SECRET_ARN];
  const held =
    !url && !tls.minimumSslMode ? { ...tls, minimumSslMode: DEFAULT_SSL_MODE, minimumFrom: `the default, ${EnvName.SOURCE_SSL_MODE} being unset` } : tls;
  return sourceConnectionConfig({ url, secretArn, secrets: o.secrets, applicationName: o.applicationName, tls: held });
}

/** The connection to the read replica `CDC_SNAPSHOT_REPLICA_SECRET_ARN` names (same TLS as the source), or undefined without one. */
export async function replicaConnectionFromEnvironment(o: {
  secrets: SecretsManagerClient;
  applicationName: string;
  env?: NodeJS.ProcessEnv;
}): Promise<pg.ClientConfig | undefined> {
  const arn = (o.env ?? process.env)[EnvName.SNAPSHOT_REPLICA_SECRET_ARN];
  return arn ? sourceConnectionFromEnvironment({ ...o, secretArn: arn }) : undefined;
}
