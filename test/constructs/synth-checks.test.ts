/**
 * Synth-time checks of what a deployment would otherwise reveal: a second `DmsServiceRoles` in
 * one account, a VPC created in the app without the interface endpoints the default egress needs,
 * a database that nothing names (so no rule would open its port), and props that only a caller without the type checker (JavaScript, jsii
 * languages, TypeScript through `any`) can get wrong: unknown keys, enum values, list types.
 */
import { Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import { describe, expect, test } from 'vitest';
import {
  AwsApiEgress,
  CapturedTable,
  CaptureMode,
  DmsServiceRoles,
  Reconciler,
  SearchSink,
  SourceDatabase,
  WarehouseConnection,
  WarehouseRebuild,
  WarehouseSink,
} from '../../lib/index.ts';
import { addApiEndpoints, DATABASE_PEER, fixture, newApp, ordersSource, resourcesOf, WAREHOUSE_PEER } from './helpers.ts';

/** Props as a JavaScript caller may pass them. */
const js = <T>(value: unknown): T => value as T;

describe('DmsServiceRoles', () => {
  test('fails on a second one for the same account, naming both construct paths', () => {
    const app = newApp();
    new DmsServiceRoles(new Stack(app, 'RolesA', { env: { account: '111111111111', region: 'eu-west-1' } }), 'Roles');
    // IAM role names are per account: another region of the same account clashes too.
    expect(() => new DmsServiceRoles(new Stack(app, 'RolesB', { env: { account: '111111111111', region: 'us-east-1' } }), 'Roles')).toThrow(
      /^RolesB\/Roles: DmsServiceRoles is already created by RolesA\/Roles for the same account \(111111111111\)/,
    );
  });

  test('fails when either stack is environment-agnostic (it may deploy to the same account)', () => {
    const app = newApp();
    new DmsServiceRoles(new Stack(app, 'Known', { env: { account: '111111111111', region: 'eu-west-1' } }), 'Roles');
    expect(() => new DmsServiceRoles(new Stack(app, 'Agnostic'), 'Roles')).toThrow(/^Agnostic\/Roles: DmsServiceRoles is already created by Known\/Roles/);
  });

  test('one per account is fine, in one app', () => {
    const app = newApp();
    new DmsServiceRoles(new Stack(app, 'Dev', { env: { account: '111111111111', region: 'eu-west-1' } }), 'Roles');
    expect(() => new DmsServiceRoles(new Stack(app, 'Prod', { env: { account: '222222222222', region: 'eu-west-1' } }), 'Roles')).not.toThrow();
    // A second app is a second synthesis: it does not see the first.
    expect(() => new DmsServiceRoles(new Stack(newApp(), 'Dev', { env: { account: '111111111111', region: 'eu-west-1' } }), 'Roles')).not.toThrow();
  });
});

describe('props checked at runtime for callers without the type checker', () => {
  test('a misspelt table option fails, naming the table and suggesting the option', () => {
    expect(() => CapturedTable.of('public.customers', js({ masks: ['email'] }))).toThrow(
      /^CapturedTable\.of\("public\.customers"\): unknown prop `masks` \(did you mean `mask`\?\); known props: mask, exclude, deletes/,
    );
    expect(() => CapturedTable.matching('public.*', js({ excludeColumn: ['ssn'] }))).toThrow(
      /CapturedTable\.matching\("public\.\*"\): unknown prop `excludeColumn` \(did you mean `excludeColumns`\?\)/,
    );
  });

  test('a wrong enum value fails with the allowed values', () => {
    expect(() => CapturedTable.of('public.customers', js({ deletes: 'HARD' }))).toThrow(
      /prop `deletes` must be one of "soft", "hard" \(the enum's members\), got "HARD"/,
    );
    expect(() => CapturedTable.of('public.customers', js({ capture: 'polling' }))).toThrow(/prop `capture` must be one of "log", "poll"/);
  });

  test('a string where a list is expected fails, and so does a list of the wrong items', () => {
    expect(() => CapturedTable.of('public.customers', js({ mask: 'email' }))).toThrow(/prop `mask` must be a list of strings, got the string "email"/);
    expect(() => CapturedTable.of('public.customers', js({ exclude: ['ssn', 7] }))).toThrow(/prop `exclude` must be a list of strings; item 1 is a number/);
  });

  test('CdcSource: an unknown prop, a wrong enum value and table ids instead of CapturedTable items fail with the construct path', () => {
    expect(() => ordersSource(fixture(), js({ slotname: 'x' }))).toThrow(/^Test\/Orders: unknown prop `slotname` \(did you mean `slotName`\?\)/);
    expect(() => ordersSource(fixture(), js({ beforeImage: 'ALL' }))).toThrow(/^Test\/Orders: prop `beforeImage` must be one of "pk-only", "all"/);
    expect(() => ordersSource(fixture(), js({ tables: ['public.orders'] }))).toThrow(
      /^Test\/Orders: prop `tables` must hold CapturedTable items \(CapturedTable\.of or CapturedTable\.matching\); item 0 is string/,
    );
    expect(() => ordersSource(fixture(), js({ multiAz: 'yes' }))).toThrow(/^Test\/Orders: prop `multiAz` must be a boolean, got the string "yes"/);
  });

  test("WarehouseSink and SearchSink: unknown props and a search table's delete mode fail with the construct path", () => {
    const f = fixture();
    const orders = ordersSource(f);
    const connection = WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER });
    expect(
      () =>
        new WarehouseSink(
          f.stack,
          'Warehouse',
          js({ controlPlane: f.controlPlane, changeLog: f.log, sources: [orders], vpc: f.vpc, connection, batchsize: 10 }),
        ),
    ).toThrow(/^Test\/Warehouse: unknown prop `batchsize` \(did you mean `batchSize`\?\)/);
    const domain = opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', 'https://search-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com');
    expect(
      () =>
        new SearchSink(
          f.stack,
          'Search',
          js({ controlPlane: f.controlPlane, changeLog: f.log, sources: [orders], domain, tables: [{ table: 'public.orders', deletes: 'HARD' }] }),
        ),
    ).toThrow(/^Test\/Search: tables\[0\]: prop `deletes` must be one of "soft", "hard"/);
    expect(
      () => new SearchSink(f.stack, 'Search2', js({ controlPlane: f.controlPlane, changeLog: f.log, sources: [orders], domain, indexprefix: 'x' })),
    ).toThrow(/^Test\/Search2: unknown prop `indexprefix` \(did you mean `indexPrefix`\?\)/);
  });
});

describe('AwsApiEgress.vpcEndpoints() (the default) in a VPC created in the app', () => {
  const ALL =
    'Kinesis Data Streams \\(com\\.amazonaws\\.<region>\\.kinesis-streams\\), Secrets Manager .*, DMS .*, DynamoDB .*, S3 .*, CloudWatch \\(com\\.amazonaws\\.<region>\\.monitoring\\)';
  /** The fixture with a second VPC that has no endpoints (the fixture's own has them all). */
  const bare = () => {
    const f = fixture();
    return { f, vpc: new ec2.Vpc(f.stack, 'Bare', { maxAzs: 2, natGateways: 1 }) };
  };

  test('synth fails on each construct, with its path, naming every missing endpoint and the fixes', () => {
    const { f, vpc } = bare();
    const orders = ordersSource({ ...f, vpc });
    new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders],
      vpc,
      connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
    });
    let message = '';
    try {
      f.app.synth();
    } catch (e) {
      message = (e as Error).message;
    }
    // One error per construct, however many security groups it has.
    expect(message.match(/\[Test\/Orders\] awsApiEgress is AwsApiEgress\.vpcEndpoints\(\)/g)).toHaveLength(1);
    expect(message.match(/\[Test\/Warehouse\] awsApiEgress is AwsApiEgress\.vpcEndpoints\(\)/g)).toHaveLength(1);
    expect(message).toMatch(
      new RegExp(
        `VPC Test/Bare has no interface endpoint for ${ALL}, so these calls could not leave the VPC\\. Pass awsApiEgress: AwsApiEgress\\.natGateway\\(\\)`,
      ),
    );
    expect(message).toMatch(/or create the interface endpoints with private DNS in this VPC/);
  });

  test('only the missing ones are named; a gateway endpoint does not count (HTTPS goes to the VPC CIDR only)', () => {
    const { f, vpc } = bare();
    vpc.addInterfaceEndpoint('Kinesis', { service: ec2.InterfaceVpcEndpointAwsService.KINESIS_STREAMS });
    vpc.addInterfaceEndpoint('Secrets', { service: ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER });
    vpc.addInterfaceEndpoint('Dynamo', { service: ec2.InterfaceVpcEndpointAwsService.DYNAMODB });
    vpc.addInterfaceEndpoint('Monitoring', { service: ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING });
    vpc.addGatewayEndpoint('S3Gateway', { service: ec2.GatewayVpcEndpointAwsService.S3 });
    ordersSource({ ...f, vpc });
    expect(() => f.app.synth()).toThrow(
      /\[Test\/Orders\] .*VPC Test\/Bare has no interface endpoint for DMS \(com\.amazonaws\.<region>\.dms\), S3 \(com\.amazonaws\.<region>\.s3\), so/,
    );
  });

  test('an endpoint of another VPC does not count', () => {
    const { f, vpc } = bare();
    ordersSource({ ...f, vpc });
    // The fixture's own VPC has every endpoint; the bare one still has none.
    expect(() => f.app.synth()).toThrow(new RegExp(`VPC Test/Bare has no interface endpoint for ${ALL}, so`));
  });

  test('synthesizes with every endpoint, with natGateway() or peers(...), and with an imported VPC', () => {
    const withEndpoints = fixture();
    ordersSource(withEndpoints);
    expect(() => withEndpoints.app.synth()).not.toThrow();

    const added = bare();
    addApiEndpoints(added.vpc);
    ordersSource({ ...added.f, vpc: added.vpc });
    expect(() => added.f.app.synth()).not.toThrow();

    const nat = bare();
    ordersSource({ ...nat.f, vpc: nat.vpc }, { awsApiEgress: AwsApiEgress.natGateway() });
    expect(() => nat.f.app.synth()).not.toThrow();

    const peers = bare();
    ordersSource({ ...peers.f, vpc: peers.vpc }, { awsApiEgress: AwsApiEgress.peers(ec2.Peer.ipv4('10.0.0.0/8')) });
    expect(() => peers.f.app.synth()).not.toThrow();

    // Synth cannot see an imported VPC's endpoints: no check (docs/deploy.md, section 9).
    const imported = fixture();
    const vpc = ec2.Vpc.fromVpcAttributes(imported.stack, 'Imported', {
      vpcId: 'vpc-0123',
      vpcCidrBlock: '10.1.0.0/16',
      availabilityZones: ['eu-west-1a'],
      privateSubnetIds: ['subnet-0123'],
    });
    ordersSource({ ...imported, vpc });
    expect(() => imported.app.synth()).not.toThrow();
  });
});

describe('the database port is opened only to the database the props name', () => {
  const egressOf = (t: Template) =>
    resourcesOf(t, 'AWS::EC2::SecurityGroupEgress').map(([id, r]) => ({ id, ...r.Properties }) as Record<string, unknown> & { id: string });

  test('a source or a warehouse named by neither security group nor address fails, with the path, the option and the fix', () => {
    const f = fixture();
    const database = SourceDatabase.postgres({ databaseName: 'orders', secret: f.sourceSecret, heartbeatSecret: f.heartbeatSecret });
    expect(() => ordersSource(f, { database })).toThrow(
      /^Test\/Orders: nothing names the source database's network, so no rule would open port 5432 to it and the security groups here send nowhere else\. Pass SourceDatabase\.postgres\(\{ …, securityGroup \}\) .*or SourceDatabase\.postgres\(\{ …, peer: ec2\.Peer\.ipv4\('10\.0\.0\.0\/24'\) \}\)/,
    );
    const orders = ordersSource(f, {}, 'Shop');
    for (const [factory, connection] of [
      ['redshift', WarehouseConnection.redshift({ secret: f.warehouseSecret })],
      ['postgres', WarehouseConnection.postgres({ secret: f.warehouseSecret, port: 6432 })],
    ] as const) {
      expect(
        () => new WarehouseSink(f.stack, `Warehouse${factory}`, { controlPlane: f.controlPlane, changeLog: f.log, sources: [orders], vpc: f.vpc, connection }),
      ).toThrow(
        new RegExp(
          `^Test/Warehouse${factory}: nothing names the warehouse's network, so no rule would open port ${factory === 'redshift' ? 5439 : 6432} to it.*WarehouseConnection\\.${factory}\\(\\{ …, securityGroup \\}\\)`,
        ),
      );
    }
  });

  test('named by address: every member of the source, the applier, the rebuild worker and the reconciler send the port there, and only there', () => {
    const f = fixture();
    const orders = ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        peer: ec2.Peer.ipv4('10.9.0.0/24'),
        port: 5433,
      }),
      tables: [CapturedTable.of('public.orders'), CapturedTable.of('public.items', { capture: CaptureMode.POLL, pollColumn: 'updated_at' })],
    });
    const sink = new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders],
      vpc: f.vpc,
      connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: ec2.Peer.prefixList('pl-0123456789abcdef0') }),
    });
    new WarehouseRebuild(f.stack, 'Rebuild', { controlPlane: f.controlPlane, changeLog: f.log, sink, vpc: f.vpc });
    new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [orders], sinks: [sink], vpc: f.vpc });
    const t = Template.fromStack(f.stack);
    // No ingress rule: a database named by address is admitted on its own side.
    expect(resourcesOf(t, 'AWS::EC2::SecurityGroupIngress')).toEqual([]);
    const groupOf = (e: Record<string, unknown>) => (e.GroupId as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const toDatabase = egressOf(t).filter((e) => e.CidrIp === '10.9.0.0/24');
    const toWarehouse = egressOf(t).filter((e) => e.DestinationPrefixListId === 'pl-0123456789abcdef0');
    expect(toDatabase.length + toWarehouse.length).toBe(egressOf(t).length);
    for (const e of toDatabase) expect(e).toMatchObject({ IpProtocol: 'tcp', FromPort: 5433, ToPort: 5433 });
    for (const e of toWarehouse) expect(e).toMatchObject({ IpProtocol: 'tcp', FromPort: 5439, ToPort: 5439 });
    // Every database-facing group of the source (DMS, slot step, heartbeat, slot monitor, snapshot, poll) and the reconciler's, once each.
    const kind = (e: Record<string, unknown>) => groupOf(e).replace(/[0-9A-F]{8}$/, '');
    expect(toDatabase.map(kind).sort()).toEqual(
      [
        'OrdersHeartbeatWriterSecurityGroup',
        'OrdersPollWorkerSecurityGroup',
        'OrdersSecurityGroup',
        'OrdersSlotMonitorSecurityGroup',
        'OrdersSnapshotWorkerSecurityGroup',
        'OrdersTaskLifecycleSecurityGroup',
        'ReconcilerSecurityGrouporderswarehouse',
      ].sort(),
    );
    expect(toWarehouse.map(kind).sort()).toEqual(['RebuildSecurityGroup', 'ReconcilerSecurityGrouporderswarehouse', 'WarehouseSecurityGroup']);
    // The slot is prepared after the replication instance's and the slot step's rules exist.
    const slot = resourcesOf(t, 'Custom::CdcReplicationSlot')[0]![1];
    const ruleIds = toDatabase.filter((e) => /^Orders(SecurityGroup|TaskLifecycleSecurityGroup)[0-9A-F]{8}$/.test(groupOf(e))).map((e) => e.id);
    expect(ruleIds).toHaveLength(2);
    expect(slot.DependsOn).toEqual(expect.arrayContaining(ruleIds));
  });

  test('the options refuse both names at once, a security group given as an address, and a value that is no peer', () => {
    const f = fixture();
    const group = new ec2.SecurityGroup(f.stack, 'DbSg', { vpc: f.vpc });
    const base = { databaseName: 'orders', secret: f.sourceSecret, heartbeatSecret: f.heartbeatSecret };
    expect(() => SourceDatabase.postgres({ ...base, securityGroup: group, peer: DATABASE_PEER })).toThrow(
      /^SourceDatabase\.postgres: give securityGroup or peer, not both/,
    );
    expect(() => WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: group })).toThrow(
      /^WarehouseConnection\.redshift: peer is a security group; pass it as securityGroup \(adds the ingress rule there too\), or as ec2\.Peer\.securityGroupId/,
    );
    expect(() => SourceDatabase.postgres(js({ ...base, peer: '10.0.0.0/24' }))).toThrow(
      /^SourceDatabase\.postgres: peer must be an ec2\.IPeer \(ec2\.Peer\.ipv4\('10\.0\.0\.0\/24'\).*got the string "10\.0\.0\.0\/24"/,
    );
    // Egress only to a group another stack owns: by id.
    const orders = ordersSource(f, { database: SourceDatabase.postgres({ ...base, peer: ec2.Peer.securityGroupId('sg-0123456789abcdef0') }) });
    const t = Template.fromStack(f.stack);
    expect(resourcesOf(t, 'AWS::EC2::SecurityGroupIngress')).toEqual([]);
    expect(egressOf(t).filter((e) => e.DestinationSecurityGroupId === 'sg-0123456789abcdef0')).toHaveLength(orders.connections.securityGroups.length);
  });
});
