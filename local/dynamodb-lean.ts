/**
 * A DynamoDB client for `cdc local`'s DynamoDB Local that sends the control plane's hot requests
 * (GetItem, PutItem, UpdateItem, Query) itself: awsJson 1.0 over a kept-alive HTTP/1.1 agent, the
 * JSON built and parsed directly, no request signing (DynamoDB Local reads the credential from the
 * Authorization header, never checks the signature) and no middleware stack (docs/local.md, "The
 * lean DynamoDB client"). It is a `DynamoDBClient`: every other command, a command with a binary
 * value in its input, and a send with options or a callback go to the SDK as before.
 *
 * A 200 response gives what the SDK gives (binary values as Uint8Array, numbers as strings, the
 * same `$metadata`). Anything else (an error response, a broken connection, a timeout) sends the
 * same command once more through the SDK and is not interpreted here, so every error (its name,
 * message, fields, `$metadata`), retry and throttle is the SDK's own: a request DynamoDB rejects
 * (a conditional check that failed, a validation error) changed nothing, and on a broken
 * connection the SDK itself would send the request again.
 *
 * Deployed code never uses it: Lambda handlers keep the SDK client (lambda/adapters/aws-clients.ts).
 */
import http from 'node:http';
import { DynamoDBClient, GetItemCommand, PutItemCommand, QueryCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { localConfig } from '../lambda/adapters/aws-clients.ts';
import { fromBase64, NotAnswered, postAwsJson, type AwsJsonMetadata, type Json } from './aws-json-post.ts';

/** DynamoDB Local takes the access key and region from the credential scope of this header: the SDK client's (`localConfig`). */
function authorization(region: string): string {
  return `AWS4-HMAC-SHA256 Credential=local/20200101/${region}/dynamodb/aws4_request, SignedHeaders=host, Signature=0`;
}
const TARGET = 'DynamoDB_20120810.';

type LeanCommand = GetItemCommand | PutItemCommand | UpdateItemCommand | QueryCommand;
export type LeanDynamoCommandName = 'GetItemCommand' | 'PutItemCommand' | 'UpdateItemCommand' | 'QueryCommand';
/** Hears each request the lean path answers: before it is sent (`output` undefined) and after, with its output. */
export type LeanDynamoListener = (commandName: LeanDynamoCommandName, input: object, output: unknown) => void;

/** Whether a value holds bytes anywhere (an attribute value `B` or `BS`): such input goes through the SDK, which encodes them. */
function hasBytes(v: unknown): boolean {
  if (v instanceof Uint8Array) return true;
  if (Array.isArray(v)) return v.some(hasBytes);
  if (v !== null && typeof v === 'object') {
    for (const k in v) if (hasBytes((v as Json)[k])) return true;
  }
  return false;
}

/** An attribute value as the SDK gives it: bytes decoded, maps and lists walked; the rest as sent. */
function attributeValue(av: Json): Json {
  if (typeof av.B === 'string') return { B: fromBase64(av.B) };
  if (Array.isArray(av.BS)) return { BS: (av.BS as string[]).map(fromBase64) };
  if (av.M !== undefined && av.M !== null && typeof av.M === 'object') return { M: attributeMap(av.M as Json) };
  if (Array.isArray(av.L)) return { L: (av.L as Json[]).map(attributeValue) };
  return av;
}

function attributeMap(m: Json | undefined): Json | undefined {
  if (m === undefined || m === null) return m;
  const out: Json = {};
  for (const k in m) out[k] = attributeValue(m[k] as Json);
  return out;
}

export class LeanDynamoDbClient extends DynamoDBClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 50 });
  private readonly host: string;
  private readonly port: number;
  private readonly authorization: string;
  private readonly listeners: LeanDynamoListener[] = [];
  private readonly sdkSend: (command: object) => Promise<unknown>;
  /** Requests answered by the lean path, and those sent again through the SDK. */
  readonly counts = { lean: 0, viaSdk: 0 };

  constructor(endpoint: string) {
    const config = localConfig(endpoint);
    super(config);
    this.authorization = authorization(config.region);
    const url = new URL(endpoint);
    if (url.protocol !== 'http:')
      throw new Error(`LeanDynamoDbClient: endpoint ${endpoint} is not http:// (DynamoDB Local in cdc local listens on plain HTTP)`);
    this.host = url.hostname;
    this.port = Number(url.port || 80);
    // The SDK's `send` is overloaded (a promise, or a callback): replaced on the instance, callers keep its types.
    // Only the promise form with no options takes the lean path.
    const sdkSend = this.send.bind(this) as (command: unknown, options?: unknown, cb?: unknown) => unknown;
    this.sdkSend = (command) => sdkSend(command) as Promise<unknown>;
    this.send = ((command: unknown, options?: unknown, cb?: unknown) => {
      if (options === undefined && cb === undefined && !hasBytes((command as { input?: unknown }).input)) {
        if (command instanceof GetItemCommand) return this.lean('GetItemCommand', command, (j) => ({ ...j, Item: attributeMap(j.Item as Json) }));
        if (command instanceof PutItemCommand) return this.lean('PutItemCommand', command, (j) => ({ ...j, Attributes: attributeMap(j.Attributes as Json) }));
        if (command instanceof UpdateItemCommand)
          return this.lean('UpdateItemCommand', command, (j) => ({ ...j, Attributes: attributeMap(j.Attributes as Json) }));
        if (command instanceof QueryCommand)
          return this.lean('QueryCommand', command, (j) => ({
            ...j,
            Items: Array.isArray(j.Items) ? (j.Items as Json[]).map((i) => attributeMap(i)) : j.Items,
            LastEvaluatedKey: attributeMap(j.LastEvaluatedKey as Json),
          }));
      }
      return sdkSend(command, options, cb);
    }) as DynamoDBClient['send'];
  }

  /**
   * Calls `listener` before each request the lean path sends (output undefined) and after it
   * answered (with the output): what a middleware at the 'initialize' step sees on the SDK path,
   * for the benchmarks' request tally.
   */
  afterSend(listener: LeanDynamoListener): void {
    this.listeners.push(listener);
  }

  override destroy(): void {
    this.agent.destroy();
    super.destroy();
  }

  private async lean(name: LeanDynamoCommandName, command: LeanCommand, shape: (json: Json) => Json): Promise<unknown> {
    for (const listener of this.listeners) listener(name, command.input, undefined);
    let out: Json;
    try {
      const { json, $metadata } = await this.post(name.replace(/Command$/, ''), JSON.stringify(command.input));
      out = { ...shape(json), $metadata };
      // The SDK leaves out what the response did not have.
      for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
    } catch (err) {
      if (!(err instanceof NotAnswered)) throw err;
      this.counts.viaSdk++;
      return this.sdkSend(command);
    }
    this.counts.lean++;
    for (const listener of this.listeners) listener(name, command.input, out);
    return out;
  }

  /** One POST to DynamoDB Local (local/aws-json-post.ts). */
  private post(operation: string, body: string): Promise<{ json: Json; $metadata: AwsJsonMetadata }> {
    const to = { agent: this.agent, host: this.host, port: this.port, authorization: this.authorization };
    return postAwsJson({ ...to, contentType: 'application/x-amz-json-1.0', target: TARGET, what: 'DynamoDB Local' }, operation, body);
  }
}
