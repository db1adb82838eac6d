/**
 * The operator API on AWS as `cdc` reaches it (docs/operations.md): each request is a POST of
 * `{ request, note? }` to its route (contracts/operator-routes.ts) under the API's URL, signed
 * with SigV4 for `execute-api` with the caller's own credentials (the SDK's default chain:
 * environment, profile, SSO, instance role). API Gateway checks the signature and the caller's
 * `execute-api:Invoke` permission on the route before the operator function runs; a caller
 * without it gets a 403 from API Gateway, which `cdc` reports as a refusal.
 */
import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider, SourceData } from '@smithy/types';
import { OPERATOR_API_METHOD, OPERATOR_ROUTES } from '../../contracts/operator-routes.ts';
import type { OperatorBody, OperatorResponse } from '../../lambda/core/operator/operator-front-door.ts';
import type { OperatorDoor } from '../../local/operator-door.ts';

/** SHA-256 (and its HMAC) for the signer, from node:crypto. */
class NodeSha256 {
  private readonly h: Hash | Hmac;
  constructor(secret?: SourceData) {
    this.h = secret === undefined ? createHash('sha256') : createHmac('sha256', toBuffer(secret));
  }
  update(data: SourceData): void {
    this.h.update(toBuffer(data));
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.h.digest());
  }
}
const toBuffer = (d: SourceData): Buffer =>
  typeof d === 'string' ? Buffer.from(d, 'utf8') : ArrayBuffer.isView(d) ? Buffer.from(d.buffer, d.byteOffset, d.byteLength) : Buffer.from(d);

/** The region of an execute-api URL (`https://ID.execute-api.REGION.amazonaws.com/STAGE/`), or null. */
export function regionOfApiUrl(url: URL): string | null {
  return /^[^.]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$/.exec(url.hostname)?.[1] ?? null;
}

export interface OperatorApiOptions {
  /** The API's stage URL (the stack output `…OperatorApiUrl`). */
  url: string;
  /** @default the URL's region, else the SDK's */
  region?: string | null;
  /** @default the SDK's default credential chain */
  credentials?: AwsCredentialIdentity | AwsCredentialIdentityProvider;
}

/** An error reaching the operator API (not an answer of it). */
export class OperatorApiError extends Error {
  override name = 'OperatorApiError';
}

function post(url: URL, headers: Record<string, string>, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = (url.protocol === 'https:' ? https : http).request(url, { method: OPERATOR_API_METHOD, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', (e) => reject(new OperatorApiError(`cannot reach the operator API at ${url.origin}: ${e.message}`)));
    req.end(body);
  });
}

/** Opens the operator API at `url` as a door of the operator commands. */
export function openOperatorApi(o: OperatorApiOptions): OperatorDoor {
  let base: URL;
  try {
    base = new URL(o.url.endsWith('/') ? o.url : `${o.url}/`);
  } catch {
    throw new OperatorApiError(`--url must be the operator API's URL (the stack output OperatorApiUrl), got '${o.url}'`);
  }
  const region = o.region ?? regionOfApiUrl(base) ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
  if (!region) throw new OperatorApiError(`cannot tell the region of ${base.href}: pass --region`);
  const signer = new SignatureV4({ service: 'execute-api', region, credentials: o.credentials ?? defaultProvider(), sha256: NodeSha256 });
  return {
    running: true,
    async invoke(route: string, body: OperatorBody): Promise<OperatorResponse> {
      if (!OPERATOR_ROUTES.some((r) => r.path === route)) throw new OperatorApiError(`${route} is not a route of the operator API`);
      const url = new URL(route.slice(1), base);
      const text = JSON.stringify(body);
      const signed = await signer.sign({
        method: OPERATOR_API_METHOD,
        protocol: url.protocol,
        hostname: url.hostname,
        ...(url.port ? { port: Number(url.port) } : {}),
        path: url.pathname,
        query: {},
        headers: { host: url.host, 'content-type': 'application/json' },
        body: text,
      });
      const res = await post(url, signed.headers, text);
      let answer: unknown;
      try {
        answer = JSON.parse(res.text);
      } catch {
        answer = null;
      }
      if (typeof answer === 'object' && answer !== null && 'ok' in answer) return answer as OperatorResponse;
      // API Gateway's own answer: a 403 is IAM refusing the route (or the signature).
      const message =
        typeof answer === 'object' && answer !== null
          ? String((answer as { Message?: unknown; message?: unknown }).Message ?? (answer as { message?: unknown }).message ?? res.text)
          : res.text;
      if (res.status === 403) {
        const request = body.request;
        return {
          ok: true,
          result: {
            outcome: 'refused',
            action: request.action,
            source: request.source ?? null,
            table: 'table' in request ? (request.table ?? null) : null,
            code: 'NOT_AUTHORIZED',
            reason: `the operator API refused ${route}: ${message}`,
            hint: 'ask for the grant of this action class (docs/deploy.md "Security: operators, who may do what"), or check your credentials and --region',
          },
        };
      }
      throw new OperatorApiError(`the operator API answered ${res.status} on ${route}: ${message}`);
    },
    async close(): Promise<void> {},
  };
}
