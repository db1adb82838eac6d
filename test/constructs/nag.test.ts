/**
 * cdk-nag AwsSolutions over the example app and over every construct at its defaults: zero
 * unacknowledged errors or warnings, and every acknowledgement carries a reason.
 */
import { Validations, type App } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { describe, expect, test } from 'vitest';
import { buildExampleApp } from '../../bin/example-app.ts';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { PipelineDashboard, SearchSink, WarehouseConnection, WarehouseRebuild, WarehouseSink } from '../../lib/index.ts';
import { fixture, newApp, ordersSource, WAREHOUSE_PEER } from './helpers.ts';

function violationsOf(app: App, scope: IConstruct): string[] {
  const report = new AwsSolutionsChecks(app).validateScope(scope);
  return report.violations.map((v) => `${v.severity} ${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(', ')}`);
}

/** Every acknowledgement in the tree, as [path, rule id, reason]. */
function acknowledgements(scope: IConstruct): Array<[string, string, unknown]> {
  const found: Array<[string, string, unknown]> = [];
  for (const c of scope.node.findAll()) {
    for (const entry of c.node.metadata) {
      if (entry.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY) continue;
      for (const [id, value] of Object.entries(entry.data as Record<string, unknown>)) {
        const reason = typeof value === 'string' ? value : (value as { reason?: unknown } | null)?.reason;
        found.push([c.node.path, id, reason]);
      }
    }
  }
  return found;
}

describe('cdk-nag AwsSolutions', () => {
  test('the example app (each stage, the DMS service roles) has no unacknowledged findings', () => {
    const { app, stages, dmsServiceRoles } = buildExampleApp(newApp());
    const stacks = [stages.Dev.pipeline, stages.Prod.pipeline, ...dmsServiceRoles];
    expect(stacks).toHaveLength(3);
    for (const stack of stacks) expect(violationsOf(app, stack), stack.stackName).toEqual([]);
  });

  test('every construct at its defaults has no unacknowledged findings', () => {
    const f = fixture();
    const orders = ordersSource(f);
    const sink = new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders],
      connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
      vpc: f.vpc,
    });
    new WarehouseRebuild(f.stack, 'Rebuild', { controlPlane: f.controlPlane, changeLog: f.log, sink, vpc: f.vpc });
    new PipelineDashboard(f.stack, 'Dashboard', { sources: [orders], warehouseSinks: [sink] });
    new SearchSink(f.stack, 'Search', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders],
      domain: opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', 'https://search-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com'),
    });
    // The fixture's VPC is test scaffolding, not part of the library.
    Validations.of(f.vpc).acknowledge({ id: 'AwsSolutions-VPC7', reason: 'test fixture vpc; flow logs are the application’s choice' });
    expect(violationsOf(f.app, f.stack)).toEqual([]);
  });

  test('a Redshift sink with staging (its loader function and grants) has no unacknowledged findings', () => {
    const f = fixture();
    const key = new kms.Key(f.stack, 'StagingKey', { enableKeyRotation: true });
    const bucket = new s3.Bucket(f.stack, 'Staging', { encryption: s3.BucketEncryption.KMS, encryptionKey: key, enforceSSL: true });
    Validations.of(bucket).acknowledge({ id: 'AwsSolutions-S1', reason: 'test fixture bucket; access logging is the application’s choice' });
    new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [ordersSource(f)],
      connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
      vpc: f.vpc,
      redshiftStaging: { bucket },
    });
    Validations.of(f.vpc).acknowledge({ id: 'AwsSolutions-VPC7', reason: 'test fixture vpc; flow logs are the application’s choice' });
    expect(violationsOf(f.app, f.stack)).toEqual([]);
  });

  test('every acknowledgement states a reason', () => {
    const { app } = buildExampleApp(newApp());
    const acks = acknowledgements(app);
    expect(acks.length).toBeGreaterThan(10);
    for (const [where, id, reason] of acks) {
      expect(typeof reason === 'string' && reason.length >= 20, `${where} ${id}: ${String(reason)}`).toBe(true);
    }
    // Wildcard findings are acknowledged one by one (`Rule[finding]`), never the whole IAM5 rule.
    expect(acks.filter(([, id]) => /AwsSolutions-IAM5$/.test(id))).toEqual([]);
  });
});
