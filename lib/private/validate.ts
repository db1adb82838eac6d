/**
 * Validation helpers shared by the constructs. Every message starts with the construct path, is
 * lower-case after it and does not end in a period (aws-cdk design guidelines).
 */
import { Duration, Token } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

import { LOWER_IDENT } from '../../contracts/identifiers.ts';

/** The naming rules, defined once for constructs and runtime in contracts/identifiers.ts. */
export { LOWER_IDENT, PLAIN_IDENT, SLOT_NAME } from '../../contracts/identifiers.ts';

/** Throws an `Error` whose message names the construct path. */
export function fail(scope: IConstruct, message: string): never {
  throw new Error(`${scope.node.path}: ${message}`);
}

/** Derives a lower-case identifier from a construct id: `OrdersDb` → `orders_db`. */
export function idFromConstructId(id: string): string {
  const snake = id
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/[^A-Za-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .toLowerCase();
  const withLetter = /^[a-z]/.test(snake) ? snake : `x_${snake}`;
  return withLetter.slice(0, 63);
}

/** Validates a source or sink id (`what` is `sourceId` or `sinkId`). */
export function checkLowerIdent(scope: IConstruct, what: string, value: string): string {
  if (!LOWER_IDENT.test(value)) {
    fail(scope, `${what} must match ${LOWER_IDENT.source} (a lower-case identifier), got ${JSON.stringify(value)}`);
  }
  return value;
}

/** Kinesis retention limits: 24 hours to 365 days. */
export function checkKinesisRetention(scope: IConstruct, what: string, retention: Duration): void {
  if (!isKnownDuration(retention)) return;
  const hours = retention.toHours({ integral: false });
  if (hours < 24 || hours > 8760) {
    fail(scope, `${what} must be between 24 hours and 8760 hours (365 days), the limits of a kinesis stream, got ${retention.toHumanString()}`);
  }
}

/** An integer within [min, max] unless it is a token. */
export function checkIntegerRange(scope: IConstruct, what: string, value: number | undefined, min: number, max: number): void {
  if (value === undefined || Token.isUnresolved(value)) return;
  if (!Number.isInteger(value) || value < min || value > max) {
    fail(scope, `${what} must be an integer from ${min} to ${max}, got ${value}`);
  }
}

/** The smaller of two durations (the known one when the other is a token; `a` when both are). */
export function minDuration(a: Duration, b: Duration): Duration {
  if (!isKnownDuration(a)) return isKnownDuration(b) ? b : a;
  if (!isKnownDuration(b)) return a;
  return a.toMilliseconds() <= b.toMilliseconds() ? a : b;
}

/** Half a duration, rounded down to whole seconds; `undefined` for a token duration (its half is not known at synth time). */
export function halfOf(d: Duration): Duration | undefined {
  if (!isKnownDuration(d)) return undefined;
  return Duration.seconds(Math.floor(d.toSeconds() / 2));
}

/** True when `d` has a known value at synth time (a token duration cannot be compared or converted). */
export function isKnownDuration(d: Duration): boolean {
  return !d.isUnresolved();
}

/**
 * Runtime guard for callers without the type checker (JavaScript, or TypeScript through `any`):
 * every named prop must be present, otherwise a clear error instead of `Cannot read properties of
 * undefined` deep inside the construct.
 */
export function checkRequiredProps<T extends object>(scope: IConstruct, what: string, props: T | undefined, required: ReadonlyArray<keyof T & string>): T {
  if (props === undefined || props === null || typeof props !== 'object') {
    fail(scope, `${what} props are required (${required.join(', ')})`);
  }
  const missing = required.filter((k) => props[k] === undefined || props[k] === null);
  if (missing.length > 0) fail(scope, `${what} needs ${missing.map((k) => `\`${k}\``).join(', ')}; ${missing.length === 1 ? 'it is' : 'they are'} required`);
  return props;
}

/** The same guard for a static factory's options (no construct yet): the error names the factory. */
export function requireOptions<T extends object>(factory: string, options: T | undefined, required: ReadonlyArray<keyof T & string>): void {
  if (options === undefined || options === null || typeof options !== 'object') throw new Error(`${factory} needs options (${required.join(', ')})`);
  const missing = required.filter((k) => options[k] === undefined || options[k] === null);
  if (missing.length > 0) throw new Error(`${factory} needs ${missing.map((k) => `\`${k}\``).join(', ')}; ${missing.length === 1 ? 'it is' : 'they are'} required`);
}
