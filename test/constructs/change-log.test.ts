import { CfnParameter, Duration, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import { describe, expect, test } from 'vitest';
import { ChangeLog, type ChangeLogProps } from '../../lib/index.ts';
import { newApp, onlyResource, resourcesOf } from './helpers.ts';

function changeLog(props: ChangeLogProps = {}): { stack: Stack; log: ChangeLog; t: Template } {
  const stack = new Stack(newApp(), 'S');
  const log = new ChangeLog(stack, 'Log', props);
  return { stack, log, t: Template.fromStack(stack) };
}

describe('ChangeLog', () => {
  test("default stream: on-demand, KMS with the platform's own key (rotated, retained), 7 days, retained", () => {
    const { t, stack, log } = changeLog();
    t.hasResource('AWS::Kinesis::Stream', {
      Properties: {
        RetentionPeriodHours: 168,
        StreamModeDetails: { StreamMode: 'ON_DEMAND' },
        StreamEncryption: { EncryptionType: 'KMS', KeyId: stack.resolve(log.encryptionKey!.keyArn) },
        ShardCount: Match.absent(),
      },
      DeletionPolicy: 'Retain',
    });
    expect(stack.resolve(log.encryptionKey!.keyArn)).toEqual({ 'Fn::GetAtt': [expect.stringMatching(/^LogKey/), 'Arn'] });
    t.hasResource('AWS::KMS::Key', { Properties: { EnableKeyRotation: true, Description: Match.stringLikeRegexp('change log') }, DeletionPolicy: 'Retain' });
  });

  test("the platform key encrypts the copier's dead-letter queue and log group and the delivery log group; CloudWatch Logs of the region may use it for this account's log groups only", () => {
    const { t, stack, log } = changeLog();
    const keyArn = stack.resolve(log.encryptionKey!.keyArn);
    const queues = resourcesOf(t, 'AWS::SQS::Queue');
    expect(queues.length).toBeGreaterThan(0);
    for (const [id, q] of queues) expect(q.Properties.KmsMasterKeyId, id).toEqual(keyArn);
    const groups = resourcesOf(t, 'AWS::Logs::LogGroup');
    expect(groups.map(([id]) => id)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^LogArchiveCopier/), expect.stringMatching(/^LogArchiveDelivery/)]),
    );
    for (const [id, g] of groups) expect(g.Properties.KmsKeyId, id).toEqual(keyArn);
    const key = onlyResource(t, 'AWS::KMS::Key', 'LogKey');
    const statements = (key.Properties.KeyPolicy as { Statement: Array<Record<string, unknown>> }).Statement;
    expect(statements).toContainEqual(
      expect.objectContaining({
        Sid: 'AllowCloudWatchLogsOfThisAccount',
        Effect: 'Allow',
        Principal: { Service: { 'Fn::Join': ['', ['logs.', { Ref: 'AWS::Region' }, '.amazonaws.com']] } },
        Condition: {
          ArnLike: {
            'kms:EncryptionContext:aws:logs:arn': {
              'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':logs:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, ':log-group:*']],
            },
          },
        },
      }),
    );
  });

  test('archive: Object Lock in governance mode for archiveRetention by default, compliance mode when asked', () => {
    const gov = onlyResource(changeLog({ archiveRetention: Duration.days(400) }).t, 'AWS::S3::Bucket', 'LogArchive');
    expect(gov.Properties).toMatchObject({
      ObjectLockEnabled: true,
      ObjectLockConfiguration: { ObjectLockEnabled: 'Enabled', Rule: { DefaultRetention: { Mode: 'GOVERNANCE', Days: 400 } } },
      VersioningConfiguration: { Status: 'Enabled' },
    });
    const comp = onlyResource(changeLog({ archiveObjectLockMode: s3.ObjectLockMode.COMPLIANCE }).t, 'AWS::S3::Bucket', 'LogArchive');
    expect(comp.Properties).toMatchObject({
      ObjectLockConfiguration: { ObjectLockEnabled: 'Enabled', Rule: { DefaultRetention: { Mode: 'COMPLIANCE', Days: 365 } } },
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
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [
          {
            BucketKeyEnabled: true,
            ServerSideEncryptionByDefault: { SSEAlgorithm: 'aws:kms', KMSMasterKeyID: stack.resolve(log.archiveEncryptionKey.keyArn) },
          },
        ],
      },
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
    expect(statements('Reader')).toContainEqual(
      expect.objectContaining({
        Action: expect.arrayContaining(['kinesis:GetRecords', 'kinesis:GetShardIterator']),
        Resource: stack.resolve(log.stream.streamArn),
      }),
    );
    expect(statements('Writer')).toContainEqual(
      expect.objectContaining({ Action: expect.arrayContaining(['kinesis:PutRecord', 'kinesis:PutRecords']), Resource: stack.resolve(log.stream.streamArn) }),
    );
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
    // Archive freshness, the archive copier's iterator age and its on-failure queue.
    expect(log.alarms).toHaveLength(3);
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

  test('archive copier: a function on the stream writing the by-table archive under change-log/, put/get/list there only, never delete', () => {
    const { t, stack, log } = changeLog();
    expect(log.archiveCopierPrefix).toBe('change-log/');
    expect(log.archiveCopier).toBeDefined();
    const fns = resourcesOf(t, 'AWS::Lambda::Function').filter(([id]) => id.startsWith('LogArchiveCopier'));
    expect(fns).toHaveLength(1);
    const fn = fns[0]![1].Properties as { Environment: { Variables: Record<string, unknown> }; Handler: string; Role: unknown };
    expect(fn.Environment.Variables).toMatchObject({
      CDC_ARCHIVE_BUCKET: stack.resolve(log.archiveBucket.bucketName),
      CDC_ARCHIVE_PREFIX: 'change-log/',
      CDC_ARCHIVE_KMS_KEY_ARN: stack.resolve(log.archiveEncryptionKey.keyArn),
      POWERTOOLS_SERVICE_NAME: 'cdc-archive-copier',
    });
    const statements = resourcesOf(t, 'AWS::IAM::Policy')
      .filter(([, p]) => JSON.stringify(p.Properties.Roles).includes('LogArchiveCopierServiceRole'))
      .flatMap(
        ([, p]) => (p.Properties.PolicyDocument as { Statement: Array<{ Action: string | string[]; Resource: unknown; Condition?: unknown }> }).Statement,
      );
    const acts = (x: { Action: string | string[] }): string[] => [x.Action].flat();
    const s3Statements = statements.filter((x) => acts(x).some((a) => a.startsWith('s3:')));
    expect(s3Statements.map((x) => [acts(x).sort(), x.Resource, x.Condition ?? null])).toEqual([
      [['s3:ListBucket'], stack.resolve(log.archiveBucket.bucketArn), { StringLike: { 's3:prefix': ['change-log/*'] } }],
      [['s3:GetObject', 's3:PutObject'], { 'Fn::Join': ['', [stack.resolve(log.archiveBucket.bucketArn), '/change-log/*']] }, null],
    ]);
    // Keys: the archive key to put and get objects; the platform key to decrypt the stream and to
    // send to its (encrypted) on-failure queue (CDK's queue grant); no other key, no kms:*.
    expect(statements.filter((x) => acts(x).some((a) => a.startsWith('kms:'))).map((x) => [acts(x), x.Resource])).toEqual([
      [['kms:GenerateDataKey', 'kms:Decrypt'], stack.resolve(log.archiveEncryptionKey.keyArn)],
      [['kms:Decrypt', 'kms:Encrypt', 'kms:ReEncrypt*', 'kms:GenerateDataKey*'], stack.resolve(log.encryptionKey!.keyArn)],
      [['kms:Decrypt'], stack.resolve(log.encryptionKey!.keyArn)],
    ]);
    expect(statements.flatMap(acts)).toEqual(expect.arrayContaining(['kinesis:GetRecords', 'kinesis:GetShardIterator']));
    expect(statements.flatMap(acts).filter((a) => /^s3:(Delete|\*)|^kinesis:Put|^kms:\*/.test(a))).toEqual([]);
    // The mapping: whole batches from the trim horizon, one per shard at a time, retried without limit, never given up
    // (the on-failure queue of the platform's mappings stays empty).
    const mapping = onlyResource(t, 'AWS::Lambda::EventSourceMapping').Properties;
    expect(mapping).toMatchObject({
      EventSourceArn: stack.resolve(log.stream.streamArn),
      FunctionName: { Ref: expect.stringMatching(/^LogArchiveCopier/) },
      StartingPosition: 'TRIM_HORIZON',
      BatchSize: 5000,
      MaximumBatchingWindowInSeconds: 60,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      BisectBatchOnFunctionError: true,
      MaximumRetryAttempts: -1,
      MaximumRecordAgeInSeconds: -1,
      ParallelizationFactor: 1,
    });
    expect(mapping.DestinationConfig).toEqual({
      OnFailure: { Destination: { 'Fn::GetAtt': [expect.stringMatching(/^LogArchiveCopierDeadLetterQueue/), 'Arn'] } },
    });
  });

  test('archive copier alarms: iterator age at a quarter of the retention by default (6 hours for a token retention), the on-failure queue, injected actions; the copier can be switched off', () => {
    const stack = new Stack(newApp(), 'S');
    const topic = new sns.Topic(stack, 'Pager');
    const log = new ChangeLog(stack, 'Log', { alarmActions: [new actions.SnsAction(topic)], archiveCopierBatchingWindow: Duration.seconds(30) });
    const t = Template.fromStack(stack);
    const alarm = onlyResource(t, 'AWS::CloudWatch::Alarm', 'LogArchiveCopierIteratorAgeAlarm').Properties;
    expect(alarm).toMatchObject({
      MetricName: 'IteratorAge',
      Namespace: 'AWS/Lambda',
      Statistic: 'Maximum',
      Threshold: Duration.hours(42).toMilliseconds(),
      EvaluationPeriods: 5,
      TreatMissingData: 'notBreaching',
      AlarmName: 'S-Log-archive-copier-iterator-age',
      AlarmActions: [{ Ref: expect.stringMatching(/^Pager/) }],
      OKActions: [{ Ref: expect.stringMatching(/^Pager/) }],
      Dimensions: [{ Name: 'FunctionName', Value: stack.resolve(log.archiveCopier!.functionName) }],
    });
    expect(onlyResource(t, 'AWS::Lambda::EventSourceMapping').Properties.MaximumBatchingWindowInSeconds).toBe(30);
    expect(onlyResource(t, 'AWS::CloudWatch::Alarm', 'LogArchiveCopierDeadLetterQueueAlarm').Properties).toMatchObject({
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Threshold: 0,
      AlarmActions: [{ Ref: expect.stringMatching(/^Pager/) }],
    });
    const { t: custom } = changeLog({ alarmArchiveCopierIteratorAgeThreshold: Duration.hours(2) });
    expect(onlyResource(custom, 'AWS::CloudWatch::Alarm', 'LogArchiveCopierIteratorAgeAlarm').Properties.Threshold).toBe(7_200_000);
    const tokenStack = new Stack(newApp(), 'T');
    new ChangeLog(tokenStack, 'Log', { retention: Duration.hours(new CfnParameter(tokenStack, 'Hours', { type: 'Number', default: 168 }).valueAsNumber) });
    expect(onlyResource(Template.fromStack(tokenStack), 'AWS::CloudWatch::Alarm', 'LogArchiveCopierIteratorAgeAlarm').Properties.Threshold).toBe(21_600_000);

    const { t: off, log: noCopier } = changeLog({ archiveCopierEnabled: false });
    expect(noCopier.archiveCopier).toBeUndefined();
    expect(noCopier.archiveCopierPrefix).toBeUndefined();
    off.resourceCountIs('AWS::Lambda::Function', 0);
    off.resourceCountIs('AWS::Lambda::EventSourceMapping', 0);
    off.resourceCountIs('AWS::SQS::Queue', 0);
    expect(resourcesOf(off, 'AWS::CloudWatch::Alarm').map(([id]) => id)).toEqual([expect.stringMatching(/^LogArchiveFreshnessAlarm/)]);
    expect(() => changeLog({ archiveCopierBatchingWindow: Duration.minutes(6) })).toThrow(
      /S\/Log: archiveCopierBatchingWindow must be at most 5 minutes, got 6 minutes/,
    );
  });

  test('fails on a retention beyond what Kinesis allows', () => {
    expect(() => changeLog({ retention: Duration.days(400) })).toThrow(
      /^S\/Log: retention must be between 24 hours and 8760 hours \(365 days\), the limits of a kinesis stream, got 400 days$/,
    );
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
    expect(() => new ChangeLog(stack, 'Log', { archiveReplicaBucket: replica })).toThrow(
      /S\/Log: archiveReplicaEncryptionKey is required with archiveReplicaBucket/,
    );
    expect(() => changeLog({ archiveRetention: Duration.hours(36 * 24 + 5) })).toThrow(/archiveRetention must be a whole number of days/);
    expect(() => changeLog({ shardCount: 0 })).toThrow(/S\/Log: shardCount must be an integer from 1 to 100000, got 0/);
  });
});
