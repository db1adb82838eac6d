/**
 * The IAM role a Redshift cluster (or Serverless workgroup) assumes for the loader's `COPY … FROM
 * 's3://…' MANIFEST` (docs/deploy.md, §11): read the staged objects and manifests under the staging
 * prefix, and nothing more. `s3:GetObject` on `<prefix>*`; `s3:ListBucket` on the bucket only for
 * keys under the prefix (a condition on `s3:prefix`); `kms:Decrypt` on the bucket's key when it has
 * a customer managed one.
 */
import { Stack, Validations, type CfnElement } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';

export interface RedshiftCopyRoleProps {
  bucket: s3.IBucket;
  /** The staging prefix (ends with `/`). */
  prefix: string;
  description: string;
}

/** The cluster role: trusted by Redshift (provisioned and Serverless), granted exactly COPY's reads on the staging prefix. */
export function redshiftCopyRole(scope: Construct, id: string, p: RedshiftCopyRoleProps): iam.Role {
  const role = new iam.Role(scope, id, {
    assumedBy: new iam.CompositePrincipal(new iam.ServicePrincipal('redshift.amazonaws.com'), new iam.ServicePrincipal('redshift-serverless.amazonaws.com')),
    description: p.description,
  });
  role.addToPolicy(new iam.PolicyStatement({ actions: ['s3:GetObject'], resources: [p.bucket.arnForObjects(`${p.prefix}*`)] }));
  role.addToPolicy(
    new iam.PolicyStatement({ actions: ['s3:ListBucket'], resources: [p.bucket.bucketArn], conditions: { StringLike: { 's3:prefix': [`${p.prefix}*`] } } }),
  );
  if (p.bucket.encryptionKey) role.addToPolicy(new iam.PolicyStatement({ actions: ['kms:Decrypt'], resources: [p.bucket.encryptionKey.keyArn] }));
  const bucket = p.bucket.node.defaultChild;
  if (bucket) {
    Validations.of(role).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${Stack.of(scope).getLogicalId(bucket as CfnElement)}.Arn>/${p.prefix}*]`,
      reason: `COPY reads the objects and manifests the loads name, all under the staging prefix ${p.prefix}`,
    });
  }
  return role;
}
