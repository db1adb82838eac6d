/**
 * Validation helpers shared by the constructs. Every message starts with the construct path, is
 * lower-case after it and does not end in a period (aws-cdk design guidelines).
 */
import { Duration, Token } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
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
  if (missing.length > 0)
    throw new Error(`${factory} needs ${missing.map((k) => `\`${k}\``).join(', ')}; ${missing.length === 1 ? 'it is' : 'they are'} required`);
}

/**
 * The `peer` of a database's options, checked against its `securityGroup`: one of the two names
 * the database (docs/deploy.md, "Network"); a security group given as `peer` would get no ingress
 * rule, so it is refused with the two ways to say what was meant.
 */
export function databasePeer(factory: string, options: { readonly securityGroup?: unknown; readonly peer?: ec2.IPeer }): ec2.IPeer | undefined {
  if (options.peer === undefined || options.peer === null) return undefined;
  if (options.securityGroup !== undefined) throw new Error(`${factory}: give securityGroup or peer, not both (peer is for a database named by address)`);
  if (typeof (options.peer as { toEgressRuleConfig?: unknown }).toEgressRuleConfig !== 'function')
    throw new Error(
      `${factory}: peer must be an ec2.IPeer (ec2.Peer.ipv4('10.0.0.0/24'), ec2.Peer.prefixList(id), ec2.Peer.securityGroupId(id)), got ${describeValue(options.peer)}`,
    );
  if (ec2.SecurityGroup.isSecurityGroup(options.peer))
    throw new Error(
      `${factory}: peer is a security group; pass it as securityGroup (adds the ingress rule there too), or as ec2.Peer.securityGroupId(group.securityGroupId) for the egress rule only`,
    );
  return options.peer;
}

/** What a prop must hold, checked at runtime for callers without the type checker. */
export type PropKind = 'any' | 'string' | 'boolean' | 'number' | 'string[]' | 'array' | { readonly enumOf: Record<string, string> };

/**
 * Runtime check of a props object against its declared keys (`spec`, kept complete by
 * `satisfies Record<keyof Props, PropKind>` at its definition): an unknown key (a misspelt
 * `masks` for `mask`) or a value of the wrong kind (`deletes: 'HARD'`, a string where a list
 * is expected) is an error naming `where` and the prop, instead of being silently ignored.
 */
export function checkPropKinds(where: string, props: object, spec: Readonly<Record<string, PropKind>>): void {
  const known = Object.keys(spec);
  for (const [key, value] of Object.entries(props)) {
    const kind = spec[key];
    if (kind === undefined) {
      const near = known.find((k) => closeTo(k, key));
      throw new Error(`${where}: unknown prop \`${key}\`${near ? ` (did you mean \`${near}\`?)` : ''}; known props: ${known.join(', ')}`);
    }
    if (value === undefined) continue;
    const problem = kindProblem(kind, value);
    if (problem) throw new Error(`${where}: prop \`${key}\` ${problem}`);
  }
}

function kindProblem(kind: PropKind, value: unknown): string | undefined {
  if (kind === 'any') return undefined;
  if (typeof kind === 'object') {
    const allowed = Object.values(kind.enumOf);
    return allowed.includes(value as string)
      ? undefined
      : `must be one of ${allowed.map((v) => JSON.stringify(v)).join(', ')} (the enum's members), got ${JSON.stringify(value)}`;
  }
  if (kind === 'string[]') {
    if (!Array.isArray(value)) return `must be a list of strings, got ${describeValue(value)}`;
    const bad = value.findIndex((v) => typeof v !== 'string');
    return bad < 0 ? undefined : `must be a list of strings; item ${bad} is ${describeValue(value[bad])}`;
  }
  if (kind === 'array') return Array.isArray(value) ? undefined : `must be a list, got ${describeValue(value)}`;
  return typeof value === kind ? undefined : `must be a ${kind}, got ${describeValue(value)}`;
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'string' ? `the string ${JSON.stringify(value)}` : `a ${typeof value}`;
}

/** Same letters up to one edit, a plural `s`, or case (`masks` → `mask`, `Mask` → `mask`). */
function closeTo(a: string, b: string): boolean {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  if (x === y || `${x}s` === y || x === `${y}s`) return true;
  if (Math.abs(x.length - y.length) > 1) return false;
  let i = 0;
  while (i < x.length && i < y.length && x[i] === y[i]) i++;
  let j = 0;
  while (j < x.length - i && j < y.length - i && x[x.length - 1 - j] === y[y.length - 1 - j]) j++;
  return x.length - i - j <= 1 && y.length - i - j <= 1;
}
