/**
 * TLS modes and their order (lambda/core/shared/ssl-mode.ts): the deployment's mode is a minimum — no
 * request gets it, a stronger request keeps its own, a weaker one is refused by name; a
 * `postgres://` URL's `sslmode` is counted conservatively.
 */
import { describe, expect, it } from 'vitest';
import { isWeaker, SSL_MODES, SslModeTooWeakError, sslModeAtLeast, urlSslMode, type SslMode } from '../../../lambda/core/shared/ssl-mode.ts';

describe('sslModeAtLeast', () => {
  const pairs = SSL_MODES.flatMap((requested) => SSL_MODES.map((minimum): [SslMode, SslMode] => [requested, minimum]));

  it.each(pairs)('requested %s, minimum %s', (requested, minimum) => {
    const strength = (m: SslMode): number => ['disable', 'require', 'verify-full'].indexOf(m);
    if (strength(requested) < strength(minimum)) {
      let caught: unknown;
      try {
        sslModeAtLeast(requested, minimum, "S: field 'sslmode'", 'CDC_SOURCE_SSL_MODE');
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(SslModeTooWeakError);
      expect(caught).toMatchObject({ name: 'SslModeTooWeakError', code: 'SSL_MODE_TOO_WEAK', requested, minimum });
      expect((caught as Error).message).toContain(
        `S: field 'sslmode' is "${requested}", weaker than the minimum "${minimum}" the deployment sets (CDC_SOURCE_SSL_MODE)`,
      );
      expect(isWeaker(requested, minimum)).toBe(true);
    } else {
      expect(sslModeAtLeast(requested, minimum, 'S', 'M')).toBe(requested);
      expect(isWeaker(requested, minimum)).toBe(false);
    }
  });

  it.each(SSL_MODES)('no request gets the minimum %s', (minimum) => {
    expect(sslModeAtLeast(undefined, minimum, 'S', 'M')).toBe(minimum);
  });
});

describe('urlSslMode', () => {
  it.each([
    ['postgres://u@h/d', 'disable'],
    ['postgres://u@h/d?sslmode=disable', 'disable'],
    ['postgres://u@h/d?sslmode=prefer', 'disable'],
    ['postgres://u@h/d?sslmode=allow', 'disable'],
    ['postgres://u@h/d?ssl=true', 'require'],
    ['postgres://u@h/d?sslmode=no-verify', 'require'],
    ['postgres://u@h/d?sslmode=require', 'require'],
    ['postgres://u@h/d?sslmode=verify-ca', 'require'],
    ['postgres://u@h/d?sslmode=verify-full', 'verify-full'],
  ])('%s counts as %s', (url, mode) => {
    expect(urlSslMode(url, 'CDC_SOURCE_URL')).toBe(mode);
  });

  it('refuses what it cannot read, naming the setting', () => {
    expect(() => urlSslMode('postgres://u@h/d?sslmode=sometimes', 'CDC_SOURCE_URL')).toThrow(
      /CDC_SOURCE_URL: sslmode "sometimes" is not a PostgreSQL TLS mode/,
    );
    expect(() => urlSslMode('not a url', 'CDC_SOURCE_URL')).toThrow(/CDC_SOURCE_URL is not a URL/);
  });
});
