/** The payload store a function is given (docs/large-records.md): the bucket and key the construct grants it. */
import { S3Client } from '@aws-sdk/client-s3';
import { EnvName } from '../../contracts/env.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { S3PayloadStore } from '../adapters/payload-store-s3.ts';

/** The payload bucket the construct grants this function (dead letters' whole records, events stored out of line). */
export function payloadStoreFromEnvironment(): PayloadStore | undefined {
  const bucket = process.env[EnvName.PAYLOAD_BUCKET];
  return bucket ? new S3PayloadStore(new S3Client({}), bucket, '', process.env[EnvName.PAYLOAD_KMS_KEY_ARN] || undefined) : undefined;
}
