/**
 * A local stand-in of the operator API's front door (docs/operations.md): the smallest honest
 * imitation of what API Gateway does with `AWS_IAM` authorization and a Lambda proxy
 * integration, to test `cdc` on AWS end to end without AWS. Never compared with real API
 * Gateway. For each POST to `/{stage}/{route}` it
 *
 * 1. verifies the SigV4 signature (service `execute-api`) against known test credentials, with
 *    its own implementation from node:crypto (not the signer `cdc` uses);
 * 2. maps the access key to its principal's ARN and evaluates that principal's allowed
 *    `execute-api:Invoke` resource ARNs (IAM wildcards `*` and `?`) against the route's ARN,
 *    answering API Gateway's 403 `{ Message }` when none matches;
 * 3. hands the real operator handler an API Gateway proxy event with the route as `resource` and
 *    the ARN as `requestContext.identity.userArn`, and answers its proxy result.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { APIGatewayProxyResult, Context } from 'aws-lambda';
import { OPERATOR_API_METHOD, OPERATOR_API_STAGE, OPERATOR_ROUTES, type OperatorActionClass } from '../../contracts/operator-routes.ts';

export interface StandInPrincipal {
  accessKeyId: string;
  secretAccessKey: string;
  /** The caller's ARN as API Gateway reports it (`requestContext.identity.userArn`). */
  arn: string;
  /** `execute-api:Invoke` resource ARNs the principal's policies allow (wildcards allowed). */
  allow: string[];
}

export interface FrontDoorStandIn {
  /** The stage URL, as the stack output `OperatorApiUrl` gives it. */
  url: string;
  /** The route ARN of a path, as a policy names it. */
  routeArn(path: string): string;
  /** The route ARNs of the given classes (what the construct's grants allow). */
  classArns(...classes: OperatorActionClass[]): string[];
  /** Every request the stand-in answered: route, caller (or null) and status. */
  readonly log: Array<{ route: string; caller: string | null; status: number }>;
  stop(): Promise<void>;
}

const sha256Hex = (data: string | Buffer): string => createHash('sha256').update(data).digest('hex');
const hmac = (key: string | Buffer, data: string): Buffer => createHmac('sha256', key).update(data, 'utf8').digest();
const rfc3986 = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

/** The SigV4 signature of a request (AWS Signature Version 4, signed headers as given). */
export function sigV4Signature(r: {
  method: string;
  path: string;
  query: string;
  headers: Record<string, string>;
  signedHeaders: string[];
  payloadHash: string;
  secretAccessKey: string;
  amzDate: string;
  region: string;
  service: string;
}): string {
  const canonicalQuery = r.query
    .split('&')
    .filter(Boolean)
    .map((kv) => kv.split('=').map((x) => rfc3986(decodeURIComponent(x ?? ''))) as [string, string?])
    .sort(([a, av], [b, bv]) => (a === b ? ((av ?? '') < (bv ?? '') ? -1 : 1) : a < b ? -1 : 1))
    .map(([k, v]) => `${k}=${v ?? ''}`)
    .join('&');
  const canonicalUri =
    r.path
      .split('/')
      .map((seg) => rfc3986(decodeURIComponent(seg)))
      .join('/') || '/';
  const canonicalHeaders = r.signedHeaders.map((h) => `${h}:${(r.headers[h] ?? '').trim().replace(/\s+/g, ' ')}\n`).join('');
  const canonicalRequest = [r.method, canonicalUri, canonicalQuery, canonicalHeaders, r.signedHeaders.join(';'), r.payloadHash].join('\n');
  const date = r.amzDate.slice(0, 8);
  const scope = `${date}/${r.region}/${r.service}/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', r.amzDate, scope, sha256Hex(canonicalRequest)].join('\n');
  const key = hmac(hmac(hmac(hmac(`AWS4${r.secretAccessKey}`, date), r.region), r.service), 'aws4_request');
  return createHmac('sha256', key).update(stringToSign, 'utf8').digest('hex');
}

/** IAM's resource wildcards: `*` any run of characters, `?` one character. */
const matches = (pattern: string, arn: string): boolean =>
  new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  ).test(arn);

type Verdict = { principal: StandInPrincipal } | { status: number; body: unknown };

function authenticate(req: http.IncomingMessage, body: Buffer, principals: StandInPrincipal[], region: string): Verdict {
  const auth = req.headers.authorization;
  const m = auth
    ? /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(auth)
    : null;
  if (!m) return { status: 403, body: { message: 'Missing Authentication Token' } };
  const [, akid, date, scopeRegion, service, signed, signature] = m as unknown as [string, string, string, string, string, string, string];
  const principal = principals.find((p) => p.accessKeyId === akid);
  if (!principal) return { status: 403, body: { message: 'The security token included in the request is invalid.' } };
  const amzDate = String(req.headers['x-amz-date'] ?? '');
  const at = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(amzDate);
  if (!at || amzDate.slice(0, 8) !== date || Math.abs(Date.UTC(+at[1]!, +at[2]! - 1, +at[3]!, +at[4]!, +at[5]!, +at[6]!) - Date.now()) > 5 * 60_000)
    return { status: 403, body: { message: 'Signature expired or X-Amz-Date missing' } };
  if (service !== 'execute-api' || scopeRegion !== region)
    return { status: 403, body: { message: `Credential should be scoped to a valid region and service execute-api, not '${scopeRegion}/${service}'` } };
  const signedHeaders = signed.split(';');
  if (!signedHeaders.includes('host') || !signedHeaders.includes('x-amz-date')) return { status: 403, body: { message: 'host and x-amz-date must be signed' } };
  const payloadHash = sha256Hex(body);
  const declared = req.headers['x-amz-content-sha256'];
  if (declared !== undefined && declared !== payloadHash)
    return { status: 403, body: { message: 'The provided x-amz-content-sha256 header does not match what was computed.' } };
  const url = new URL(req.url ?? '/', 'http://stand-in');
  const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(',') : String(v ?? '')]));
  const expected = sigV4Signature({
    method: req.method ?? '',
    path: url.pathname,
    query: url.search.slice(1),
    headers,
    signedHeaders,
    payloadHash,
    secretAccessKey: principal.secretAccessKey,
    amzDate,
    region,
    service,
  });
  if (!timingSafeEqual(Buffer.from(expected, 'hex'), Buffer.from(signature, 'hex')))
    return { status: 403, body: { message: 'The request signature we calculated does not match the signature you provided.' } };
  return { principal };
}

/** Starts the stand-in on a free local port, in front of `handler` (the operator Lambda's entry point or its equivalent). */
export async function startOperatorFrontDoor(o: {
  region: string;
  accountId: string;
  apiId: string;
  principals: StandInPrincipal[];
  handler: (event: unknown, context: Context) => Promise<APIGatewayProxyResult>;
}): Promise<FrontDoorStandIn> {
  const log: FrontDoorStandIn['log'] = [];
  const routeArn = (path: string): string => `arn:aws:execute-api:${o.region}:${o.accountId}:${o.apiId}/${OPERATOR_API_STAGE}/${OPERATOR_API_METHOD}${path}`;
  let requests = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const answer = (status: number, body: unknown, caller: string | null, route: string): void => {
          log.push({ route, caller, status });
          res.writeHead(status, { 'content-type': 'application/json' }).end(typeof body === 'string' ? body : JSON.stringify(body));
        };
        const body = Buffer.concat(chunks);
        const url = new URL(req.url ?? '/', 'http://stand-in');
        const prefix = `/${OPERATOR_API_STAGE}`;
        const route = OPERATOR_ROUTES.find((r) => `${prefix}${r.path}` === url.pathname);
        if (!route || req.method !== OPERATOR_API_METHOD) return answer(403, { message: 'Missing Authentication Token' }, null, url.pathname);
        const verdict = authenticate(req, body, o.principals, o.region);
        if ('status' in verdict) return answer(verdict.status, verdict.body, null, route.path);
        const { principal } = verdict;
        const resource = routeArn(route.path);
        if (!principal.allow.some((p) => matches(p, resource))) {
          return answer(
            403,
            { Message: `User: ${principal.arn} is not authorized to perform: execute-api:Invoke on resource: ${resource}` },
            principal.arn,
            route.path,
          );
        }
        const requestId = `stand-in-${++requests}`;
        const event = {
          resource: route.path,
          path: route.path,
          httpMethod: OPERATOR_API_METHOD,
          headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
          queryStringParameters: null,
          body: body.toString('utf8'),
          isBase64Encoded: false,
          requestContext: {
            accountId: o.accountId,
            apiId: o.apiId,
            stage: OPERATOR_API_STAGE,
            resourcePath: route.path,
            httpMethod: OPERATOR_API_METHOD,
            requestId,
            identity: { userArn: principal.arn, caller: principal.accessKeyId, accountId: o.accountId, sourceIp: req.socket.remoteAddress ?? null },
          },
        };
        const context = { awsRequestId: requestId, functionName: 'cdc-operator', getRemainingTimeInMillis: () => 30_000 } as unknown as Context;
        try {
          const result = await o.handler(event, context);
          answer(result.statusCode, result.body, principal.arn, route.path);
        } catch (e) {
          // What API Gateway answers when the integration fails.
          answer(502, { message: `Internal server error (${(e as Error).message})` }, principal.arn, route.path);
        }
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/${OPERATOR_API_STAGE}/`,
    routeArn,
    classArns: (...classes) => OPERATOR_ROUTES.filter((r) => classes.includes(r.actionClass)).map((r) => routeArn(r.path)),
    log,
    stop: () => new Promise<void>((resolve, reject) => server.close((e) => (e ? reject(e) : resolve()))),
  };
}
