import { EnvName } from '../../contracts/env.ts';
import type { IControlPlane } from '../control-plane.ts';

/** The payload bucket settings of a function that uses the control plane's payload store (none without one); docs/large-records.md. */
export function payloadEnvironment(controlPlane: IControlPlane): Record<string, string> {
  if (!controlPlane.payloadBucket) return {};
  return {
    [EnvName.PAYLOAD_BUCKET]: controlPlane.payloadBucket.bucketName,
    ...(controlPlane.payloadEncryptionKey ? { [EnvName.PAYLOAD_KMS_KEY_ARN]: controlPlane.payloadEncryptionKey.keyArn } : {}),
  };
}
