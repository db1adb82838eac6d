/**
 * One awsJson request of `cdc local`'s lean clients (local/kinesis-lean.ts for kinesalite,
 * local/dynamodb-lean.ts for DynamoDB Local; docs/local.md, "The lean Kinesis client" and "The
 * lean DynamoDB client"): a POST over a kept-alive HTTP/1.1 agent with a fixed, unsigned
 * Authorization header, the body parsed when the reply is a 200. Anything else (an error reply, a
 * broken connection, a timeout) rejects with `NotAnswered` and is not interpreted here: the client
 * sends the command through the SDK instead, so errors, retries and throttles stay the SDK's own.
 */
import type http from 'node:http';
import { request } from 'node:http';

/** The SDK client's request timeout (lambda/adapters/aws-clients.ts). */
const REQUEST_TIMEOUT_MS = 30_000;
/** The stand-ins read the date header but never check it against the signature (there is none). */
const AMZ_DATE = '20200101T000000Z';

export type Json = Record<string, unknown>;

/** What the SDK puts in `$metadata` for a reply it took on the first attempt. */
export type AwsJsonMetadata = {
  httpStatusCode: number;
  requestId: string | undefined;
  extendedRequestId: string | undefined;
  cfId: string | undefined;
  attempts: number;
  totalRetryDelay: number;
};

/** A lean request that did not give a 200 response: the caller sends the command through the SDK instead. */
export class NotAnswered extends Error {}

/** Where a lean client's requests go and how they are labelled. */
export interface AwsJsonEndpoint {
  agent: http.Agent;
  host: string;
  port: number;
  /** `application/x-amz-json-1.0` (DynamoDB) or `-1.1` (Kinesis). */
  contentType: string;
  /** The `x-amz-target` prefix, e.g. `Kinesis_20131202.`. */
  target: string;
  authorization: string;
  /** The stand-in's name in an error message. */
  what: string;
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** Uint8Array view of a base64 string, as the SDK's deserializer gives it. */
export function fromBase64(s: string): Uint8Array {
  const b = Buffer.from(s, 'base64');
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** One POST; resolves with the parsed body of a 200 response, rejects with `NotAnswered` for anything else. */
export function postAwsJson(to: AwsJsonEndpoint, operation: string, body: string): Promise<{ json: Json; $metadata: AwsJsonMetadata }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        agent: to.agent,
        host: to.host,
        port: to.port,
        method: 'POST',
        path: '/',
        headers: {
          'content-type': to.contentType,
          'x-amz-target': to.target + operation,
          'content-length': Buffer.byteLength(body),
          'x-amz-date': AMZ_DATE,
          authorization: to.authorization,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', () => reject(new NotAnswered()));
        res.on('end', () => {
          if (res.statusCode !== 200) return reject(new NotAnswered());
          const text = Buffer.concat(chunks).toString('utf8');
          let json: Json;
          try {
            json = text === '' ? {} : (JSON.parse(text) as Json);
          } catch {
            // A 200 response was answered (a write happened): never send it again, say what came back.
            return reject(new Error(`${to.what} ${to.host}:${to.port} ${operation}: the 200 response is not JSON: ${text.slice(0, 200)}`));
          }
          resolve({
            json,
            $metadata: {
              httpStatusCode: 200,
              requestId: header(res.headers['x-amzn-requestid']),
              extendedRequestId: header(res.headers['x-amz-id-2']),
              cfId: header(res.headers['x-amz-cf-id']),
              attempts: 1,
              totalRetryDelay: 0,
            },
          });
        });
      },
    );
    req.setTimeout(REQUEST_TIMEOUT_MS, () => req.destroy(new NotAnswered()));
    req.on('error', () => reject(new NotAnswered()));
    req.end(body);
  });
}
