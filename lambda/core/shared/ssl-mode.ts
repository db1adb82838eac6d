/**
 * TLS modes of the PostgreSQL-wire connections the functions open, and which of two is stronger
 * (docs/deploy.md, "TLS to the source"). Pure: lambda/adapters/tls.ts turns a mode into
 * node-postgres `ssl` options.
 *
 * The modes, weakest first: `disable` (plain TCP), `require` (encrypted, the server's certificate
 * not verified), `verify-full` (encrypted, the chain and the host name verified).
 */
import { CdcError } from './errors.ts';

/** The modes, weakest first (the order is the strength). */
export const SSL_MODES = ['disable', 'require', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];
export const DEFAULT_SSL_MODE: SslMode = 'verify-full';

/** Parses a TLS mode; `where` names the setting in the error. */
export function parseSslMode(value: string, where: string): SslMode {
  if (!(SSL_MODES as readonly string[]).includes(value)) {
    throw new CdcError('INVALID_CONFIG', `${where} must be one of ${SSL_MODES.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as SslMode;
}

/** A connection asked for a TLS mode weaker than the minimum the deployment set: refused before connecting. */
export class SslModeTooWeakError extends CdcError {
  constructor(
    readonly where: string,
    readonly requested: SslMode,
    readonly minimum: SslMode,
    minimumSetting: string,
  ) {
    super(
      'SSL_MODE_TOO_WEAK',
      `${where} is ${JSON.stringify(requested)}, weaker than the minimum ${JSON.stringify(minimum)} the deployment sets (${minimumSetting}); ` +
        `the connection is refused before it is opened. Remove the sslmode or set it to ${SSL_MODES.filter((m) => !isWeaker(m, minimum)).join(' or ')}`,
    );
  }
}

/** True when `mode` is weaker than `than`. */
export function isWeaker(mode: SslMode, than: SslMode): boolean {
  return SSL_MODES.indexOf(mode) < SSL_MODES.indexOf(than);
}

/**
 * The mode a connection uses: the one it asks for (`requested`, e.g. a secret's `sslmode`), at
 * least `minimum`; without a request, the minimum. A request weaker than the minimum is refused
 * with `SslModeTooWeakError` (`where` names the request, `minimumSetting` the minimum's setting).
 */
export function sslModeAtLeast(requested: SslMode | undefined, minimum: SslMode, where: string, minimumSetting: string): SslMode {
  if (requested === undefined) return minimum;
  if (isWeaker(requested, minimum)) throw new SslModeTooWeakError(where, requested, minimum, minimumSetting);
  return requested;
}

/**
 * The mode a `postgres://` URL asks for, counted conservatively: no `sslmode` (and no `ssl=true`),
 * `disable`, `allow` and `prefer` as `disable` (node-postgres then opens plain TCP or may fall
 * back to it); `no-verify`, `require`, `verify-ca` and `ssl=true` as `require` (the host name is
 * not certainly verified); only `verify-full` as `verify-full`. `where` names the URL's setting.
 */
export function urlSslMode(url: string, where: string): SslMode {
  let params: URLSearchParams;
  try {
    params = new URL(url).searchParams;
  } catch (e) {
    throw new CdcError('INVALID_CONFIG', `${where} is not a URL (${(e as Error).message})`);
  }
  const mode = params.get('sslmode');
  if (mode === null) return params.get('ssl') === 'true' || params.get('ssl') === '1' ? 'require' : 'disable';
  if (mode === 'disable' || mode === 'allow' || mode === 'prefer') return 'disable';
  if (mode === 'no-verify' || mode === 'require' || mode === 'verify-ca') return 'require';
  if (mode === 'verify-full') return 'verify-full';
  throw new CdcError('INVALID_CONFIG', `${where}: sslmode ${JSON.stringify(mode)} is not a PostgreSQL TLS mode`);
}
