/**
 * AWS SDK clients, created once per process (module scope in handlers). With an endpoint (the
 * local stand-ins) they use the HTTP/1.1 handler — kinesalite fails over HTTP/2 — a fixed region
 * and dummy credentials; without one they use the Lambda environment as usual.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { KinesisClient } from '@aws-sdk/client-kinesis';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { EnvName } from '../../contracts/env.ts';

/** The configuration of a client of a local stand-in (also the SDK side of local/kinesis-lean.ts). */
export function localConfig(endpoint: string) {
  return {
    endpoint,
    region: process.env.AWS_REGION ?? 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    requestHandler: new NodeHttpHandler({ connectionTimeout: 5_000, requestTimeout: 30_000 }),
    maxAttempts: 5,
  };
}

function endpointOf(explicit?: string): string | undefined {
  return explicit ?? process.env[EnvName.AWS_ENDPOINT] ?? undefined;
}

export function kinesisClient(endpoint?: string): KinesisClient {
  const e = endpointOf(endpoint);
  return e ? new KinesisClient(localConfig(e)) : new KinesisClient({});
}

export function dynamoDbClient(endpoint?: string): DynamoDBClient {
  const e = endpointOf(endpoint);
  return e ? new DynamoDBClient(localConfig(e)) : new DynamoDBClient({});
}
