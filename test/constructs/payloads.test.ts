/**
 * The control plane's payload bucket (docs/large-records.md): encrypted with the control plane's
 * key, private, TLS only, versioned, access-logged, expiring; and least privilege: the
 * normalizer may only write its own dead letters and its source's out-of-line events, the
 * warehouse applier only write its own dead letters and read out-of-line events, nothing may
 * list or delete.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, test } from 'vitest';
import { WarehouseConnection, WarehouseSink } from '../../lib/index.ts';
import { EnvName } from '../../contracts/env.ts';
import { fixture, ordersSource, resourcesOf, WAREHOUSE_PEER } from './helpers.ts';

function build() {
  const f = fixture();
  const orders = ordersSource(f);
  new WarehouseSink(f.stack, 'Warehouse', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    vpc: f.vpc,
    sources: [orders],
    connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
  });
  const t = Template.fromStack(f.stack);
  const bucketId = f.stack.getLogicalId(f.controlPlane.payloadBucket!.node.defaultChild as never);
  const keyId = f.stack.getLogicalId(f.controlPlane.encryptionKey.node.defaultChild as never);
  return { f, t, bucketId, keyId };
}

/** The S3 statements of the identity policies attached to the roles whose logical ids start with `rolePrefix`. */
function s3Statements(t: Template, rolePrefix: string): Array<{ actions: string[]; resource: string }> {
  const out: Array<{ actions: string[]; resource: string }> = [];
  for (const [, p] of resourcesOf(t, 'AWS::IAM::Policy')) {
    const roles = (p.Properties.Roles as Array<{ Ref: string }>).map((r) => r.Ref);
    if (!roles.some((r) => r.startsWith(rolePrefix))) continue;
    for (const s of (p.Properties.PolicyDocument as { Statement: Array<{ Action: string | string[]; Resource: unknown }> }).Statement) {
      const actions = [s.Action].flat();
      if (!actions.some((a) => a.startsWith('s3:'))) continue;
      for (const r of [s.Resource].flat()) out.push({ actions, resource: JSON.stringify(r) });
    }
  }
  return out;
}

describe('payload bucket', () => {
  test('encrypted with the control plane key, private, TLS only, versioned, access-logged, expiring, retained', () => {
    const { t, bucketId, keyId } = build();
    const bucket = resourcesOf(t, 'AWS::S3::Bucket').find(([id]) => id === bucketId)![1];
    expect(bucket.Properties.BucketEncryption).toEqual({
      ServerSideEncryptionConfiguration: [
        { BucketKeyEnabled: true, ServerSideEncryptionByDefault: { SSEAlgorithm: 'aws:kms', KMSMasterKeyID: { 'Fn::GetAtt': [keyId, 'Arn'] } } },
      ],
    });
    expect(bucket.Properties.PublicAccessBlockConfiguration).toEqual({
      BlockPublicAcls: true,
      BlockPublicPolicy: true,
      IgnorePublicAcls: true,
      RestrictPublicBuckets: true,
    });
    expect(bucket.Properties.VersioningConfiguration).toEqual({ Status: 'Enabled' });
    expect(bucket.Properties.LoggingConfiguration).toMatchObject({ LogFilePrefix: 'payloads/' });
    expect(bucket.Properties.LifecycleConfiguration).toMatchObject({
      Rules: [{ ExpirationInDays: 400, NoncurrentVersionExpiration: { NoncurrentDays: 30 }, Status: 'Enabled' }],
    });
    expect(bucket.DeletionPolicy).toBe('Retain');
    const policy = resourcesOf(t, 'AWS::S3::BucketPolicy').find(([, p]) => JSON.stringify(p.Properties.Bucket) === JSON.stringify({ Ref: bucketId }))![1];
    expect(JSON.stringify(policy.Properties.PolicyDocument)).toContain('"aws:SecureTransport":"false"');
  });

  test("the normalizer writes only its own dead letters and its source's events; the applier writes its own dead letters and reads events; nobody lists or deletes", () => {
    const { t, bucketId } = build();
    const obj = (prefix: string) => JSON.stringify({ 'Fn::Join': ['', [{ 'Fn::GetAtt': [bucketId, 'Arn'] }, `/${prefix}*`]] });
    const normalizer = s3Statements(t, 'OrdersNormalizer');
    expect(normalizer).toEqual([
      { actions: ['s3:PutObject'], resource: obj('dead-letters/normalizer/') },
      { actions: ['s3:PutObject'], resource: obj('claims/orders/') },
    ]);
    const applier = s3Statements(t, 'WarehouseApplier');
    expect(applier).toEqual([
      { actions: ['s3:PutObject'], resource: obj('dead-letters/warehouse/') },
      { actions: ['s3:GetObject'], resource: obj('claims/') },
    ]);
  });

  test('both functions are told the bucket and key', () => {
    const { t, bucketId, keyId } = build();
    for (const prefix of ['OrdersNormalizer', 'WarehouseApplier']) {
      const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith(prefix))![1];
      const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
      expect(env[EnvName.PAYLOAD_BUCKET]).toEqual({ Ref: bucketId });
      expect(env[EnvName.PAYLOAD_KMS_KEY_ARN]).toEqual({ 'Fn::GetAtt': [keyId, 'Arn'] });
    }
  });
});
