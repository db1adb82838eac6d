/**
 * The warehouse connection the constructs configure (`CDC_WAREHOUSE_URL`, or the secret
 * `CDC_WAREHOUSE_SECRET_ARN`): the warehouse applier, the reconciler and the rebuild worker use it.
 */
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import pg from 'pg';
import { EnvName } from '../../contracts/env.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import { DEFAULT_SSL_MODE, parseSslMode, pgSsl } from '../adapters/tls.ts';

/** Connection settings in the warehouse secret (the shape RDS and Redshift secrets use). */
interface WarehouseSecret {
  host: string;
  port?: number | string;
  username: string;
  password: string;
  dbname?: string;
  /** `disable`, `require` (encrypt, do not verify) or `verify-full` (default); `CDC_WAREHOUSE_SSL_MODE` wins. */
  sslmode?: string;
}

/** The warehouse connection the constructs configure (`CDC_WAREHOUSE_URL`, or the secret); the reconciler uses it too. */
export async function poolFromEnvironment(): Promise<pg.Pool> {
  const url = process.env[EnvName.WAREHOUSE_URL];
  const common = { max: 2, connectionTimeoutMillis: 10_000, idleTimeoutMillis: 60_000 };
  if (url) return new pg.Pool({ connectionString: url, ...common });
  const arn = process.env[EnvName.WAREHOUSE_SECRET_ARN];
  if (!arn) throw new ConfigurationError(`set ${EnvName.WAREHOUSE_URL} or ${EnvName.WAREHOUSE_SECRET_ARN}`);
  const out = await new SecretsManagerClient({}).send(new GetSecretValueCommand({ SecretId: arn }));
  let s: WarehouseSecret;
  try {
    s = JSON.parse(out.SecretString ?? '') as WarehouseSecret;
  } catch {
    throw new ConfigurationError(`secret ${arn} is not JSON with host, port, username, password, dbname`);
  }
  if (!s.host || !s.username) throw new ConfigurationError(`secret ${arn} lacks host or username`);
  // verify-full by default: Node's trusted CAs (Redshift) plus the Amazon RDS CAs (lambda/adapters/tls.ts).
  const envMode = process.env[EnvName.WAREHOUSE_SSL_MODE];
  const ssl = pgSsl(parseSslMode(envMode || s.sslmode || DEFAULT_SSL_MODE, envMode ? EnvName.WAREHOUSE_SSL_MODE : `secret ${arn}: field 'sslmode'`));
  return new pg.Pool({ host: s.host, port: Number(s.port ?? 5439), user: s.username, password: s.password, database: s.dbname, ssl, ...common });
}
