/**
 * Where the source PostgreSQL is: a `postgres://` URL (local runs and tests) or a Secrets Manager
 * secret holding `host`, `port`, `username`, `password`, `dbname` (the shape RDS writes), read
 * once per execution environment.
 *
 * TLS with a secret: `sslmode` in the secret picks it, like libpq: `require` (the default:
 * encrypted, server certificate not verified — RDS certificates are not in Node's trust store
 * unless a CA bundle is shipped), `verify-full` (encrypted and verified against the trusted
 * CAs), or `disable`.
 */
import { GetSecretValueCommand, type SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type pg from 'pg';
import { CdcError } from '../core/errors.ts';

/** The source connection cannot be worked out from the configuration. */
export class SourceConnectionError extends CdcError {
  constructor(message: string) {
    super('SOURCE_CONNECTION_CONFIG', message);
  }
}

const SSL_MODES = ['disable', 'require', 'verify-full'] as const;

/** Parses the JSON text of a source secret into pg connection settings. `where` names the secret in errors. */
export function parseSourceSecret(text: string, where: string): pg.ClientConfig {
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
  const sslmode = str('sslmode', false) ?? 'require';
  if (!(SSL_MODES as readonly string[]).includes(sslmode)) throw new SourceConnectionError(`${where}: field 'sslmode' must be one of ${SSL_MODES.join(', ')}, got ${JSON.stringify(sslmode)}`);
  return {
    host: str('host'),
    port,
    user: str('username'),
    password: str('password'),
    database: str('dbname'),
    ssl: sslmode === 'disable' ? false : { rejectUnauthorized: sslmode === 'verify-full' },
  };
}

/** Connection settings from a URL, or else from a Secrets Manager secret. */
export async function sourceConnectionConfig(o: { url?: string | undefined; secretArn?: string | undefined; secrets?: SecretsManagerClient | undefined; applicationName: string }): Promise<pg.ClientConfig> {
  if (o.url) return { connectionString: o.url, application_name: o.applicationName };
  if (!o.secretArn) throw new SourceConnectionError('neither a source URL nor a source secret ARN is configured');
  if (!o.secrets) throw new SourceConnectionError('a source secret ARN is configured but no Secrets Manager client was given');
  const out = await o.secrets.send(new GetSecretValueCommand({ SecretId: o.secretArn }));
  if (typeof out.SecretString !== 'string') throw new SourceConnectionError(`${o.secretArn}: the secret has no string value`);
  return { ...parseSourceSecret(out.SecretString, o.secretArn), application_name: o.applicationName };
}
