import { EnvName } from '../../contracts/env.ts';
import type { IControlPlane } from '../control-plane.ts';

/** The payload bucket settings of a function that uses the control plane's payload store (none without one); docs/large-records.md. */
export function payloadEnvironment(control: IControlPlane): Record<string, string> {
  if (!control.payloadBucket) return {};
  return {
    [EnvName.PAYLOAD_BUCKET]: control.payloadBucket.bucketName,
    ...(control.payloadEncryptionKey ? { [EnvName.PAYLOAD_KMS_KEY_ARN]: control.payloadEncryptionKey.keyArn } : {}),
  };
}
