import { Duration, Size } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as sns from 'aws-cdk-lib/aws-sns';
import { describe, expect, test } from 'vitest';
import { CapturedTable, ChangeLog, DeleteMode, WarehouseConnection, WarehouseSink, type WarehouseSinkProps } from '../../lib/index.ts';
import { fixture, type Fixture, onlyResource, ordersSource, resourcesOf, WAREHOUSE_PEER } from './helpers.ts';

function sink(f: Fixture, overrides: Partial<WarehouseSinkProps> = {}): WarehouseSink {
  const orders = ordersSource(f);
  return new WarehouseSink(f.stack, 'Warehouse', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [orders],
    connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
    vpc: f.vpc,
    ...overrides,
  });
}

describe('WarehouseSink', () => {
  test('applier mapping: CDC-safe defaults and an on-failure destination', () => {
    const f = fixture();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    const mapping = resourcesOf(t, 'AWS::Lambda::EventSourceMapping').find(([id]) => id.startsWith('WarehouseApplier'))![1];
    expect(mapping.Properties).toMatchObject({
      EventSourceArn: f.stack.resolve(f.log.stream.streamArn),
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      BisectBatchOnFunctionError: true,
      // Outages delay, they never skip: no retry or record-age limit (-1 is CloudFormation's "infinite").
      MaximumRetryAttempts: -1,
      MaximumRecordAgeInSeconds: -1,
      ParallelizationFactor: 1,
      StartingPosition: 'TRIM_HORIZON',
      BatchSize: 1000,
      MaximumBatchingWindowInSeconds: 5,
      DestinationConfig: { OnFailure: { Destination: f.stack.resolve(s.deadLetterQueue.queueArn) } },
    });
  });

  test('a stuck sink is alarmed by default: iterator age at a quarter of the log retention, end-to-end lag with silence breaching', () => {
    const f = fixture();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'AWS/Lambda',
      MetricName: 'IteratorAge',
      Threshold: Duration.days(7).toMilliseconds() / 4,
      Dimensions: [{ Name: 'FunctionName', Value: f.stack.resolve(s.applier.functionName) }],
      AlarmDescription: Match.stringLikeRegexp('retried without limit'),
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'EndToEndLag', TreatMissingData: 'breaching' });
  });

  test('merge thresholds (docs/warehouse-apply.md): unset leaves the applier defaults, set reaches the applier, out of range is refused by name', () => {
    const plain = fixture();
    const p = sink(plain);
    const env = (s: WarehouseSink, f: Fixture) =>
      (
        resourcesOf(Template.fromStack(f.stack), 'AWS::Lambda::Function').find(([id]) => id === f.stack.getLogicalId(s.applier.node.defaultChild as never))![1]
          .Properties as { Environment: { Variables: Record<string, unknown> } }
      ).Environment.Variables;
    expect(env(p, plain)).not.toHaveProperty('CDC_MERGE_MAX_ROWS');
    expect(env(p, plain)).not.toHaveProperty('CDC_MERGE_MAX_AGE_MS');
    expect(env(p, plain)).not.toHaveProperty('CDC_MERGE_ON_SCHEDULE');
    const tuned = fixture();
    const s = sink(tuned, { mergeMaxRows: 200_000, mergeMaxAge: Duration.minutes(5), mergeOnSchedule: true });
    expect(env(s, tuned)).toMatchObject({ CDC_MERGE_MAX_ROWS: '200000', CDC_MERGE_MAX_AGE_MS: '300000', CDC_MERGE_ON_SCHEDULE: 'true' });
    expect(() => sink(fixture(), { mergeMaxRows: 0 })).toThrow(/mergeMaxRows must be an integer from 1 to 10000000, got 0/);
    expect(() => sink(fixture(), { mergeMaxAge: Duration.hours(2) })).toThrow(/mergeMaxAge must be between 1 second and 1 hour, got 2 hours/);
  });

  test(`the applier's young generation is sized from its memory (NODE_OPTIONS, docs/performance-log.md, "The applier's young generation")`, () => {
    const env = (f: Fixture, s: WarehouseSink) =>
      resourcesOf(Template.fromStack(f.stack), 'AWS::Lambda::Function').find(([id]) => id === f.stack.getLogicalId(s.applier.node.defaultChild as never))![1]
        .Properties as { MemorySize: number; Environment: { Variables: Record<string, unknown> } };
    const plain = fixture();
    expect(env(plain, sink(plain))).toMatchObject({ MemorySize: 1024, Environment: { Variables: { NODE_OPTIONS: '--max-semi-space-size=64' } } });
    const small = fixture();
    expect(env(small, sink(small, { memorySize: Size.mebibytes(512) }))).toMatchObject({
      MemorySize: 512,
      Environment: { Variables: { NODE_OPTIONS: '--max-semi-space-size=32' } },
    });
    const large = fixture();
    expect(env(large, sink(large, { memorySize: Size.mebibytes(4096) }))).toMatchObject({
      MemorySize: 4096,
      Environment: { Variables: { NODE_OPTIONS: '--max-semi-space-size=64' } },
    });
  });

  test('mapping settings can be tuned', () => {
    const f = fixture();
    sink(f, { batchSize: 200, maxBatchingWindow: Duration.seconds(0), retryAttempts: 20, maxRecordAge: Duration.hours(6), parallelizationFactor: 4 });
    Template.fromStack(f.stack).hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      FunctionName: { Ref: Match.stringLikeRegexp('^WarehouseApplier') },
      BatchSize: 200,
      MaximumRetryAttempts: 20,
      MaximumRecordAgeInSeconds: 6 * 3600,
      ParallelizationFactor: 4,
    });
  });

  test('applier: in the VPC, reads the warehouse secret, gets the sink id (delete modes come from the control plane, not the environment)', () => {
    const f = fixture();
    sink(f);
    const t = Template.fromStack(f.stack);
    const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('WarehouseApplier'))![1];
    expect(fn.Properties.VpcConfig).toMatchObject({ SecurityGroupIds: [{ 'Fn::GetAtt': [expect.stringMatching(/^WarehouseSecurityGroup/), 'GroupId'] }] });
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env).toMatchObject({ CDC_SINK_ID: 'warehouse', CDC_WAREHOUSE_SECRET_ARN: f.stack.resolve(f.warehouseSecret.secretArn) });
    expect(env.CDC_TABLE_CONFIG).toBeUndefined();
    t.hasResourceProperties('AWS::IAM::Policy', {
      Roles: [{ Ref: Match.stringLikeRegexp('^WarehouseApplierServiceRole') }],
      PolicyDocument: {
        Statement: Match.arrayWith([Match.objectLike({ Action: Match.arrayWith(['secretsmanager:GetSecretValue']) })]),
      },
    });
  });

  test('freshnessTarget drives the end-to-end lag alarm of each source; silence is breaching', () => {
    const f = fixture();
    const orders = ordersSource(f);
    const billing = ordersSource(f, { tables: [CapturedTable.of('billing.invoices', { deletes: DeleteMode.HARD })] }, 'Billing');
    const topic = new sns.Topic(f.stack, 'Topic');
    const s = new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders, billing],
      connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
      vpc: f.vpc,
      freshnessTarget: Duration.seconds(90),
      alarmActions: [new cloudwatchActions.SnsAction(topic)],
    });
    const t = Template.fromStack(f.stack);
    for (const sourceId of ['orders', 'billing']) {
      t.hasResourceProperties('AWS::CloudWatch::Alarm', {
        Namespace: 'CdcPlatform',
        MetricName: 'EndToEndLag',
        Dimensions: Match.arrayWith([
          { Name: 'Sink', Value: 'warehouse' },
          { Name: 'Source', Value: sourceId },
        ]),
        Statistic: 'Maximum',
        Period: 60,
        Threshold: 90_000,
        EvaluationPeriods: 5,
        DatapointsToAlarm: 5,
        ComparisonOperator: 'GreaterThanThreshold',
        TreatMissingData: 'breaching',
        AlarmActions: [{ Ref: Match.stringLikeRegexp('^Topic') }],
        OKActions: [{ Ref: Match.stringLikeRegexp('^Topic') }],
        AlarmName: `Test-warehouse-end-to-end-lag-${sourceId}`,
      });
    }
    // A merge that keeps failing: the sink's MergeErrors in each of 15 minutes (the schedule tries every minute).
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'CdcPlatform',
      MetricName: 'MergeErrors',
      Dimensions: [{ Name: 'Sink', Value: 'warehouse' }],
      Statistic: 'Sum',
      Period: 60,
      Threshold: 0,
      EvaluationPeriods: 15,
      DatapointsToAlarm: 15,
      ComparisonOperator: 'GreaterThanThreshold',
      TreatMissingData: 'notBreaching',
      AlarmActions: [{ Ref: Match.stringLikeRegexp('^Topic') }],
      AlarmName: 'Test-warehouse-merge-errors',
    });
    expect(s.metricDeltaRowsMerged().metricName).toBe('DeltaRowsMerged');
    // Per source: lag and dead letters; per sink: apply errors, merge errors, dead-letter queue, iterator age.
    expect(s.alarms).toHaveLength(2 * 2 + 4);
  });

  test('alarms can be switched off', () => {
    const f = fixture();
    const s = sink(f, { alarmsEnabled: false });
    expect(s.alarms).toHaveLength(0);
    const alarms = resourcesOf(Template.fromStack(f.stack), 'AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith('Warehouse'));
    expect(alarms).toHaveLength(0);
  });

  test("the dead-letter queue is encrypted with the change log's key and alarmed", () => {
    const f = fixture();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    expect(onlyResource(t, 'AWS::SQS::Queue', 'WarehouseDeadLetterQueue').Properties).toMatchObject({
      KmsMasterKeyId: f.stack.resolve(f.log.encryptionKey!.keyArn),
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [{ Name: 'QueueName', Value: f.stack.resolve(s.deadLetterQueue.queueName) }],
      Threshold: 0,
    });
  });

  describe('fails', () => {
    test('fails with no sources', () => {
      expect(() => sink(fixture(), { sources: [] })).toThrow(/^Test\/Warehouse: sources must not be empty/);
    });

    test('fails on a source that publishes to another change log', () => {
      const f = fixture();
      const other = new ChangeLog(f.stack, 'OtherLog');
      expect(() => sink(f, { changeLog: other })).toThrow(
        /^Test\/Warehouse: source orders \(Test\/Orders\) publishes to a different change log than this sink reads$/,
      );
    });

    test('accepts the same table id from two sources (each source has its own warehouse schema)', () => {
      const f = fixture();
      const a = ordersSource(f);
      const b = ordersSource(f, {}, 'OrdersCopy');
      const s = new WarehouseSink(f.stack, 'Warehouse', {
        controlPlane: f.controlPlane,
        changeLog: f.log,
        sources: [a, b],
        connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
        vpc: f.vpc,
      });
      expect(s.alarms.length).toBeGreaterThan(0);
    });

    test('fails on a freshness target below the heartbeat resolution or beyond the log', () => {
      expect(() => sink(fixture(), { freshnessTarget: Duration.seconds(10) })).toThrow(/Test\/Warehouse: freshnessTarget must be at least 30 seconds/);
      expect(() => sink(fixture(), { freshnessTarget: Duration.days(8) })).toThrow(
        /Test\/Warehouse: freshnessTarget \(8 days\) must be shorter than the change-log retention \(7 days\)/,
      );
    });

    test('fails on a record age the stream would not keep, and on out-of-range settings', () => {
      expect(() => sink(fixture(), { maxRecordAge: Duration.days(7) })).toThrow(
        /Test\/Warehouse: maxRecordAge \(7 days\) must be shorter than the stream retention \(7 days\)/,
      );
      expect(() => sink(fixture(), { retryAttempts: -2 })).toThrow(/Test\/Warehouse: retryAttempts must be an integer from -1 to 10000/);
      expect(() => sink(fixture(), { batchSize: 20_000 })).toThrow(/Test\/Warehouse: batchSize must be an integer from 1 to 10000/);
      expect(() => sink(fixture(), { parallelizationFactor: 11 })).toThrow(/Test\/Warehouse: parallelizationFactor must be an integer from 1 to 10/);
      expect(() => sink(fixture(), { sinkId: 'warehouse-1' })).toThrow(/Test\/Warehouse: sinkId must match/);
    });
  });
});

describe('WarehouseSink resume replay', () => {
  test('the applier knows the change log and a schedule runs its resume replay every minute', () => {
    const f = fixture();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ CDC_SINK_ID: s.sinkId, CDC_CHANGE_LOG_STREAM: f.stack.resolve(f.log.stream.streamName) }) },
    });
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [
        Match.objectLike({ Arn: f.stack.resolve(s.applier.functionArn), Input: JSON.stringify({ cdcReplay: true }), RetryPolicy: { MaximumRetryAttempts: 0 } }),
      ],
    });
  });

  test('the applier is told how many batches of one shard run at once, so its holds say so and a resume leaves no lane behind (docs/operations.md)', () => {
    const factorOf = (overrides: Partial<WarehouseSinkProps>): unknown => {
      const f = fixture();
      sink(f, overrides);
      const fn = resourcesOf(Template.fromStack(f.stack), 'AWS::Lambda::Function').find(([id]) => id.startsWith('WarehouseApplier'))![1];
      return (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables.CDC_PARALLELIZATION_FACTOR;
    };
    expect(factorOf({})).toBe('1');
    expect(factorOf({ parallelizationFactor: 3 })).toBe('3');
    // Several batches of one shard at once no longer give up the resume's no-skip guarantee: no warning.
    const f = fixture();
    sink(f, { parallelizationFactor: 2 });
    expect(Annotations.fromStack(f.stack).findWarning('*', Match.stringLikeRegexp('parallelizationFactor'))).toEqual([]);
  });
});

describe('WarehouseSink redshiftStaging: the cluster role COPY assumes (docs/deploy.md, §11)', () => {
  const copyRoleOf = (t: Template): { role: Record<string, unknown>; statements: Array<Record<string, unknown>> } => {
    const roles = resourcesOf(t, 'AWS::IAM::Role').filter(([id]) => id.startsWith('WarehouseCopyRole'));
    expect(roles).toHaveLength(1);
    const [roleId, role] = roles[0]!;
    const policies = resourcesOf(t, 'AWS::IAM::Policy').filter(([, p]) => JSON.stringify(p.Properties.Roles).includes(roleId));
    expect(policies).toHaveLength(1);
    return { role: role.Properties, statements: (policies[0]![1].Properties.PolicyDocument as { Statement: Array<Record<string, unknown>> }).Statement };
  };

  test('exactly GetObject on the prefix, ListBucket limited to the prefix, Decrypt on the bucket key; trusted by Redshift only', () => {
    const f = fixture();
    const key = new kms.Key(f.stack, 'StagingKey');
    const bucket = new s3.Bucket(f.stack, 'Staging', { encryption: s3.BucketEncryption.KMS, encryptionKey: key });
    const s = sink(f, { redshiftStaging: { bucket, prefix: 'loads/dw/' } });
    expect(s.stagingPrefix).toBe('loads/dw/');
    const t = Template.fromStack(f.stack);
    const { role, statements } = copyRoleOf(t);
    const principals = (role.AssumeRolePolicyDocument as { Statement: Array<{ Principal: { Service: string | string[] } }> }).Statement.flatMap((x) =>
      [x.Principal.Service].flat(),
    );
    expect(principals.sort()).toEqual(['redshift-serverless.amazonaws.com', 'redshift.amazonaws.com']);
    expect(role.ManagedPolicyArns).toBeUndefined();
    const r = (v: unknown): unknown => f.stack.resolve(v);
    expect(statements).toEqual([
      { Action: 's3:GetObject', Effect: 'Allow', Resource: { 'Fn::Join': ['', [r(bucket.bucketArn), '/loads/dw/*']] } },
      { Action: 's3:ListBucket', Effect: 'Allow', Resource: r(bucket.bucketArn), Condition: { StringLike: { 's3:prefix': ['loads/dw/*'] } } },
      { Action: 'kms:Decrypt', Effect: 'Allow', Resource: r(key.keyArn) },
    ]);
    // The role is the cluster's, not the applier's: nothing else is granted the staging prefix through it.
    expect(s.copyRole).toBeDefined();
  });

  test('an S3-managed bucket: no KMS statement; the prefix defaults to cdc/<sink id>/', () => {
    const f = fixture();
    const bucket = new s3.Bucket(f.stack, 'Staging');
    const s = sink(f, { redshiftStaging: { bucket } });
    expect(s.stagingPrefix).toBe('cdc/warehouse/');
    const { statements } = copyRoleOf(Template.fromStack(f.stack));
    expect(statements.map((x) => x.Action)).toEqual(['s3:GetObject', 's3:ListBucket']);
    expect(JSON.stringify(statements)).toContain('cdc/warehouse/*');
  });

  test('without redshiftStaging there is no cluster role; on PostgreSQL, or with a bad prefix, it is refused by name', () => {
    const f = fixture();
    const s = sink(f);
    expect(s.copyRole).toBeUndefined();
    expect(resourcesOf(Template.fromStack(f.stack), 'AWS::IAM::Role').filter(([id]) => id.startsWith('WarehouseCopyRole'))).toHaveLength(0);
    const g = fixture();
    const bucket = new s3.Bucket(g.stack, 'Staging');
    expect(() => sink(g, { connection: WarehouseConnection.postgres({ secret: g.warehouseSecret }), redshiftStaging: { bucket } })).toThrow(
      /redshiftStaging is for a Redshift warehouse/,
    );
    const h = fixture();
    const b2 = new s3.Bucket(h.stack, 'Staging');
    expect(() => sink(h, { redshiftStaging: { bucket: b2, prefix: 'no-slash' } })).toThrow(/redshiftStaging.prefix must be plain key characters/);
  });
});

describe('WarehouseSink redshiftStaging: the loader function (docs/warehouse-apply.md, "Redshift: the applier")', () => {
  /** Every statement of the policies attached to the role of the function whose logical id starts with `prefix`. */
  const statementsOf = (t: Template, prefix: string): Array<{ Action: string | string[]; Resource: unknown; Effect: string }> => {
    const fn = onlyResource(t, 'AWS::Lambda::Function', prefix);
    const roleId = (fn.Properties.Role as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    return resourcesOf(t, 'AWS::IAM::Policy')
      .filter(([, p]) => JSON.stringify(p.Properties.Roles).includes(roleId))
      .flatMap(([, p]) => (p.Properties.PolicyDocument as { Statement: Array<{ Action: string | string[]; Resource: unknown; Effect: string }> }).Statement);
  };
  const withAction = (ss: ReturnType<typeof statementsOf>, action: string): unknown[] =>
    ss.filter((x) => x.Effect === 'Allow' && [x.Action].flat().includes(action)).map((x) => x.Resource);

  test('reserved concurrency 1, a schedule every minute; PutObject on its own prefix only; invoke of the loader only; synth works', () => {
    const f = fixture();
    const key = new kms.Key(f.stack, 'StagingKey');
    const bucket = new s3.Bucket(f.stack, 'Staging', { encryption: s3.BucketEncryption.KMS, encryptionKey: key });
    const s = sink(f, { redshiftStaging: { bucket, prefix: 'dw/' }, freshnessTarget: Duration.minutes(3) });
    f.app.synth();
    const t = Template.fromStack(f.stack);
    const r = (v: unknown): unknown => f.stack.resolve(v);
    const loader = onlyResource(t, 'AWS::Lambda::Function', 'WarehouseRedshiftLoader');
    expect(loader.Properties.ReservedConcurrentExecutions).toBe(1);
    expect(r(s.redshiftLoader!.functionArn)).toEqual({ 'Fn::GetAtt': [expect.stringMatching(/^WarehouseRedshiftLoader/), 'Arn'] });
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [Match.objectLike({ Arn: r(s.redshiftLoader!.functionArn) })],
    });

    const objects = (p: string): unknown => ({ 'Fn::Join': ['', [r(bucket.bucketArn), `/${p}*`]] });
    // Of the staging bucket (the applier also writes dead letters to the payload bucket).
    const staged = (rs: unknown[]): unknown[] => rs.filter((x) => JSON.stringify(x).includes(JSON.stringify(r(bucket.bucketArn))));
    const applier = statementsOf(t, 'WarehouseApplier');
    expect(staged(withAction(applier, 's3:PutObject'))).toEqual([objects('dw/requests/')]);
    expect(withAction(applier, 'lambda:InvokeFunction')).toEqual([r(s.redshiftLoader!.functionArn)]);
    const own = statementsOf(t, 'WarehouseRedshiftLoader');
    expect(withAction(own, 's3:PutObject')).toEqual([objects('dw/loads/')]);
    expect(JSON.stringify(own)).not.toContain('dw/requests/');
    expect(JSON.stringify(applier)).not.toContain('dw/loads/');
    expect(withAction(own, 'lambda:InvokeFunction')).toEqual([]);
    expect(withAction(own, 's3:GetObject')).toEqual([]);
    // Both may delete in their sink's load-request partition, and only there.
    for (const ss of [applier, own]) {
      const deletes = ss.filter((x) => x.Effect === 'Allow' && [x.Action].flat().includes('dynamodb:DeleteItem'));
      expect(JSON.stringify(deletes)).toContain('"LOADREQ#warehouse"');
      expect(deletes).toHaveLength(1);
    }
    // The bucket's key for encryption (GenerateDataKey), for both.
    for (const ss of [applier, own]) expect(withAction(ss, 'kms:GenerateDataKey*')).toContainEqual(r(key.keyArn));

    const env = (prefix: string): Record<string, unknown> =>
      (onlyResource(t, 'AWS::Lambda::Function', prefix).Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env('WarehouseApplier')).toMatchObject({
      CDC_REDSHIFT_STAGING_BUCKET: r(bucket.bucketName),
      CDC_REDSHIFT_STAGING_PREFIX: 'dw/',
      CDC_REDSHIFT_LOADER_FUNCTION: r(s.redshiftLoader!.functionName),
      CDC_REDSHIFT_LOAD_WAIT_MS: String(4 * 60_000),
    });
    // A batch waits for a load: 10,000 records a batch unless batchSize says otherwise.
    t.hasResourceProperties('AWS::Lambda::EventSourceMapping', { FunctionName: Match.anyValue(), BatchSize: 10_000 });
    expect(env('WarehouseRedshiftLoader')).toMatchObject({
      CDC_SINK_ID: 'warehouse',
      CDC_REDSHIFT_COPY_ROLE_ARN: r(s.copyRole!.roleArn),
      CDC_FRESHNESS_TARGET_MS: String(3 * 60_000),
      CDC_REDSHIFT_LOADER_TIMEOUT_MS: String(2 * 60_000),
    });
  });

  test('without redshiftStaging: no loader, nothing staged; an applier timeout under 2 minutes is refused with staging', () => {
    const f = fixture();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    expect(s.redshiftLoader).toBeUndefined();
    expect(resourcesOf(t, 'AWS::Lambda::Function').filter(([id]) => id.startsWith('WarehouseRedshiftLoader'))).toHaveLength(0);
    expect(JSON.stringify(t.toJSON())).not.toContain('CDC_REDSHIFT');
    t.hasResourceProperties('AWS::Lambda::EventSourceMapping', { BatchSize: 1000 });
    const k = fixture();
    sink(k, { redshiftStaging: { bucket: new s3.Bucket(k.stack, 'Staging') }, batchSize: 2500 });
    Template.fromStack(k.stack).hasResourceProperties('AWS::Lambda::EventSourceMapping', { BatchSize: 2500 });
    const g = fixture();
    const bucket = new s3.Bucket(g.stack, 'Staging');
    expect(() => sink(g, { redshiftStaging: { bucket }, timeout: Duration.seconds(90) })).toThrow(/timeout must be at least 2 minutes with redshiftStaging/);
  });
});
