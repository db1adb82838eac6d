import { Duration, RemovalPolicy, Size } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { describe, expect, test } from 'vitest';
import { parseTableConfig } from '../../lambda/core/tables/table-config.ts';
import { parseColumnRules } from '../../lambda/core/capture/task-lifecycle.ts';
import { BeforeImage, CapturedTable, CaptureMode, ChangeLog, DeleteMode, SourceDatabase } from '../../lib/index.ts';
import { fixture, onlyResource, ordersSource, parseJsonProperty, policyDocuments, resourcesOf } from './helpers.ts';

interface Rule {
  'rule-type': string;
  'rule-id': string;
  'rule-name': string;
  'rule-action': string;
  'object-locator': { 'schema-name': string; 'table-name': string; 'column-name'?: string };
  'data-type'?: { type: string; length: number };
}

function mappingsOf(t: Template): Rule[] {
  const task = onlyResource(t, 'AWS::DMS::ReplicationTask');
  return (parseJsonProperty(task.Properties.TableMappings) as { rules: Rule[] }).rules;
}

function settingsOf(t: Template): Record<string, Record<string, unknown>> {
  return parseJsonProperty(onlyResource(t, 'AWS::DMS::ReplicationTask').Properties.ReplicationTaskSettings) as Record<string, Record<string, unknown>>;
}

describe('CdcSource', () => {
  test('table mappings: a selection per table and the heartbeat, remove-column per excluded column, a hash mask per masked column', () => {
    const f = fixture();
    ordersSource(f, {
      tables: [
        CapturedTable.of('public.customers', { mask: ['email', 'phone'], exclude: ['ssn'] }),
        CapturedTable.of('sales.orders', { exclude: ['notes', 'internal_code'], deletes: DeleteMode.HARD, primaryKey: ['order_id'] }),
      ],
      heartbeatSchema: 'cdc',
    });
    const rules = mappingsOf(Template.fromStack(f.stack));
    expect(rules.map((r) => r['rule-id'])).toEqual(rules.map((_, i) => String(i + 1)));
    const selections = rules.filter((r) => r['rule-type'] === 'selection');
    expect(selections.map((r) => [r['object-locator']['schema-name'], r['object-locator']['table-name'], r['rule-action']])).toEqual([
      ['public', 'customers', 'include'],
      ['sales', 'orders', 'include'],
      ['cdc', 'cdc_heartbeat', 'include'],
    ]);
    const removed = rules
      .filter((r) => r['rule-action'] === 'remove-column')
      .map((r) => `${r['object-locator']['table-name']}.${r['object-locator']['column-name']}`);
    expect(removed).toEqual(['customers.ssn', 'orders.notes', 'orders.internal_code']);
    const masked = rules
      .filter((r) => r['rule-action'] === 'data-masking-hash-mask')
      .map((r) => `${r['object-locator']['table-name']}.${r['object-locator']['column-name']}`);
    expect(masked).toEqual(['customers.email', 'customers.phone']);
    // Each mask is preceded (lower rule id) by a widening of the same column to a wide string.
    for (const mask of rules.filter((r) => r['rule-action'] === 'data-masking-hash-mask')) {
      const widen = rules.find((r) => r['rule-action'] === 'change-data-type' && r['object-locator']['column-name'] === mask['object-locator']['column-name']);
      expect(widen).toBeDefined();
      expect(Number(widen!['rule-id'])).toBeLessThan(Number(mask['rule-id']));
      expect(widen!['data-type']).toEqual({ type: 'wstring', length: 4000 });
    }
    expect(new Set(rules.map((r) => r['rule-name'])).size).toBe(rules.length);
  });

  test('capture by pattern: DMS selection rules by wildcard with explicit exclusions, column rules by pattern, the rules in the handlers', () => {
    const f = fixture();
    const source = ordersSource(f, {
      tables: [
        CapturedTable.of('public.customers', { mask: ['email'] }),
        CapturedTable.matching('public.*', { exclude: ['public.audit_*', 'public.customers_old'] }),
        CapturedTable.matching('sales_2026.*', { mask: ['card_holder'], excludeColumns: ['cvv'], deletes: DeleteMode.HARD, primaryKey: ['order_id'] }),
      ],
    });
    const t = Template.fromStack(f.stack);
    const rules = mappingsOf(t);
    expect(rules.map((r) => r['rule-id'])).toEqual(rules.map((_, i) => String(i + 1)));
    expect(
      rules.filter((r) => r['rule-type'] === 'selection').map((r) => [r['object-locator']['schema-name'], r['object-locator']['table-name'], r['rule-action']]),
    ).toEqual([
      ['public', 'customers', 'include'],
      // DMS wildcards: % for *, and _ (itself a one-character wildcard in DMS) as a literal [_].
      ['public', '%', 'include'],
      ['public', 'audit[_]%', 'exclude'],
      ['public', 'customers[_]old', 'exclude'],
      ['sales[_]2026', '%', 'include'],
      ['public', 'cdc_heartbeat', 'include'],
    ]);
    const byPattern = rules.filter((r) => r['rule-type'] === 'transformation' && r['object-locator']['schema-name'] === 'sales[_]2026');
    expect(byPattern.map((r) => [r['rule-action'], r['object-locator']['table-name'], r['object-locator']['column-name']])).toEqual([
      ['remove-column', '%', 'cvv'],
      ['change-data-type', '%', 'card_holder'],
      ['data-masking-hash-mask', '%', 'card_holder'],
    ]);
    expect(new Set(rules.map((r) => r['rule-name'])).size).toBe(rules.length);
    // The normalizer and the snapshot worker get the rules; the table config keeps the declared tables.
    const envOf = (desc: RegExp) => {
      const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([, r]) => desc.test(String(r.Properties.Description)))![1];
      return (fn.Properties.Environment as { Variables: Record<string, string> }).Variables;
    };
    for (const env of [envOf(/^Turns DMS records/), envOf(/^Snapshots the existing rows/)]) {
      expect(JSON.parse(env.CDC_TABLE_RULES!)).toEqual([
        { match: 'public.*', excludeTables: ['public.audit_*', 'public.customers_old'], key: ['id'], deleteMode: 'soft', mask: [], exclude: [] },
        { match: 'sales_2026.*', excludeTables: [], key: ['order_id'], deleteMode: 'hard', mask: ['card_holder'], exclude: ['cvv'] },
      ]);
      expect(parseTableConfig(env.CDC_TABLE_CONFIG).map((c) => c.table)).toEqual(['public.customers', 'public.cdc_heartbeat']);
    }
    expect(source.tables.map((c) => c.pattern ?? c.tableId)).toEqual(['public.customers', 'public.*', 'sales_2026.*']);
  });

  test('capture by pattern: rules that would mean something else on DMS are refused at synth, naming the table and rule', () => {
    const refuse = (tables: CapturedTable[]) => () => ordersSource(fixture(), { tables });
    expect(refuse([CapturedTable.of('public.customers', { mask: ['email'] }), CapturedTable.matching('public.*', { mask: ['phone'] })])).toThrow(
      /table public\.customers is declared alone but also matches rule public\.\*, whose column rules \(phone\) DMS would apply to it too/,
    );
    expect(refuse([CapturedTable.of('public.audit_log'), CapturedTable.matching('public.*', { exclude: ['public.audit_*'] })])).toThrow(
      /table public\.audit_log is declared alone but rule public\.\* excludes it/,
    );
    expect(refuse([CapturedTable.matching('public.*', { mask: ['email'] }), CapturedTable.matching('public.a*')])).toThrow(
      /rules public\.\* and public\.a\* may match the same table/,
    );
    expect(refuse([CapturedTable.matching('public.*', { exclude: ['public.cdc_*'] })])).toThrow(
      /table public\.cdc_heartbeat is declared alone but rule public\.\* excludes it/,
    );
    expect(refuse([CapturedTable.matching('public.orders-*')])).toThrow(/table pattern "public\.orders-\*" must be 'schemaGlob\.tableGlob'/);
    // Allowed: a broad rule that excludes the narrower one, which masks; a declared table the rule also matches, without column rules.
    expect(() =>
      ordersSource(fixture(), {
        tables: [
          CapturedTable.matching('public.*', { exclude: ['public.audit_*'] }),
          CapturedTable.matching('public.audit_*', { mask: ['actor_email'] }),
          CapturedTable.of('public.orders'),
        ],
      }),
    ).not.toThrow();
  });

  test('replication task: cdc from the slot position, settings that stop rather than drop', () => {
    const f = fixture();
    ordersSource(f);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::DMS::ReplicationTask', {
      MigrationType: 'cdc',
      CdcStartPosition: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersReplicationSlot'), 'StartPosition'] },
      ReplicationTaskIdentifier: Match.stringLikeRegexp('^test-orders-cdc-[0-9a-f]{8}$'),
    });
    const settings = settingsOf(t);
    expect(settings.BeforeImageSettings).toEqual({ EnableBeforeImage: true, FieldName: 'before-image', ColumnFilter: 'pk-only' });
    expect(settings.TargetMetadata).toMatchObject({ BatchApplyEnabled: false, FullLobMode: false, LimitedSizeLobMode: true, LobMaxSize: 64 });
    const errors = settings.ErrorBehavior!;
    for (const key of [
      'DataErrorPolicy',
      'DataTruncationErrorPolicy',
      'DataMaskingErrorPolicy',
      'TableErrorPolicy',
      'ApplyErrorDeletePolicy',
      'ApplyErrorInsertPolicy',
      'ApplyErrorUpdatePolicy',
      'EventErrorPolicy',
    ]) {
      expect(errors[key], key).toBe('STOP_TASK');
    }
    expect(errors.FailOnNoTablesCaptured).toBe(true);
  });

  test('before image with all columns and a larger LOB limit when configured', () => {
    const f = fixture();
    ordersSource(f, { beforeImage: BeforeImage.ALL_COLUMNS, maxLobSize: Size.kibibytes(512) });
    const settings = settingsOf(Template.fromStack(f.stack));
    expect(settings.BeforeImageSettings).toMatchObject({ ColumnFilter: 'all' });
    expect(settings.TargetMetadata).toMatchObject({ LobMaxSize: 512 });
  });

  test('endpoints: postgres source via secret with test_decoding and the slot; kinesis target with the record format sinks rely on', () => {
    const f = fixture();
    const source = ordersSource(f, { captureDdls: false });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::DMS::Endpoint', {
      EndpointType: 'source',
      EngineName: 'postgres',
      DatabaseName: 'orders',
      // TLS verified by default, against the stack's certificate of RDS CAs.
      SslMode: 'verify-full',
      CertificateArn: { Ref: Match.stringLikeRegexp('^CdcRdsCaCertificate') },
      ServerName: Match.absent(),
      Username: Match.absent(),
      Password: Match.absent(),
      PostgreSqlSettings: Match.objectLike({
        PluginName: 'test-decoding',
        SlotName: 'cdc_orders',
        CaptureDdls: false,
        FailTasksOnLobTruncation: true,
        SecretsManagerSecretId: f.stack.resolve(f.sourceSecret.secretArn),
        SecretsManagerAccessRoleArn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersDmsSecretsRole'), 'Arn'] },
      }),
    });
    t.hasResourceProperties('AWS::DMS::Endpoint', {
      EndpointType: 'target',
      EngineName: 'kinesis',
      KinesisSettings: {
        MessageFormat: 'json-unformatted',
        IncludeTransactionDetails: true,
        IncludeControlDetails: true,
        IncludeTableAlterOperations: true,
        IncludeNullAndEmpty: true,
        PartitionIncludeSchemaTable: true,
        StreamArn: f.stack.resolve(source.rawStream.streamArn),
        ServiceAccessRoleArn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersDmsTargetRole'), 'Arn'] },
      },
    });
    // DMS's roles: the target role writes the raw stream, the secrets role reads the secret.
    t.hasResourceProperties('AWS::IAM::Role', {
      AssumeRolePolicyDocument: { Statement: [Match.objectLike({ Principal: { Service: 'dms.amazonaws.com' } })] },
    });
    t.hasResourceProperties('AWS::IAM::Policy', {
      Roles: [{ Ref: Match.stringLikeRegexp('^OrdersDmsSecretsRole') }],
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Action: Match.arrayWith(['secretsmanager:GetSecretValue']) })]) },
    });
  });

  test('replication instance: private, in the subnet group, engine 3.5.4 by default', () => {
    const f = fixture();
    const source = ordersSource(f, { multiAz: true });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::DMS::ReplicationInstance', {
      PubliclyAccessible: false,
      MultiAZ: true,
      EngineVersion: '3.5.4',
      ReplicationInstanceClass: 'dms.c5.large',
      AllocatedStorage: 50,
      ReplicationInstanceIdentifier: source.replicationInstanceIdentifier,
      ReplicationSubnetGroupIdentifier: { Ref: Match.stringLikeRegexp('^OrdersSubnetGroup') },
    });
    expect(source.replicationInstanceIdentifier).toMatch(/^[a-z][a-z0-9-]*[a-z0-9]$/);
    expect(source.replicationInstanceIdentifier).not.toContain('--');
  });

  test('normalizer: reads the raw stream with CDC-safe mapping settings, gets the table config, writes the change log', () => {
    const f = fixture();
    const source = ordersSource(f);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: f.stack.resolve(source.rawStream.streamArn),
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      BisectBatchOnFunctionError: true,
      // Outages delay, they never skip: no retry or record-age limit (-1 is CloudFormation's "infinite").
      MaximumRetryAttempts: -1,
      MaximumRecordAgeInSeconds: -1,
      ParallelizationFactor: 1,
      StartingPosition: 'TRIM_HORIZON',
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersNormalizerDeadLetterQueue'), 'Arn'] } } },
    });
    const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('OrdersNormalizer'))![1];
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env.CDC_SOURCE_ID).toBe('orders');
    expect(env.CDC_HEARTBEAT_SCHEMA).toBe('public');
    expect(parseJsonProperty(env.CDC_TABLE_CONFIG)).toEqual([
      { table: 'public.customers', key: ['id'], deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] },
      { table: 'public.orders', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] },
      // The heartbeat table, with the key its writer creates.
      { table: 'public.cdc_heartbeat', key: ['source_id'], deleteMode: 'soft', mask: [], exclude: [] },
    ]);
    expect(env.CDC_CHANGE_LOG_STREAM).toEqual(f.stack.resolve(f.log.stream.streamName));
    // Record aggregation is on by default (docs/architecture.md, "5.1 The change event"); the shard map needs ListShards.
    expect(f.log.recordAggregation).toBe(true);
    expect(env.CDC_CHANGE_LOG_AGGREGATION).toBe('on');
    const normalizerPolicy = policyDocuments(t).filter((d) => d.where.startsWith('OrdersNormalizer'));
    expect(JSON.stringify(normalizerPolicy)).toContain('kinesis:ListShards');
    expect(env.POWERTOOLS_METRICS_NAMESPACE).toBe('CdcPlatform');
    expect(fn.Properties).toMatchObject({ Runtime: 'nodejs24.x', Architectures: ['arm64'], Handler: 'index.handler', TracingConfig: { Mode: 'Active' } });
    // The normalizer's dead-letter queue: the source's own key (docs/deploy.md, "Keys").
    t.hasResourceProperties('AWS::SQS::Queue', {
      KmsMasterKeyId: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersKey'), 'Arn'] },
      MessageRetentionPeriod: 1209600,
    });
  });

  test('record aggregation off: a ChangeLog with recordAggregation false, or imported with it false, sets the normalizer off', () => {
    const f = fixture();
    const plain = new ChangeLog(f.stack, 'PlainLog', { recordAggregation: false });
    const imported = ChangeLog.fromChangeLogAttributes(f.stack, 'Imported', {
      streamArn: 'arn:aws:kinesis:us-east-1:123456789012:stream/theirs',
      retention: Duration.days(7),
      recordAggregation: false,
    });
    expect(
      ChangeLog.fromChangeLogAttributes(f.stack, 'ImportedDefault', {
        streamArn: 'arn:aws:kinesis:us-east-1:123456789012:stream/x',
        retention: Duration.days(7),
      }).recordAggregation,
    ).toBe(true);
    ordersSource(f, { changeLog: plain }, 'Plain');
    ordersSource(f, { changeLog: imported }, 'Theirs');
    const t = Template.fromStack(f.stack);
    for (const id of ['PlainNormalizer', 'TheirsNormalizer']) {
      const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([name]) => name.startsWith(id))![1];
      expect((fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables.CDC_CHANGE_LOG_AGGREGATION, id).toBe('off');
    }
  });

  test('heartbeat writer: every minute, six beats, in the VPC with the source security group', () => {
    const f = fixture();
    ordersSource(f);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [
        Match.objectLike({
          Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersHeartbeatWriter'), 'Arn'] },
          RetryPolicy: { MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 },
        }),
      ],
    });
    const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('OrdersHeartbeatWriter'))![1];
    expect((fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables).toMatchObject({
      CDC_HEARTBEAT_BEATS: '6',
      CDC_SOURCE_ID: 'orders',
      CDC_SOURCE_SECRET_ARN: f.stack.resolve(f.heartbeatSecret.secretArn),
      CDC_SOURCE_SSL_MODE: 'verify-full',
    });
    expect(fn.Properties.VpcConfig).toMatchObject({
      SecurityGroupIds: [{ 'Fn::GetAtt': [expect.stringMatching(/^OrdersHeartbeatWriterSecurityGroup/), 'GroupId'] }],
    });
    expect(fn.Properties.Timeout).toBe(80);
  });

  test('lifecycle: the slot is prepared before the task and the task started after it', () => {
    const f = fixture();
    ordersSource(f, { slotName: 'orders_slot', slotRemovalPolicy: RemovalPolicy.DESTROY });
    const t = Template.fromStack(f.stack);
    const slot = onlyResource(t, 'Custom::CdcReplicationSlot');
    expect(slot.Properties).toMatchObject({
      Action: 'prepare-slot',
      SlotName: 'orders_slot',
      DatabaseName: 'orders',
      RemoveSlotOnDelete: 'true',
      ServiceTimeout: '960',
    });
    const starter = onlyResource(t, 'Custom::CdcReplicationTaskStarter');
    expect(starter.Properties).toMatchObject({ Action: 'start-task', TaskArn: { Ref: expect.stringMatching(/^OrdersReplicationTask/) } });
    // Both carry the same hash of mappings and settings, so a change reaches both.
    expect(starter.Properties.ConfigHash).toBe(slot.Properties.ConfigHash);
    t.hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Action: 'dms:DescribeReplicationTasks', Resource: '*' }),
          Match.objectLike({ Action: 'dms:StopReplicationTask', Condition: { StringEquals: { 'aws:ResourceTag/cdc-platform:task': Match.anyValue() } } }),
        ]),
      },
    });
    t.hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: [
          Match.objectLike({
            Action: ['dms:StartReplicationTask', 'dms:StopReplicationTask'],
            Resource: { Ref: Match.stringLikeRegexp('^OrdersReplicationTask') },
          }),
        ],
      },
    });
  });

  test("late column rules: a Custom::CdcColumnRules resource carries every table's and rule's masks, exclusions and acknowledgements, ordered before the slot and the config readers, the starter after them", () => {
    const f = fixture();
    ordersSource(f, {
      tables: [
        CapturedTable.of('public.customers', { mask: ['email'], exclude: ['ssn'], acknowledgeLateRules: 'privacy review 42' }),
        CapturedTable.of('public.legacy', { capture: CaptureMode.POLL, pollColumn: 'updated_at', mask: ['name'] }),
        CapturedTable.matching('sales.*', { exclude: ['sales.audit_*'], mask: ['card_holder'], acknowledgeLateRules: 'ticket 9' }),
      ],
    });
    const t = Template.fromStack(f.stack);
    const [[id, resource]] = resourcesOf(t, 'Custom::CdcColumnRules') as [[string, { Properties: Record<string, unknown>; DependsOn?: string[] }]];
    expect(resource.Properties).toMatchObject({
      Action: 'check-column-rules',
      SourceId: 'orders',
      ServiceToken: { 'Fn::GetAtt': [expect.stringMatching(/^OrdersTaskLifecycle/), 'Arn'] },
    });
    // The handler's own parser reads what the construct writes.
    expect(parseColumnRules(resource.Properties.ColumnRules as string, 'ColumnRules')).toEqual({
      tables: [
        { table: 'public.customers', mask: ['email'], exclude: ['ssn'], acknowledgeLateRules: 'privacy review 42' },
        { table: 'public.legacy', mask: ['name'], exclude: [] },
      ],
      rules: [{ match: 'sales.*', excludeTables: ['sales.audit_*'], mask: ['card_holder'], exclude: [], acknowledgeLateRules: 'ticket 9' }],
    });
    const dependsOn = (type: string, prefix = '') => {
      const found = resourcesOf(t, type).filter(([i]) => i.startsWith(prefix));
      expect(found, `${type} ${prefix}`).toHaveLength(1);
      return (found[0]![1].DependsOn as string[] | undefined) ?? [];
    };
    expect(dependsOn('Custom::CdcReplicationSlot')).toContain(id);
    const readers = ['OrdersNormalizer', 'OrdersSnapshotWorker', 'OrdersPollWorker'].map(
      (p) => resourcesOf(t, 'AWS::Lambda::Function').find(([i]) => i.startsWith(p))![0],
    );
    for (const r of readers) expect(dependsOn('AWS::Lambda::Function', r), r).toContain(id);
    const starter = dependsOn('Custom::CdcReplicationTaskStarter');
    for (const r of readers) expect(starter).toContain(r);
    expect(onlyResource(t, 'Custom::CdcReplicationTaskStarter').Properties.SourceId).toBe('orders');
    // Its grants: the schemas (a rule's columns count where they exist), its digest checkpoint, snapshot requests.
    const lifecycle = policyDocuments(t)
      .filter((d) => d.where.startsWith('OrdersTaskLifecycle'))
      .flatMap((d) => d.doc.Statement);
    const keys = (action: string) =>
      lifecycle
        .filter((st) => [st.Action].flat().includes(action))
        .flatMap(
          (st) => (st.Condition as { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': string[] } })['ForAllValues:StringLike']['dynamodb:LeadingKeys'],
        );
    expect(keys('dynamodb:GetItem')).toEqual(expect.arrayContaining(['SOURCE#orders', 'SCHEMA#orders#*', 'CHECKPOINT#column-rules-orders']));
    expect(keys('dynamodb:PutItem')).toEqual(expect.arrayContaining(['AUDIT', 'SOURCE#orders', 'CHECKPOINT#column-rules-orders']));
    expect(keys('dynamodb:GetItem').some((k) => k.includes('#*') && !k.startsWith('SCHEMA#orders#'))).toBe(false);
  });

  test('the table config the normalizer gets is accepted by the runtime parser', () => {
    const f = fixture();
    ordersSource(f, {
      tables: [
        CapturedTable.of('public.customers', { mask: ['email'], exclude: ['ssn'] }),
        CapturedTable.of('public.order_items', { deletes: DeleteMode.HARD, primaryKey: ['order_id', 'line_no'] }),
      ],
    });
    const fn = resourcesOf(Template.fromStack(f.stack), 'AWS::Lambda::Function').find(([id]) => id.startsWith('OrdersNormalizer'))![1];
    const parsed = parseTableConfig((fn.Properties.Environment as { Variables: Record<string, string> }).Variables.CDC_TABLE_CONFIG);
    expect(parsed.map((c) => [c.table, c.key, c.deleteMode, c.mask, c.exclude])).toEqual([
      ['public.customers', ['id'], 'soft', ['email'], ['ssn']],
      ['public.order_items', ['order_id', 'line_no'], 'hard', [], []],
      ['public.cdc_heartbeat', ['source_id'], 'soft', [], []],
    ]);
  });

  test('with the database security group, the source admits itself before preparing the slot', () => {
    const f = fixture();
    const dbSg = new ec2.SecurityGroup(f.stack, 'DbSg', { vpc: f.vpc });
    ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        securityGroup: dbSg,
        port: 5433,
      }),
    });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::EC2::SecurityGroupIngress', {
      GroupId: f.stack.resolve(dbSg.securityGroupId),
      SourceSecurityGroupId: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersSecurityGroup'), 'GroupId'] },
      FromPort: 5433,
      ToPort: 5433,
      IpProtocol: 'tcp',
    });
    // The slot step's own group too, whose function prepares the slot.
    t.hasResourceProperties('AWS::EC2::SecurityGroupIngress', {
      GroupId: f.stack.resolve(dbSg.securityGroupId),
      SourceSecurityGroupId: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersTaskLifecycleSecurityGroup'), 'GroupId'] },
      FromPort: 5433,
    });
    const slot = resourcesOf(t, 'Custom::CdcReplicationSlot')[0]![1];
    expect(slot.DependsOn).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^OrdersDatabaseIngress/),
        expect.stringMatching(/^OrdersTaskLifecycleDatabaseIngress/),
        expect.stringMatching(/^OrdersTaskLifecycleDatabaseEgress/),
      ]),
    );
  });

  test('changing the captured tables changes the config hash', () => {
    const hashOf = (mask: string[]): unknown => {
      const f = fixture();
      ordersSource(f, { tables: [CapturedTable.of('public.customers', { mask })] });
      return onlyResource(Template.fromStack(f.stack), 'Custom::CdcReplicationSlot').Properties.ConfigHash;
    };
    expect(hashOf(['email'])).not.toEqual(hashOf(['email', 'phone']));
    expect(hashOf(['email'])).toEqual(hashOf(['email']));
  });

  test('alarms: DMS latency on the task dimensions, normalizer iterator age, dead letters, paused tables, heartbeat errors', () => {
    const f = fixture();
    const source = ordersSource(f, { alarmCdcLatencyThreshold: Duration.minutes(2) });
    const t = Template.fromStack(f.stack);
    expect(source.alarms).toHaveLength(12); // + slot monitor (3) and snapshot worker errors and stall (2)
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'AWS/DMS',
      MetricName: 'CDCLatencySource',
      Threshold: 120,
      Dimensions: Match.arrayWith([
        { Name: 'ReplicationInstanceIdentifier', Value: source.replicationInstanceIdentifier },
        { Name: 'ReplicationTaskIdentifier', Value: { 'Fn::Select': [6, { 'Fn::Split': [':', { Ref: Match.stringLikeRegexp('^OrdersReplicationTask') }] }] } },
      ]),
      AlarmName: 'Test-orders-cdc-latency-source',
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { Namespace: 'AWS/DMS', MetricName: 'CDCLatencyTarget' });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'AWS/Lambda',
      MetricName: 'IteratorAge',
      Threshold: Duration.days(7).toMilliseconds() / 4,
      Dimensions: [{ Name: 'FunctionName', Value: { Ref: Match.stringLikeRegexp('^OrdersNormalizer') } }],
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'CdcPlatform',
      MetricName: 'DeadLetters',
      Dimensions: Match.arrayWith([
        { Name: 'Source', Value: 'orders' },
        { Name: 'Stage', Value: 'normalizer' },
      ]),
    });
  });

  test('the source id defaults from the construct id', () => {
    const f = fixture();
    const source = ordersSource(f, {}, 'BillingDb');
    expect(source.sourceId).toBe('billing_db');
    expect(source.slotName).toBe('cdc_billing_db');
  });

  describe('fails', () => {
    test('fails with no tables', () => {
      expect(() => ordersSource(fixture(), { tables: [] })).toThrow(/^Test\/Orders: tables must not be empty; capture at least one table$/);
    });

    test('fails on a masked key column', () => {
      expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.customers', { mask: ['id', 'email'] })] })).toThrow(
        /^Test\/Orders: table public.customers: key column id cannot be masked \(keys identify rows in every sink\)$/,
      );
    });

    test('fails on an excluded key column', () => {
      expect(() =>
        ordersSource(fixture(), { tables: [CapturedTable.of('public.lines', { exclude: ['line_no'], primaryKey: ['order_id', 'line_no'] })] }),
      ).toThrow(/^Test\/Orders: table public.lines: key column line_no cannot be excluded/);
    });

    test('fails on a column both masked and excluded, a table twice, a bad table id', () => {
      expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.c', { mask: ['x'], exclude: ['x'] })] })).toThrow(
        /Test\/Orders: table public.c: column x is both masked and excluded/,
      );
      expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.c'), CapturedTable.of('public.c')] })).toThrow(
        /Test\/Orders: table public.c is captured twice/,
      );
      expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('customers')] })).toThrow(/Test\/Orders: table id "customers" must be 'schema.table'/);
      expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.c', { mask: ['e-mail'] })] })).toThrow(
        /Test\/Orders: table public.c: mask column "e-mail" must be a plain identifier/,
      );
    });

    test('fails when the heartbeat table is declared', () => {
      expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.cdc_heartbeat')] })).toThrow(
        /Test\/Orders: table public.cdc_heartbeat is the platform's heartbeat table/,
      );
    });

    test('fails on a bad source id or slot name', () => {
      expect(() => ordersSource(fixture(), { sourceId: 'Orders' })).toThrow(/^Test\/Orders: sourceId must match .* got "Orders"$/);
      expect(() => ordersSource(fixture(), { slotName: 'Slot-1' })).toThrow(/Test\/Orders: slotName must match/);
    });

    test('fails on masks with a DMS engine before 3.5.4', () => {
      expect(() => ordersSource(fixture(), { replicationEngineVersion: '3.5.3' })).toThrow(/Test\/Orders: masked columns need dms engine 3.5.4 or later/);
    });

    test('fails on a raw stream retention beyond what Kinesis allows, and on a LOB limit above 1 MiB', () => {
      expect(() => ordersSource(fixture(), { rawStreamRetention: Duration.days(366) })).toThrow(
        /Test\/Orders: rawStreamRetention must be between 24 hours and 8760 hours/,
      );
      expect(() => ordersSource(fixture(), { maxLobSize: Size.mebibytes(2) })).toThrow(/Test\/Orders: maxLobSize must be between 1 KiB and 1 MiB/);
    });

    test('fails when the table configuration would exceed the Lambda environment limit', () => {
      const tables = Array.from({ length: 80 }, (_, i) =>
        CapturedTable.of(`public.table_with_a_long_name_${i}`, { mask: ['email_address'], exclude: ['social_security'] }),
      );
      expect(() => ordersSource(fixture(), { tables })).toThrow(
        /Test\/Orders\/Normalizer: the lambda environment is about \d+ bytes, over lambda's 4096-byte limit \(CDC_TABLE_CONFIG alone is/,
      );
    });
  });
});
