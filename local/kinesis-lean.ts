/**
 * A Kinesis client for `cdc local`'s kinesalite that sends its three hot requests (PutRecords,
 * GetRecords, GetShardIterator) itself: awsJson 1.1 over a kept-alive HTTP/1.1 agent, the JSON
 * built and parsed directly (Data as base64), no request signing (kinesalite checks that an
 * Authorization header has the shape of a signature, never its value) and no middleware stack
 * (docs/local.md, "The lean Kinesis client"). It is a `KinesisClient`: every other command, and a
 * send with options or a callback, goes to the SDK as before.
 *
 * A successful response gives what the SDK gives (Data as Uint8Array, ApproximateArrivalTimestamp
 * as Date, the same `$metadata`). Anything else (an error response, a broken connection, a timeout)
 * sends the same command once more through the SDK, so every error, retry and throttle is the
 * SDK's own: kinesalite rejects a request with an error response before it changes anything, and
 * on a broken connection the SDK itself would send the request again.
 *
 * Deployed code never uses it: Lambda handlers keep the SDK client (lambda/adapters/aws-clients.ts).
 */
import http from 'node:http';
import { GetRecordsCommand, GetShardIteratorCommand, KinesisClient, PutRecordsCommand, type PutRecordsOutput } from '@aws-sdk/client-kinesis';
import { localConfig } from '../lambda/adapters/aws-clients.ts';
import { fromBase64, NotAnswered, postAwsJson, type AwsJsonMetadata, type Json } from './aws-json-post.ts';

/** kinesalite requires an Authorization header with Credential, Signature and SignedHeaders, and an X-Amz-Date. */
const AUTHORIZATION = 'AWS4-HMAC-SHA256 Credential=local/20200101/us-east-1/kinesis/aws4_request, SignedHeaders=host, Signature=0';
const TARGET = 'Kinesis_20131202.';

/** Where a stream's requests go when it has a kinesalite of its own, and the prefix of the iterators it gave out (local/kinesis.ts, `routeStream`). */
interface Route {
  stream: string;
  host: string;
  port: number;
  iteratorPrefix: string;
}

export type LeanCommandName = 'PutRecordsCommand' | 'GetRecordsCommand' | 'GetShardIteratorCommand';
export type LeanListener = (commandName: LeanCommandName, input: object, output: unknown) => void;

function toBase64(data: Uint8Array): string {
  return (Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength)).toString('base64');
}

export class LeanKinesisClient extends KinesisClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 50 });
  private readonly host: string;
  private readonly port: number;
  private readonly routes: Route[] = [];
  private readonly listeners: LeanListener[] = [];
  private readonly sdkSend: (command: object) => Promise<unknown>;
  /** Requests answered by the lean path, and those sent again through the SDK. */
  readonly counts = { lean: 0, viaSdk: 0 };

  constructor(endpoint: string) {
    super(localConfig(endpoint));
    const url = new URL(endpoint);
    if (url.protocol !== 'http:') throw new Error(`LeanKinesisClient: endpoint ${endpoint} is not http:// (kinesalite in cdc local listens on plain HTTP)`);
    this.host = url.hostname;
    this.port = Number(url.port || 80);
    // The SDK's `send` is overloaded (a promise, or a callback): replaced on the instance, callers keep its types.
    // Only the promise form with no options takes the lean path.
    const sdkSend = this.send.bind(this) as (command: unknown, options?: unknown, cb?: unknown) => unknown;
    this.sdkSend = (command) => sdkSend(command) as Promise<unknown>;
    this.send = ((command: unknown, options?: unknown, cb?: unknown) => {
      if (options === undefined && cb === undefined) {
        if (command instanceof PutRecordsCommand) return this.lean('PutRecordsCommand', command, () => this.putRecords(command));
        if (command instanceof GetRecordsCommand) return this.lean('GetRecordsCommand', command, () => this.getRecords(command));
        if (command instanceof GetShardIteratorCommand) return this.lean('GetShardIteratorCommand', command, () => this.getShardIterator(command));
      }
      return sdkSend(command, options, cb);
    }) as KinesisClient['send'];
  }

  /** Lean-path side of `routeStream`: requests for `stream`, and GetRecords of iterators starting with `iteratorPrefix`, go to `endpoint`. */
  route(stream: string, endpoint: string, iteratorPrefix: string): void {
    const url = new URL(endpoint);
    this.routes.push({ stream, host: url.hostname, port: Number(url.port || 80), iteratorPrefix });
  }

  /**
   * Calls `listener` after each request the lean path answered, with the command's name, input and
   * output (what a middleware at the 'initialize' step sees on the SDK path): the lean side of
   * `PutNotices.attach`, and of the benchmarks' request tally.
   */
  afterSend(listener: LeanListener): void {
    this.listeners.push(listener);
  }

  override destroy(): void {
    this.agent.destroy();
    super.destroy();
  }

  private async lean<T>(name: LeanCommandName, command: PutRecordsCommand | GetRecordsCommand | GetShardIteratorCommand, run: () => Promise<T>): Promise<T> {
    try {
      const out = await run();
      this.counts.lean++;
      for (const listener of this.listeners) listener(name, command.input, out);
      return out;
    } catch (err) {
      if (!(err instanceof NotAnswered)) throw err;
      this.counts.viaSdk++;
      return (await this.sdkSend(command)) as T;
    }
  }

  private routeOf(stream: string | undefined, arn: string | undefined): Route | undefined {
    return this.routes.find((r) => r.stream === stream || (arn !== undefined && arn.endsWith(`/${r.stream}`)));
  }

  private async putRecords(command: PutRecordsCommand): Promise<PutRecordsOutput> {
    const input = command.input;
    const records = input.Records ?? [];
    const entries = new Array<Json>(records.length);
    for (let i = 0; i < records.length; i++) {
      const r = records[i]!;
      entries[i] = { Data: r.Data === undefined ? undefined : toBase64(r.Data), ExplicitHashKey: r.ExplicitHashKey, PartitionKey: r.PartitionKey };
    }
    const body = JSON.stringify({ Records: entries, StreamARN: input.StreamARN, StreamName: input.StreamName });
    const { json, $metadata } = await this.post('PutRecords', body, this.routeOf(input.StreamName, input.StreamARN));
    return { ...json, $metadata } as unknown as PutRecordsOutput;
  }

  private async getRecords(command: GetRecordsCommand): Promise<unknown> {
    const input = command.input;
    let iterator = input.ShardIterator;
    const route = iterator === undefined ? undefined : this.routes.find((r) => iterator!.startsWith(r.iteratorPrefix));
    if (route) iterator = iterator!.slice(route.iteratorPrefix.length);
    const body = JSON.stringify({ Limit: input.Limit, ShardIterator: iterator, StreamARN: input.StreamARN });
    const { json, $metadata } = await this.post('GetRecords', body, route);
    const records = json.Records as Json[] | undefined;
    if (records)
      for (const r of records) {
        if (typeof r.Data === 'string') r.Data = fromBase64(r.Data);
        if (typeof r.ApproximateArrivalTimestamp === 'number') r.ApproximateArrivalTimestamp = new Date(Math.round(r.ApproximateArrivalTimestamp * 1000));
      }
    if (route && typeof json.NextShardIterator === 'string') json.NextShardIterator = route.iteratorPrefix + json.NextShardIterator;
    return { ...json, $metadata };
  }

  private async getShardIterator(command: GetShardIteratorCommand): Promise<unknown> {
    const input = command.input;
    const route = this.routeOf(input.StreamName, input.StreamARN);
    // awsJson sends timestamps as epoch seconds.
    const body = JSON.stringify({ ...input, Timestamp: input.Timestamp === undefined ? undefined : input.Timestamp.getTime() / 1000 });
    const { json, $metadata } = await this.post('GetShardIterator', body, route);
    if (route && typeof json.ShardIterator === 'string') json.ShardIterator = route.iteratorPrefix + json.ShardIterator;
    return { ...json, $metadata };
  }

  /** One POST to the stream's kinesalite (local/aws-json-post.ts). */
  private post(operation: string, body: string, route: Route | undefined): Promise<{ json: Json; $metadata: AwsJsonMetadata }> {
    const to = { agent: this.agent, host: route?.host ?? this.host, port: route?.port ?? this.port };
    return postAwsJson({ ...to, contentType: 'application/x-amz-json-1.1', target: TARGET, authorization: AUTHORIZATION, what: 'kinesalite' }, operation, body);
  }
}
