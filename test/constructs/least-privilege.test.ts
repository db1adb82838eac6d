/**
 * Least privilege and secure transport in the synthesized template (docs/deploy.md, "What each
 * function may do", "TLS", "Network"): the archive cannot be deleted by its delivery role or by
 * anyone but a break-glass role; the DMS lifecycle acts on this source's task only; each handler
 * reaches only its own control-plane partitions and can only append to the audit log; the
 * heartbeat writer has its own identity; TLS is verified by default; security groups have no
 * open egress; customer-managed keys can encrypt every queue and stream.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import { describe, expect, test } from 'vitest';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import {
  AwsApiEgress,
  CapturedTable,
  CaptureMode,
  ChangeLog,
  Reconciler,
  SearchSink,
  SourceDatabase,
  SslMode,
  WarehouseConnection,
  WarehouseSink,
} from '../../lib/index.ts';
import { DATABASE_PEER, fixture, type Fixture, newApp, onlyResource, ordersSource, resourcesOf, WAREHOUSE_PEER } from './helpers.ts';

type Statement = { Effect: string; Action: string | string[]; Resource: unknown; Condition?: Record<string, Record<string, unknown>> };

const actionsOf = (s: Statement): string[] => (Array.isArray(s.Action) ? s.Action : [s.Action]);

/** Every statement of the identity policies attached to the role whose logical id starts with `rolePrefix`. */
function roleStatements(t: Template, rolePrefix: string): Statement[] {
  const out: Statement[] = [];
  for (const [, p] of resourcesOf(t, 'AWS::IAM::Policy')) {
    const roles = (p.Properties.Roles as Array<{ Ref: string }> | undefined) ?? [];
    if (roles.some((r) => r.Ref.startsWith(rolePrefix))) out.push(...(p.Properties.PolicyDocument as { Statement: Statement[] }).Statement);
  }
  return out;
}

function sink(f: Fixture, source = ordersSource(f)): WarehouseSink {
  return new WarehouseSink(f.stack, 'Warehouse', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [source],
    connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
    vpc: f.vpc,
  });
}

/** The partitions a statement's `dynamodb:LeadingKeys` condition admits. */
function leadingKeys(s: Statement): string[] {
  return (s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys'] as string[] | undefined) ?? [];
}

describe('archive: no deletes', () => {
  test('the Firehose role has put and read on the archive, never s3:DeleteObject*, and the delivery depends on it', () => {
    const stack = new Stack(newApp(), 'S');
    new ChangeLog(stack, 'Log');
    const t = Template.fromStack(stack);
    const statements = roleStatements(t, 'LogArchiveDeliveryRole');
    const s3Actions = statements.flatMap(actionsOf).filter((a) => a.startsWith('s3:'));
    expect(s3Actions.sort()).toEqual([
      's3:AbortMultipartUpload',
      's3:GetBucketLocation',
      's3:GetObject',
      's3:ListBucket',
      's3:ListBucketMultipartUploads',
      's3:PutObject',
    ]);
    // Objects only under Firehose's own prefixes: the by-table archive a rebuild replays (change-log/) is the copier's alone.
    const objectResources = statements.filter((s) => actionsOf(s).includes('s3:PutObject')).flatMap((s) => s.Resource as unknown[]);
    expect(objectResources.map((r) => JSON.stringify(r))).toEqual([expect.stringContaining('/changes/*'), expect.stringContaining('/errors/*')]);
    // No policy anywhere in the template gives a delete on the archive to anyone.
    for (const [id, p] of resourcesOf(t, 'AWS::IAM::Policy')) {
      for (const s of (p.Properties.PolicyDocument as { Statement: Statement[] }).Statement) {
        if (s.Effect === 'Allow')
          expect(
            actionsOf(s).filter((a) => /^s3:(Delete|\*)/.test(a)),
            id,
          ).toEqual([]);
      }
    }
    const delivery = onlyResource(t, 'AWS::KinesisFirehose::DeliveryStream');
    expect(delivery.DependsOn).toEqual(expect.arrayContaining([expect.stringMatching(/^LogArchiveDeliveryPolicy/)]));
    expect((delivery.Properties.ExtendedS3DestinationConfiguration as { RoleARN: unknown }).RoleARN).toEqual({
      'Fn::GetAtt': [expect.stringMatching(/^LogArchiveDeliveryRole/), 'Arn'],
    });
    // CDK's default destination role is gone.
    expect(resourcesOf(t, 'AWS::IAM::Role').filter(([id]) => id.includes('S3DestinationRole'))).toEqual([]);
  });

  test('the bucket policy denies object and version deletes to every principal; noncurrent versions live as long as the archive', () => {
    const stack = new Stack(newApp(), 'S');
    new ChangeLog(stack, 'Log', { archiveRetention: Duration.days(400) });
    const t = Template.fromStack(stack);
    t.hasResourceProperties('AWS::S3::BucketPolicy', {
      Bucket: { Ref: Match.stringLikeRegexp('^LogArchive') },
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Sid: 'DenyArchiveDeletes',
            Effect: 'Deny',
            Principal: { AWS: '*' },
            Action: ['s3:DeleteObject', 's3:DeleteObjectVersion', 's3:BypassGovernanceRetention'],
            Condition: Match.absent(),
          }),
          Match.objectLike({
            Sid: 'DenyArchiveConfigurationChanges',
            Effect: 'Deny',
            Principal: { AWS: '*' },
            Action: [
              's3:PutLifecycleConfiguration',
              's3:PutBucketPolicy',
              's3:DeleteBucketPolicy',
              's3:PutBucketObjectLockConfiguration',
              's3:PutBucketVersioning',
              's3:PutReplicationConfiguration',
            ],
            Resource: { 'Fn::GetAtt': [Match.stringLikeRegexp('^LogArchive'), 'Arn'] },
            // Only a CloudFormation deployment may change them (the stack must stay updatable and deletable).
            Condition: { 'ForAllValues:StringNotEquals': { 'aws:CalledVia': ['cloudformation.amazonaws.com'] } },
          }),
        ]),
      },
    });
    const archive = onlyResource(t, 'AWS::S3::Bucket', 'LogArchive');
    const rules = (archive.Properties.LifecycleConfiguration as { Rules: Array<Record<string, unknown>> }).Rules;
    expect(rules).toContainEqual(
      expect.objectContaining({ Id: 'expire-at-archive-retention', ExpirationInDays: 400, NoncurrentVersionExpiration: { NoncurrentDays: 400 } }),
    );
  });

  test('break-glass roles are the only exception to the deny', () => {
    const stack = new Stack(newApp(), 'S');
    const breakGlass = new iam.Role(stack, 'BreakGlass', { assumedBy: new iam.AccountRootPrincipal() });
    new ChangeLog(stack, 'Log', { archiveBreakGlassRoles: [breakGlass] });
    Template.fromStack(stack).hasResourceProperties('AWS::S3::BucketPolicy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Sid: 'DenyArchiveDeletes',
            Effect: 'Deny',
            Condition: { ArnNotEquals: { 'aws:PrincipalArn': [stack.resolve(breakGlass.roleArn)] } },
          }),
          Match.objectLike({
            Sid: 'DenyArchiveConfigurationChanges',
            Effect: 'Deny',
            Condition: {
              ArnNotEquals: { 'aws:PrincipalArn': [stack.resolve(breakGlass.roleArn)] },
              'ForAllValues:StringNotEquals': { 'aws:CalledVia': ['cloudformation.amazonaws.com'] },
            },
          }),
        ]),
      },
    });
  });
});

describe('DMS lifecycle: this source task only', () => {
  test('start and stop name the task ARN; the slot step may only stop a task tagged as this one; no task:* without a condition', () => {
    const f = fixture();
    const source = ordersSource(f);
    const t = Template.fromStack(f.stack);
    const statements = roleStatements(t, 'OrdersTaskLifecycleServiceRole');
    const dms = statements.filter((s) => actionsOf(s).some((a) => a.startsWith('dms:')));
    for (const s of dms) {
      const actions = actionsOf(s);
      if (actions.includes('dms:StartReplicationTask')) expect(s.Resource).toEqual(f.stack.resolve(source.replicationTaskArn));
      if (JSON.stringify(s.Resource).includes(':task:*')) {
        expect(actions).toEqual(['dms:StopReplicationTask']);
        expect(s.Condition).toEqual({ StringEquals: { 'aws:ResourceTag/cdc-platform:task': source.replicationTaskIdentifier } });
      }
      expect(actions.filter((a) => a.includes('*') || a === 'dms:ModifyReplicationTask' || a.startsWith('dms:Delete'))).toEqual([]);
    }
    expect(dms.flatMap(actionsOf).sort()).toEqual([
      'dms:DescribeReplicationTasks',
      'dms:StartReplicationTask',
      'dms:StopReplicationTask',
      'dms:StopReplicationTask',
    ]);
    const task = onlyResource(t, 'AWS::DMS::ReplicationTask');
    expect(task.Properties.Tags).toEqual([{ Key: 'cdc-platform:task', Value: source.replicationTaskIdentifier }]);
  });
});

describe('control plane: own partitions, append-only audit', () => {
  test('the normalizer: LeadingKeys on its own source, no DeleteItem, Scan or BatchWriteItem, audit updates denied', () => {
    const f = fixture();
    ordersSource(f);
    const t = Template.fromStack(f.stack);
    const ddb = roleStatements(t, 'OrdersNormalizerServiceRole').filter((s) => actionsOf(s).some((a) => a.startsWith('dynamodb:')));
    const allow = ddb.filter((s) => s.Effect === 'Allow');
    const by = (action: string) =>
      allow
        .filter((s) => actionsOf(s).includes(action))
        .flatMap(leadingKeys)
        .sort();
    // CHECKPOINT#heartbeat:orders: the last accepted heartbeat, for the continuity check (docs/failures.md).
    // CHECKPOINT#catalog-orders: the catalog types the snapshot worker publishes, read only (docs/schema-drift.md).
    expect(by('dynamodb:GetItem')).toEqual(['CHECKPOINT#catalog-orders', 'CHECKPOINT#heartbeat:orders', 'SCHEMA#orders#*', 'SOURCE#orders']);
    expect(by('dynamodb:PutItem')).toEqual([
      'AUDIT',
      'CHECKPOINT#heartbeat:orders',
      'DEADLETTER#normalizer',
      'DEADLETTERS',
      'SCHEMA#orders#*',
      'SOURCE#orders',
    ]);
    expect(by('dynamodb:UpdateItem')).toEqual(['SOURCE#orders', 'SOURCES']);
    for (const s of allow) {
      expect(leadingKeys(s).length, JSON.stringify(s)).toBeGreaterThan(0);
      expect(actionsOf(s).filter((a) => ['dynamodb:DeleteItem', 'dynamodb:Scan', 'dynamodb:BatchWriteItem', 'dynamodb:*'].includes(a))).toEqual([]);
      expect(s.Resource).toEqual(f.stack.resolve(f.controlPlane.controlPlaneTableArn));
    }
    expect(ddb).toContainEqual(
      expect.objectContaining({
        Effect: 'Deny',
        Action: expect.arrayContaining(['dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem']),
        Condition: { 'ForAnyValue:StringEquals': { 'dynamodb:LeadingKeys': ['AUDIT'] } },
      }),
    );
    // No read of the audit log: a handler cannot learn an entry's key to overwrite it.
    expect(by('dynamodb:Query')).not.toContain('AUDIT');
  });

  test('catalog types at first sight: the snapshot worker (which reads the source) publishes them, the normalizer (which never connects to it) only reads them', () => {
    const f = fixture();
    ordersSource(f);
    const t = Template.fromStack(f.stack);
    const keysOf = (role: string, action: string) =>
      roleStatements(t, role)
        .filter((s) => s.Effect === 'Allow' && actionsOf(s).includes(action))
        .flatMap(leadingKeys)
        .filter((k) => k.startsWith('CHECKPOINT#catalog-'));
    expect(keysOf('OrdersNormalizerServiceRole', 'dynamodb:GetItem')).toEqual(['CHECKPOINT#catalog-orders']);
    expect(keysOf('OrdersNormalizerServiceRole', 'dynamodb:PutItem')).toEqual([]);
    expect(keysOf('OrdersSnapshotWorkerServiceRole', 'dynamodb:GetItem')).toEqual(['CHECKPOINT#catalog-orders']);
    expect(keysOf('OrdersSnapshotWorkerServiceRole', 'dynamodb:PutItem')).toEqual(['CHECKPOINT#catalog-orders']);
    const normalizer = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('OrdersNormalizer'))![1];
    expect((normalizer.Properties.Environment as { Variables: Record<string, string> }).Variables.CDC_CATALOG_TYPES).toBe('published');
    expect(normalizer.Properties.VpcConfig).toBeUndefined();
  });

  test('the applier: its own sink, the tables of its sources (read, degrade), its own dead letters; audit append-only', () => {
    const f = fixture();
    sink(f);
    const t = Template.fromStack(f.stack);
    const ddb = roleStatements(t, 'WarehouseApplierServiceRole').filter((s) => actionsOf(s).some((a) => a.startsWith('dynamodb:')));
    const allow = ddb.filter((s) => s.Effect === 'Allow');
    const by = (action: string) =>
      allow
        .filter((s) => actionsOf(s).includes(action))
        .flatMap(leadingKeys)
        .sort();
    expect(by('dynamodb:Query')).toEqual(['SCHEMA#orders#*', 'SINK#warehouse', 'SOURCE#orders']);
    expect(by('dynamodb:PutItem')).toEqual(['AUDIT', 'DEADLETTER#warehouse', 'DEADLETTERS']);
    expect(by('dynamodb:UpdateItem')).toEqual(['SINK#warehouse', 'SOURCE#orders']);
    expect(allow.flatMap(actionsOf).filter((a) => ['dynamodb:DeleteItem', 'dynamodb:Scan', 'dynamodb:BatchWriteItem'].includes(a))).toEqual([]);
    expect(ddb.some((s) => s.Effect === 'Deny' && JSON.stringify(s.Condition).includes('AUDIT'))).toBe(true);
  });
});

describe('identities and TLS', () => {
  test('the heartbeat writer has its own secret, never the capture secret', () => {
    const f = fixture();
    expect(() => SourceDatabase.postgres({ databaseName: 'd', secret: f.sourceSecret, heartbeatSecret: f.sourceSecret, peer: DATABASE_PEER })).toThrow(
      /heartbeatSecret must not be the capture secret/,
    );
    expect(() => SourceDatabase.postgres({ databaseName: 'd', secret: f.sourceSecret, peer: DATABASE_PEER } as never)).toThrow(/heartbeatSecret is required/);
    ordersSource(f);
    const t = Template.fromStack(f.stack);
    const reads = roleStatements(t, 'OrdersHeartbeatWriterServiceRole').filter((s) => actionsOf(s).includes('secretsmanager:GetSecretValue'));
    expect(reads).toHaveLength(1);
    expect(JSON.stringify(reads[0]!.Resource)).toContain(':secret:heartbeat');
    expect(JSON.stringify(reads[0]!.Resource)).not.toContain(':secret:source');
  });

  test('DMS verifies the source certificate with the RDS CAs by default (one certificate per stack), the functions get verify-full', () => {
    const f = fixture();
    ordersSource(f);
    ordersSource(f, {}, 'Billing');
    const t = Template.fromStack(f.stack);
    const certs = resourcesOf(t, 'AWS::DMS::Certificate');
    expect(certs).toHaveLength(1);
    const pem = certs[0]![1].Properties.CertificatePem as string;
    expect(pem.match(/-----BEGIN CERTIFICATE-----/g)!.length).toBeGreaterThan(50);
    expect(pem).toContain('-----END CERTIFICATE-----');
    t.allResourcesProperties('AWS::DMS::Endpoint', { EngineName: Match.anyValue() });
    for (const [, e] of resourcesOf(t, 'AWS::DMS::Endpoint').filter(([, e]) => e.Properties.EndpointType === 'source')) {
      expect(e.Properties).toMatchObject({ SslMode: 'verify-full', CertificateArn: { Ref: certs[0]![0] } });
    }
    for (const slot of resourcesOf(t, 'Custom::CdcReplicationSlot')) expect(slot[1].Properties.Ssl).toBe('verify-full');
  });

  test('a private CA and the explicit opt-out', () => {
    const f = fixture();
    const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
    const a = ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        caCertificatePem: pem,
        peer: DATABASE_PEER,
      }),
    });
    const b = ordersSource(
      f,
      {
        database: SourceDatabase.postgres({
          databaseName: 'orders',
          secret: f.sourceSecret,
          heartbeatSecret: f.heartbeatSecret,
          sslMode: SslMode.REQUIRE,
          peer: DATABASE_PEER,
        }),
      },
      'Test',
    );
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::DMS::Certificate', { CertificatePem: pem });
    const endpoints = resourcesOf(t, 'AWS::DMS::Endpoint').filter(([, e]) => e.Properties.EndpointType === 'source');
    expect(endpoints.find(([id]) => id.startsWith('OrdersSource'))![1].Properties).toMatchObject({
      SslMode: 'verify-full',
      CertificateArn: { Ref: expect.stringMatching(/^OrdersCaCertificate/) },
    });
    const optOut = endpoints.find(([id]) => id.startsWith('TestSource'))![1].Properties;
    expect(optOut.SslMode).toBe('require');
    expect(optOut.CertificateArn).toBeUndefined();
    const heartbeat = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('OrdersHeartbeatWriter'))![1];
    expect((heartbeat.Properties.Environment as { Variables: Record<string, string> }).Variables).toMatchObject({
      CDC_SOURCE_SSL_MODE: 'verify-full',
      CDC_SOURCE_CA_PEM: pem,
    });
    Annotations.fromStack(f.stack).hasWarning(`/${b.node.path}`, Match.stringLikeRegexp('server certificate is not verified'));
    expect(a.node.path).toBe('Test/Orders');
    expect(() =>
      SourceDatabase.postgres({ databaseName: 'd', secret: f.sourceSecret, heartbeatSecret: f.heartbeatSecret, caCertificatePem: 'nope', peer: DATABASE_PEER }),
    ).toThrow(/caCertificatePem must be PEM/);
  });

  test('the applier gets the warehouse TLS mode (verify-full by default)', () => {
    const f = fixture();
    sink(f);
    const fn = resourcesOf(Template.fromStack(f.stack), 'AWS::Lambda::Function').find(([id]) => id.startsWith('WarehouseApplier'))![1];
    expect((fn.Properties.Environment as { Variables: Record<string, string> }).Variables.CDC_WAREHOUSE_SSL_MODE).toBe('verify-full');
  });
});

describe('network: no open egress', () => {
  test('by default every security group of the platform sends only HTTPS to the VPC (endpoints) and the database or warehouse port; nothing to 0.0.0.0/0', () => {
    const f = fixture();
    // The test's own database groups send nothing either, so any 0.0.0.0/0 would be the platform's.
    const dbSg = new ec2.SecurityGroup(f.stack, 'DbSg', { vpc: f.vpc, allowAllOutbound: false });
    const whSg = new ec2.SecurityGroup(f.stack, 'WhSg', { vpc: f.vpc, allowAllOutbound: false });
    const source = ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        securityGroup: dbSg,
        port: 5432,
      }),
    });
    new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [source],
      connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, securityGroup: whSg }),
      vpc: f.vpc,
    });
    const t = Template.fromStack(f.stack);
    // No security group (or separate egress rule) in the template sends to 0.0.0.0/0.
    for (const type of ['AWS::EC2::SecurityGroup', 'AWS::EC2::SecurityGroupEgress']) {
      for (const [id, r] of resourcesOf(t, type)) expect(JSON.stringify(r.Properties), id).not.toContain('0.0.0.0/0');
    }
    const vpcCidr = f.stack.resolve(f.vpc.vpcCidrBlock);
    for (const prefix of ['OrdersSecurityGroup', 'WarehouseSecurityGroup']) {
      const sg = onlyResource(t, 'AWS::EC2::SecurityGroup', prefix);
      const egress = sg.Properties.SecurityGroupEgress as Array<Record<string, unknown>>;
      expect(egress).toEqual([expect.objectContaining({ IpProtocol: 'tcp', FromPort: 443, ToPort: 443, CidrIp: vpcCidr })]);
    }
    t.hasResourceProperties('AWS::EC2::SecurityGroupEgress', {
      GroupId: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersSecurityGroup'), 'GroupId'] },
      DestinationSecurityGroupId: f.stack.resolve(dbSg.securityGroupId),
      FromPort: 5432,
      ToPort: 5432,
    });
    t.hasResourceProperties('AWS::EC2::SecurityGroupEgress', {
      GroupId: { 'Fn::GetAtt': [Match.stringLikeRegexp('^WarehouseSecurityGroup'), 'GroupId'] },
      DestinationSecurityGroupId: f.stack.resolve(whSg.securityGroupId),
      FromPort: 5439,
      ToPort: 5439,
    });
    t.hasResourceProperties('AWS::EC2::SecurityGroupIngress', { GroupId: f.stack.resolve(whSg.securityGroupId), FromPort: 5439 });
  });

  test('each function in the VPC has its own security group; only those that talk to a database send to its port, and only to it', () => {
    const f = fixture();
    const dbSg = new ec2.SecurityGroup(f.stack, 'DbSg', { vpc: f.vpc, allowAllOutbound: false });
    const whSg = new ec2.SecurityGroup(f.stack, 'WhSg', { vpc: f.vpc, allowAllOutbound: false });
    const source = ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        securityGroup: dbSg,
        port: 5432,
      }),
      tables: [
        CapturedTable.of('public.orders'),
        CapturedTable.of('public.legacy', { capture: CaptureMode.POLL, pollColumn: 'updated_at', primaryKey: ['id'] }),
      ],
    });
    const warehouse = new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [source],
      connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, securityGroup: whSg }),
      vpc: f.vpc,
    });
    const search = new SearchSink(f.stack, 'Search', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [source],
      vpc: f.vpc,
      domain: opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', 'https://vpc-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com'),
      tables: [{ table: 'public.orders' }],
    });
    new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [source], sinks: [warehouse, search], vpc: f.vpc });
    const t = Template.fromStack(f.stack);
    const groupIdOf = (v: unknown): string => (v as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];

    // Every function in the VPC: exactly one security group, shared with no other function or the DMS instance.
    const groupOfFunction = new Map<string, string>();
    for (const [id, fn] of resourcesOf(t, 'AWS::Lambda::Function')) {
      const vpcConfig = fn.Properties.VpcConfig as { SecurityGroupIds: unknown[] } | undefined;
      if (!vpcConfig) continue;
      expect(vpcConfig.SecurityGroupIds, id).toHaveLength(1);
      groupOfFunction.set(id, groupIdOf(vpcConfig.SecurityGroupIds[0]));
    }
    const dmsGroups = resourcesOf(t, 'AWS::DMS::ReplicationInstance').flatMap(([, r]) => (r.Properties.VpcSecurityGroupIds as unknown[]).map(groupIdOf));
    const fnIds = [...groupOfFunction.keys()];
    for (const prefix of [
      'OrdersTaskLifecycle',
      'OrdersHeartbeatWriter',
      'OrdersSlotMonitor',
      'OrdersSnapshotWorker',
      'OrdersPollWorker',
      'WarehouseApplier',
      'SearchApplier',
      'ReconcilerFunctionordersw',
      'ReconcilerFunctionorderss',
    ]) {
      expect(
        fnIds.filter((id) => id.startsWith(prefix)),
        prefix,
      ).toHaveLength(1);
    }
    expect(new Set([...groupOfFunction.values(), ...dmsGroups]).size).toBe(groupOfFunction.size + dmsGroups.length);
    // The normalizer talks to Kinesis and DynamoDB only: it is not in the VPC.
    expect(fnIds.some((id) => id.startsWith('OrdersNormalizer'))).toBe(false);

    // Database rules: [group of, destination, port] for every separate egress rule.
    const egress = resourcesOf(t, 'AWS::EC2::SecurityGroupEgress').map(([, r]) => [
      groupIdOf(r.Properties.GroupId),
      f.stack.resolve(r.Properties.DestinationSecurityGroupId),
      r.Properties.FromPort,
      r.Properties.ToPort,
    ]);
    const fnGroup = (prefix: string): string => [...groupOfFunction].find(([id]) => id.startsWith(prefix))![1];
    const db = f.stack.resolve(dbSg.securityGroupId);
    const wh = f.stack.resolve(whSg.securityGroupId);
    const rulesOf = (group: string) => egress.filter(([g]) => g === group).map(([, to, from, toPort]) => [to, from, toPort]);
    for (const prefix of ['OrdersTaskLifecycle', 'OrdersHeartbeatWriter', 'OrdersSlotMonitor', 'OrdersSnapshotWorker', 'OrdersPollWorker']) {
      expect(rulesOf(fnGroup(prefix)), prefix).toEqual([[db, 5432, 5432]]);
    }
    expect(rulesOf(dmsGroups[0]!)).toEqual([[db, 5432, 5432]]);
    expect(rulesOf(fnGroup('WarehouseApplier'))).toEqual([[wh, 5439, 5439]]);
    expect(rulesOf(fnGroup('ReconcilerFunctionordersw'))).toEqual([
      [db, 5432, 5432],
      [wh, 5439, 5439],
    ]);
    // The search applier and the search sink's reconciler reach no warehouse; the latter only its source.
    expect(rulesOf(fnGroup('SearchApplier'))).toEqual([]);
    expect(rulesOf(fnGroup('ReconcilerFunctionorderss'))).toEqual([[db, 5432, 5432]]);
    // Each database admits exactly the groups that send to it.
    const ingress = resourcesOf(t, 'AWS::EC2::SecurityGroupIngress').map(([, r]) => [
      f.stack.resolve(r.Properties.GroupId),
      groupIdOf(r.Properties.SourceSecurityGroupId),
      r.Properties.FromPort,
    ]);
    const admitted = (target: unknown) =>
      ingress
        .filter(([g]) => JSON.stringify(g) === JSON.stringify(target))
        .map(([, from]) => from)
        .sort();
    expect(admitted(db)).toEqual(
      egress
        .filter(([, to]) => JSON.stringify(to) === JSON.stringify(db))
        .map(([g]) => g)
        .sort(),
    );
    expect(admitted(wh)).toEqual(
      egress
        .filter(([, to]) => JSON.stringify(to) === JSON.stringify(wh))
        .map(([g]) => g)
        .sort(),
    );
    // And every function's own group sends HTTPS to the VPC (endpoints) and nothing else inline.
    for (const [id, group] of [...groupOfFunction, ...dmsGroups.map((g) => ['dms', g] as const)]) {
      const sg = t.toJSON().Resources[group] as { Properties: { SecurityGroupEgress: unknown } };
      expect(sg.Properties.SecurityGroupEgress, id).toEqual([
        expect.objectContaining({ IpProtocol: 'tcp', FromPort: 443, ToPort: 443, CidrIp: f.stack.resolve(f.vpc.vpcCidrBlock) }),
      ]);
    }
    // source.connections names every member's group, so allowTo admits each of them.
    expect(source.connections.securityGroups).toHaveLength(6);
  });

  test('through a NAT gateway: HTTPS only, to any address', () => {
    const f = fixture();
    ordersSource(f, { awsApiEgress: AwsApiEgress.natGateway() });
    const sg = onlyResource(Template.fromStack(f.stack), 'AWS::EC2::SecurityGroup', 'OrdersSecurityGroup');
    expect(sg.Properties.SecurityGroupEgress).toEqual([expect.objectContaining({ IpProtocol: 'tcp', FromPort: 443, ToPort: 443, CidrIp: '0.0.0.0/0' })]);
  });
});

describe('customer-managed keys wherever data rests', () => {
  test("by default the source's own key (rotated, retained) encrypts the raw stream, the normalizer's dead-letter queue and every log group of the source; the change log's key its own", () => {
    const f = fixture();
    const source = ordersSource(f);
    const t = Template.fromStack(f.stack);
    const keyArn = f.stack.resolve(source.encryptionKey.keyArn);
    expect(keyArn).toEqual({ 'Fn::GetAtt': [expect.stringMatching(/^OrdersKey/), 'Arn'] });
    t.hasResource('AWS::KMS::Key', { Properties: { EnableKeyRotation: true, Description: Match.stringLikeRegexp('raw stream') }, DeletionPolicy: 'Retain' });
    expect(onlyResource(t, 'AWS::Kinesis::Stream', 'OrdersRawStream').Properties.StreamEncryption).toEqual({ EncryptionType: 'KMS', KeyId: keyArn });
    expect(onlyResource(t, 'AWS::SQS::Queue', 'OrdersNormalizerDeadLetterQueue').Properties.KmsMasterKeyId).toEqual(keyArn);
    const logGroups = resourcesOf(t, 'AWS::Logs::LogGroup');
    const sourceGroups = logGroups.filter(([id]) => id.startsWith('Orders'));
    expect(sourceGroups.length).toBeGreaterThanOrEqual(5);
    for (const [id, g] of sourceGroups) expect(g.Properties.KmsKeyId, id).toEqual(keyArn);
    const logKeyArn = f.stack.resolve(f.log.encryptionKey!.keyArn);
    for (const [id, g] of logGroups.filter(([i]) => i.startsWith('LogArchive'))) expect(g.Properties.KmsKeyId, id).toEqual(logKeyArn);
    // The normalizer decrypts the raw stream, encrypts into the change log and uses the control table: each with its own key only.
    const kmsResources = roleStatements(t, 'OrdersNormalizerServiceRole')
      .filter((x) => actionsOf(x).some((a) => a.startsWith('kms:')))
      .map((x) => JSON.stringify(x.Resource));
    const controlKeyArn = f.stack.resolve(f.controlPlane.encryptionKey.keyArn);
    expect(new Set(kmsResources)).toEqual(new Set([keyArn, logKeyArn, controlKeyArn].map((k) => JSON.stringify(k))));
  });

  test("by default a sink's dead-letter queue and applier log group are on the change log's key; a given dead-letter key wins for the queue", () => {
    const f = fixture();
    const w = sink(f);
    new SearchSink(f.stack, 'Search', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [w.sources[0]!],
      domain: opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', 'https://search-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com'),
    });
    const t = Template.fromStack(f.stack);
    const logKeyArn = f.stack.resolve(f.log.encryptionKey!.keyArn);
    for (const prefix of ['WarehouseDeadLetterQueue', 'SearchDeadLetterQueue'])
      expect(onlyResource(t, 'AWS::SQS::Queue', prefix).Properties.KmsMasterKeyId, prefix).toEqual(logKeyArn);
    for (const prefix of ['WarehouseApplierLogGroup', 'SearchApplierLogGroup'])
      expect(onlyResource(t, 'AWS::Logs::LogGroup', prefix).Properties.KmsKeyId, prefix).toEqual(logKeyArn);
  });

  test('raw stream and normalizer dead-letter queue with the source key; applier dead-letter queue with its own; change log and control plane take theirs', () => {
    const f = fixture();
    const key = new kms.Key(f.stack, 'SourceKey', { enableKeyRotation: true });
    const dlqKey = new kms.Key(f.stack, 'DlqKey', { enableKeyRotation: true });
    const source = ordersSource(f, { encryptionKey: key });
    new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [source],
      connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
      vpc: f.vpc,
      deadLetterQueueEncryptionKey: dlqKey,
    });
    const t = Template.fromStack(f.stack);
    expect(onlyResource(t, 'AWS::Kinesis::Stream', 'OrdersRawStream').Properties.StreamEncryption).toEqual({
      EncryptionType: 'KMS',
      KeyId: f.stack.resolve(key.keyArn),
    });
    expect(onlyResource(t, 'AWS::SQS::Queue', 'OrdersNormalizerDeadLetterQueue').Properties.KmsMasterKeyId).toEqual(f.stack.resolve(key.keyArn));
    expect(onlyResource(t, 'AWS::SQS::Queue', 'WarehouseDeadLetterQueue').Properties.KmsMasterKeyId).toEqual(f.stack.resolve(dlqKey.keyArn));
    // The control table is always on a customer-managed key.
    expect(onlyResource(t, 'AWS::DynamoDB::Table').Properties.SSESpecification).toMatchObject({ SSEEnabled: true, SSEType: 'KMS' });
  });
});
