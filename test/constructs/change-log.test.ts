import { Duration, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { describe, expect, test } from 'vitest';
import { ChangeLog, type ChangeLogProps } from '../../lib/index.ts';
import { newApp, onlyResource, resourcesOf } from './helpers.ts';

function changeLog(props: ChangeLogProps = {}): { stack: Stack; log: ChangeLog; t: Template } {
  const stack = new Stack(newApp(), 'S');
  const log = new ChangeLog(stack, 'Log', props);
  return { stack, log, t: Template.fromStack(stack) };
}

describe('ChangeLog', () => {
  test('default stream: on-demand, KMS with the AWS managed key, 7 days, retained', () => {
    const { t } = changeLog();
    t.hasResource('AWS::Kinesis::Stream', {
      Properties: {
        RetentionPeriodHours: 168,
        StreamModeDetails: { StreamMode: 'ON_DEMAND' },
        StreamEncryption: { EncryptionType: 'KMS', KeyId: 'alias/aws/kinesis' },
        ShardCount: Match.absent(),
      },
      DeletionPolicy: 'Retain',
    });
  });

  test('shardCount selects provisioned mode; a given key encrypts the stream', () => {
    const stack = new Stack(newApp(), 'S');
    const key = new kms.Key(stack, 'StreamKey', { enableKeyRotation: true });
    new ChangeLog(stack, 'Log', { shardCount: 4, encryptionKey: key, retention: Duration.days(3) });
    Template.fromStack(stack).hasResourceProperties('AWS::Kinesis::Stream', {
      ShardCount: 4,
      StreamModeDetails: { StreamMode: 'PROVISIONED' },
      RetentionPeriodHours: 72,
      StreamEncryption: { EncryptionType: 'KMS', KeyId: stack.resolve(key.keyArn) },
    });
  });

  test('archive bucket: KMS, versioned, public access blocked, TLS only, access logs, lifecycle at archiveRetention', () => {
    const { t, stack, log } = changeLog({ archiveRetention: Duration.days(395) });
    const archive = onlyResource(t, 'AWS::S3::Bucket', 'LogArchive');
    expect(archive.Properties).toMatchObject({
      BucketEncryption: { ServerSideEncryptionConfiguration: [{ BucketKeyEnabled: true, ServerSideEncryptionByDefault: { SSEAlgorithm: 'aws:kms', KMSMasterKeyID: stack.resolve(log.archiveEncryptionKey.keyArn) } }] },
      PublicAccessBlockConfiguration: { BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true },
      VersioningConfiguration: { Status: 'Enabled' },
      LoggingConfiguration: { DestinationBucketName: { Ref: expect.stringMatching(/^LogAccessLogs/) }, LogFilePrefix: 'archive/' },
    });
    expect(archive.DeletionPolicy).toBe('Retain');
    const rules = (archive.Properties.LifecycleConfiguration as { Rules: Array<Record<string, unknown>> }).Rules;
    expect(rules).toContainEqual(expect.objectContaining({ Id: 'expire-at-archive-retention', ExpirationInDays: 395, Status: 'Enabled' }));
    t.hasResourceProperties('AWS::S3::BucketPolicy', {
      Bucket: { Ref: Match.stringLikeRegexp('^LogArchive') },
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } })]) },
    });
    // The access-log bucket: S3-managed encryption (required for log delivery), TLS only, also expiring.
    const logs = onlyResource(t, 'AWS::S3::Bucket', 'LogAccessLogs');
    expect(logs.Properties).toMatchObject({
      BucketEncryption: { ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }] },
      LifecycleConfiguration: { Rules: [expect.objectContaining({ ExpirationInDays: 395 })] },
    });
  });

  test('firehose archives the stream: gzip, one record per line, KMS, time-partitioned prefix', () => {
    const { t, stack, log } = changeLog();
    t.hasResourceProperties('AWS::KinesisFirehose::DeliveryStream', {
      DeliveryStreamType: 'KinesisStreamAsSource',
      KinesisStreamSourceConfiguration: { KinesisStreamARN: stack.resolve(log.stream.streamArn) },
      ExtendedS3DestinationConfiguration: Match.objectLike({
        CompressionFormat: 'GZIP',
        Prefix: 'changes/!{timestamp:yyyy/MM/dd/HH}/',
        ErrorOutputPrefix: Match.stringLikeRegexp('^errors/'),
        EncryptionConfiguration: { KMSEncryptionConfig: { AWSKMSKeyARN: stack.resolve(log.archiveEncryptionKey.keyArn) } },
        ProcessingConfiguration: { Enabled: true, Processors: [Match.objectLike({ Type: 'AppendDelimiterToRecord' })] },
        BufferingHints: { IntervalInSeconds: 300, SizeInMBs: 64 },
      }),
    });
  });

  test('archive replication to a second region uses the replica key', () => {
    const stack = new Stack(newApp(), 'S');
    const replica = s3.Bucket.fromBucketName(stack, 'Replica', 'archive-replica-eu-central-1');
    const replicaKey = kms.Key.fromKeyArn(stack, 'ReplicaKey', 'arn:aws:kms:eu-central-1:111111111111:key/00000000-0000-0000-0000-000000000000');
    new ChangeLog(stack, 'Log', { archiveReplicaBucket: replica, archiveReplicaEncryptionKey: replicaKey });
    Template.fromStack(stack).hasResourceProperties('AWS::S3::Bucket', {
      ReplicationConfiguration: {
        Role: Match.anyValue(),
        Rules: [
          Match.objectLike({
            Destination: Match.objectLike({ Bucket: Match.anyValue(), EncryptionConfiguration: { ReplicaKmsKeyID: replicaKey.keyArn } }),
            SourceSelectionCriteria: { SseKmsEncryptedObjects: { Status: 'Enabled' } },
            Status: 'Enabled',
          }),
        ],
      },
    });
  });

  test('grantRead and grantWrite delegate to the stream', () => {
    const stack = new Stack(newApp(), 'S');
    const log = new ChangeLog(stack, 'Log');
    const reader = new iam.Role(stack, 'Reader', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    const writer = new iam.Role(stack, 'Writer', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    log.grantRead(reader);
    log.grantWrite(writer);
    const t = Template.fromStack(stack);
    const statements = (prefix: string): unknown =>
      resourcesOf(t, 'AWS::IAM::Policy')
        .filter(([id]) => id.startsWith(prefix))
        .flatMap(([, r]) => (r.Properties.PolicyDocument as { Statement: unknown[] }).Statement);
    expect(statements('Reader')).toContainEqual(expect.objectContaining({ Action: expect.arrayContaining(['kinesis:GetRecords', 'kinesis:GetShardIterator']), Resource: stack.resolve(log.stream.streamArn) }));
    expect(statements('Writer')).toContainEqual(expect.objectContaining({ Action: expect.arrayContaining(['kinesis:PutRecord', 'kinesis:PutRecords']), Resource: stack.resolve(log.stream.streamArn) }));
  });

  test('metric methods carry the stream dimension', () => {
    const stack = new Stack(newApp(), 'S');
    const log = new ChangeLog(stack, 'Log');
    const m = log.metricGetRecordsIteratorAgeMilliseconds();
    expect(m.namespace).toBe('AWS/Kinesis');
    expect(stack.resolve(m.dimensions)).toEqual({ StreamName: stack.resolve(log.stream.streamName) });
    expect(log.metricDeliveryToS3DataFreshness().metricName).toBe('DeliveryToS3.DataFreshness');
  });

  test('the archive freshness alarm is on by default, with injected actions, and can be switched off', () => {
    const { t, log } = changeLog();
    expect(log.alarms).toHaveLength(1);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'DeliveryToS3.DataFreshness',
      Namespace: 'AWS/Firehose',
      Threshold: 3600,
      TreatMissingData: 'notBreaching',
      AlarmName: 'S-Log-archive-freshness',
    });
    const { t: quiet } = changeLog({ alarmsEnabled: false });
    quiet.resourceCountIs('AWS::CloudWatch::Alarm', 0);
  });

  test('fails on a retention beyond what Kinesis allows', () => {
    expect(() => changeLog({ retention: Duration.days(400) })).toThrow(/^S\/Log: retention must be between 24 hours and 8760 hours \(365 days\), the limits of a kinesis stream, got 400 days$/);
    expect(() => changeLog({ retention: Duration.hours(12) })).toThrow(/S\/Log: retention must be between 24 hours and 8760 hours/);
  });

  test('fails on an archive retention shorter than the log retention', () => {
    expect(() => changeLog({ retention: Duration.days(30), archiveRetention: Duration.days(7) })).toThrow(
      /^S\/Log: archiveRetention \(7 days\) must not be shorter than retention \(30 days\); the archive must hold at least what the stream holds$/,
    );
  });

  test('fails on a replica bucket without a replica key, and on partial days', () => {
    const stack = new Stack(newApp(), 'S');
    const replica = s3.Bucket.fromBucketName(stack, 'Replica', 'replica');
    expect(() => new ChangeLog(stack, 'Log', { archiveReplicaBucket: replica })).toThrow(/S\/Log: archiveReplicaEncryptionKey is required with archiveReplicaBucket/);
    expect(() => changeLog({ archiveRetention: Duration.hours(36 * 24 + 5) })).toThrow(/archiveRetention must be a whole number of days/);
    expect(() => changeLog({ shardCount: 0 })).toThrow(/S\/Log: shardCount must be an integer from 1 to 100000, got 0/);
  });
});
